"""The drivers' gather contract (issue 34, item 4): every sub-step of a gather ends before
the first failure is thrown into the step that gathered them. ``write_all`` gathers its
items' locks and writes; when one fails (a false condition) while a sibling's lock is still
in flight, the transaction must roll back only after that lock landed, or the lock and its
write would land afterwards, on a rolled-back transaction, and stay on the item.

The sibling's lock is held back until the transaction has rolled back and completed, or for
half a second at most: with the contract kept the rollback never comes first, so the outcome
does not depend on the delay. Both drivers, both emulators.

Planted check: a driver that throws the first failure in at once (the asyncio driver's
``asyncio.gather`` without ``return_exceptions``, or the sync pool returning at the first
failed future) leaves item b locked here.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

import pytest

from ddbtx import ConditionalCheckFailedError, TransactionManager, aio
from ddbtx import schema as s
from ddbtx.local import LocalDynamo
from drivers import EventLoopThread
from helpers import FakeClock, Tables, assert_clean, data_state

HOLD = 0.5  # seconds b's lock waits at most for a (wrong) rollback decision


def batch(table: str) -> list[dict[str, Any]]:
    """a with a false condition, b a plain update: a fails while b's lock is in flight."""
    return [
        {
            "Update": {
                "TableName": table,
                "Key": {"pk": {"S": "a"}},
                "UpdateExpression": "ADD balance :n",
                "ConditionExpression": "balance > :big",
                "ExpressionAttributeValues": {":n": {"N": "1"}, ":big": {"N": "1000"}},
            }
        },
        {
            "Update": {
                "TableName": table,
                "Key": {"pk": {"S": "b"}},
                "UpdateExpression": "ADD balance :n",
                "ExpressionAttributeValues": {":n": {"N": "1"}},
            }
        },
    ]


class Hold:
    """Tells b's lock and write (held back) from the rolled-back record's completion (whose
    answer releases them)."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables

    def is_b_lock(self, operation: str, params: dict[str, Any]) -> bool:
        return (
            operation == "update_item"
            and params.get("TableName") == self.tables.data
            and params.get("Key") == {"pk": {"S": "b"}}
            and s.ATTR_LOCK in (params.get("ExpressionAttributeNames") or {}).values()
        )

    def is_rolled_back_completion(self, operation: str, params: dict[str, Any]) -> bool:
        names = (params.get("ExpressionAttributeNames") or {}).values()
        values = (params.get("ExpressionAttributeValues") or {}).values()
        return (
            params.get("TableName") == self.tables.tx
            and s.TX_COMPLETED in names
            and {"S": s.STATE_ROLLED_BACK} in values
        )


class HeldSync(Hold):
    """A boto3 client whose lock of b waits for the rolled-back record's completion (or
    ``HOLD``)."""

    def __init__(self, client: Any, tables: Tables) -> None:
        super().__init__(tables)
        self._client = client
        self.meta = client.meta
        self.completed = threading.Event()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)

        def call(**params: Any) -> Any:
            if self.is_b_lock(name, params):
                self.completed.wait(HOLD)
            response = method(**params)
            if self.is_rolled_back_completion(name, params):
                self.completed.set()
            return response

        return call


class HeldAsync(Hold):
    """The same for an aiobotocore client."""

    def __init__(self, client: Any, tables: Tables) -> None:
        super().__init__(tables)
        self._client = client
        self.meta = client.meta
        self.completed = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)

        async def call(**params: Any) -> Any:
            if self.is_b_lock(name, params):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.completed.wait(), HOLD)
            response = await method(**params)
            if self.is_rolled_back_completion(name, params):
                self.completed.set()
            return response

        return call


@pytest.fixture
def seeded(ddb: Any, tables: Tables) -> Tables:
    """Given a and b, 10 each."""
    for pk in ("a", "b"):
        ddb.put_item(TableName=tables.data, Item={"pk": {"S": pk}, "balance": {"N": "10"}})
    return tables


def test_given_a_failing_batch_item_and_a_slow_sibling_then_sync_rolls_back_after_both(
    backend: LocalDynamo, ddb: Any, seeded: Tables, clock: FakeClock
) -> None:
    # Given a manager (several item steps at once) whose lock of b is slow
    client = HeldSync(backend.client(), seeded)
    tm = TransactionManager(client, seeded.tx, seeded.images, clock=clock.time, max_workers=4)
    # When a batch fails on a while b's lock is in flight
    with pytest.raises(ConditionalCheckFailedError), tm.transaction() as tx:
        tx.write_all(batch(seeded.data))
    # Then the rollback came after b's lock and write, and undid them: nothing is left
    assert {pk: item["balance"]["N"] for pk, item in data_state(ddb, seeded.data).items()} == {
        "a": "10",
        "b": "10",
    }
    assert_clean(ddb, seeded)


def test_given_a_failing_batch_item_and_a_slow_sibling_then_asyncio_rolls_back_after_both(
    backend: LocalDynamo,
    ddb: Any,
    seeded: Tables,
    clock: FakeClock,
    event_loop_thread: EventLoopThread,
    run: Callable[[Any], Any],
) -> None:
    # Given an asyncio manager whose lock of b is slow
    client = HeldAsync(event_loop_thread.client(backend), seeded)
    tm = aio.TransactionManager(client, seeded.tx, seeded.images, clock=clock.time)

    async def failing_batch() -> None:
        async with tm.transaction() as tx:
            await tx.write_all(batch(seeded.data))

    # When a batch fails on a while b's lock is in flight
    with pytest.raises(ConditionalCheckFailedError):
        run(failing_batch)
    # Then the rollback came after b's lock and write, and undid them: nothing is left
    assert {pk: item["balance"]["N"] for pk, item in data_state(ddb, seeded.data).items()} == {
        "a": "10",
        "b": "10",
    }
    assert_clean(ddb, seeded)
