"""The asyncio transaction manager (``ddbtx.aio``): the same steps as ``ddbtx`` on an
aiobotocore client, with coroutines, ``async with`` and ``async for``.

Each scenario is a coroutine run on the session's event-loop thread, against moto and
dynalite. A sync and an asyncio coordinator share one transaction, and a sync
sweeper completes what a dead asyncio coordinator left; the request counts of the two
drivers are equal, request for request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from boto3.dynamodb.conditions import Attr

from ddbtx import (
    ConditionalCheckFailedError,
    Isolation,
    SweepOutcome,
    TransactionManager,
    TransactionOutcomeUnknownError,
    TransactionRolledBackError,
    aio,
)
from ddbtx import schema as s
from ddbtx._stores import entry_rows as _entry_rows
from ddbtx.instrumentation import count_requests
from ddbtx.local import LocalDynamo
from drivers import EventLoopThread, Scenario
from helpers import FakeClock, Tables, assert_clean, records_left


@pytest.fixture
def make_aio_tm(
    backend: LocalDynamo, tables: Tables, clock: FakeClock, event_loop_thread: EventLoopThread
) -> Callable[..., aio.TransactionManager]:
    """An asyncio coordinator: its own aiobotocore client on the shared tables and the
    fake clock (a pause moves the clock, then yields to the loop)."""

    async def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        await asyncio.sleep(0)

    def make(
        wrap: Callable[[Any], Any] = lambda client: client, **options: Any
    ) -> aio.TransactionManager:
        settings: dict[str, Any] = {
            "clock": clock.time,
            "monotonic": clock.monotonic,
            "sleep": sleep,
            "lock_wait": 5.0,
            "stale_after": 3.0,
            **options,
        }
        client = wrap(event_loop_thread.client(backend))
        return aio.TransactionManager(client, tables.tx, tables.images, **settings)

    return make


@dataclass
class Both:
    """What every test here uses: a maker of asyncio and of sync coordinators on the same
    tables and fake clock, ``run`` for a scenario, and the tables with a plain client."""

    make_aio_tm: Callable[..., aio.TransactionManager]
    make_tm: Callable[..., TransactionManager]
    run: Callable[[Scenario], Any]
    clock: FakeClock
    ddb: Any
    tables: Tables
    seed: Callable[..., None]


@pytest.fixture
def w(
    make_aio_tm: Callable[..., aio.TransactionManager],
    make_tm: Callable[..., TransactionManager],
    run: Callable[[Scenario], Any],
    clock: FakeClock,
    ddb: Any,
    tables: Tables,
    seed: Callable[..., None],
) -> Both:
    return Both(make_aio_tm, make_tm, run, clock, ddb, tables, seed)


def add(table: str, pk: str, amount: int) -> dict[str, Any]:
    return {
        "TableName": table,
        "Key": {"pk": {"S": pk}},
        "UpdateExpression": "ADD balance :n",
        "ExpressionAttributeValues": {":n": {"N": str(amount)}},
    }


def balances(ddb: Any, tables: Tables, *pks: str) -> list[str | None]:
    out: list[str | None] = []
    for pk in pks:
        item = ddb.get_item(TableName=tables.data, Key={"pk": {"S": pk}}).get("Item")
        out.append(item["balance"]["N"] if item else None)
    return out


def test_given_two_accounts_when_an_async_transfer_commits_then_it_costs_what_a_sync_one_does(
    w: Both,
) -> None:
    # Given two accounts, and a sync and an asyncio manager that have seen the data table
    w.seed(a=100, b=0)
    sync_tm, aio_tm = w.make_tm(), w.make_aio_tm()
    sync_tm.key_types(w.tables.data)
    w.run(lambda: aio_tm.key_types(w.tables.data))

    # When each moves 10 from a to b in a transaction
    with count_requests(sync_tm.client) as sync_sent, sync_tm.transaction() as tx:
        tx.update_item(**add(w.tables.data, "a", -10))
        tx.update_item(**add(w.tables.data, "b", 10))

    async def transfer() -> None:
        async with aio_tm.transaction() as atx:
            await atx.update_item(**add(w.tables.data, "a", -10))
            await atx.update_item(**add(w.tables.data, "b", 10))

    with count_requests(aio_tm.client) as aio_sent:
        w.run(transfer)

    # Then both applied, nothing is left behind, and the requests were the same
    assert balances(w.ddb, w.tables, "a", "b") == ["80", "20"]
    assert_clean(w.ddb, w.tables)
    assert aio_sent.by_operation == sync_sent.by_operation
    assert aio_sent.total == sync_sent.total > 0


def test_given_a_false_condition_when_an_async_request_fails_then_it_raises_and_rolls_back(
    w: Both,
) -> None:
    # Given a written account in an open asyncio transaction
    w.seed(a=5, b=0)
    tm = w.make_aio_tm()

    async def overdraw() -> None:
        async with tm.transaction() as tx:
            await tx.update_item(**add(w.tables.data, "b", 10))
            # When a request's own condition is false
            overdraft = add(w.tables.data, "a", -10)
            overdraft["ExpressionAttributeValues"][":m"] = {"N": "10"}
            await tx.update_item(**overdraft, ConditionExpression="balance >= :m")

    # Then the same error as the sync API, and the earlier write is undone
    with pytest.raises(ConditionalCheckFailedError):
        w.run(overdraw)
    assert balances(w.ddb, w.tables, "a", "b") == ["5", "0"]
    assert_clean(w.ddb, w.tables)


def test_given_an_exactly_once_id_when_async_run_twice_then_the_work_applies_once(w: Both) -> None:
    # Given an account and a piece of async work
    w.seed(a=0)
    tm = w.make_aio_tm()
    calls: list[str] = []

    async def work(tx: aio.Transaction) -> str:
        calls.append(tx.id)
        await tx.update_item(**add(w.tables.data, "a", 7))
        return "done"

    # When it runs twice under one transaction_id
    async def twice() -> tuple[Any, Any]:
        first = await tm.run(work, transaction_id="pay-1")
        second = await tm.run(work, transaction_id="pay-1")
        return first, second

    first, second = w.run(twice)

    # Then it applied once, and the second run says it had committed
    assert first == "done"
    assert isinstance(second, aio.AlreadyCommitted)
    assert second.transaction_id == "pay-1"
    assert len(calls) == 1
    assert balances(w.ddb, w.tables, "a") == ["7"]


def test_given_items_when_read_async_at_each_level_and_in_a_transaction_then_as_sync(
    w: Both,
) -> None:
    # Given committed items, one of them written by a pending sync transaction
    w.seed(a=1, b=2, c=3)
    pending = w.make_tm().begin()
    pending.update_item(**add(w.tables.data, "b", 40))
    tm = w.make_aio_tm()
    keys = [{"pk": {"S": pk}} for pk in ("a", "b", "c")]

    # When the asyncio manager reads outside transactions, then inside one
    async def reads() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for level in (Isolation.COMMITTED, Isolation.UNCOMMITTED):
            got = await tm.get_item(TableName=w.tables.data, Key=keys[1], isolation=level)
            seen[f"get {level.value}"] = got["Item"]["balance"]["N"]
        pages = [p async for p in tm.scan_pages(TableName=w.tables.data, Limit=2)]
        seen["scan pages"] = sorted(i["pk"]["S"] for p in pages for i in p["Items"])
        batch = await tm.batch_get_item(RequestItems={w.tables.data: {"Keys": [keys[0], keys[2]]}})
        seen["batch"] = sorted(i["pk"]["S"] for i in batch["Responses"][w.tables.data])
        async with tm.transaction() as tx:
            got = await tx.get_item(TableName=w.tables.data, Key=keys[0])
            seen["in tx get"] = got["Item"]["balance"]["N"]
            values = await tx.lock_for_read(w.tables.data, [keys[2]])
            seen["in tx lock_for_read"] = values[0]["balance"]["N"] if values[0] else None
        return seen

    seen = w.run(reads)
    pending.rollback()

    # Then the answers are the sync API's
    assert seen == {
        "get committed": "2",
        "get uncommitted": "42",
        "scan pages": ["a", "b", "c"],
        "batch": ["a", "c"],
        "in tx get": "1",
        "in tx lock_for_read": "3",
    }


def test_given_a_sync_coordinator_when_an_async_one_resumes_and_commits_then_both_writes_land(
    w: Both,
) -> None:
    # Given a sync coordinator that wrote a
    w.seed(a=100, b=0)
    sync_tx = w.make_tm().begin()
    sync_tx.update_item(**add(w.tables.data, "a", -30))
    tm = w.make_aio_tm()

    # When an asyncio coordinator resumes it, writes b and commits
    async def resume_and_commit() -> str:
        tx = await tm.resume(sync_tx.id)
        await tx.update_item(**add(w.tables.data, "b", 30))
        await tx.commit()
        return tx.state

    state = w.run(resume_and_commit)

    # Then both writes committed, and the sync coordinator learns it on its own commit
    assert state == "C"
    sync_tx.commit()
    assert balances(w.ddb, w.tables, "a", "b") == ["70", "30"]
    assert_clean(w.ddb, w.tables)


def test_given_an_async_coordinator_that_died_when_a_sync_sweep_runs_then_it_is_rolled_back(
    w: Both,
) -> None:
    # Given an asyncio coordinator that wrote two items and was never heard from again
    w.seed(a=100, b=0)
    tm = w.make_aio_tm()

    async def write_and_die() -> str:
        tx = await tm.begin()
        await tx.write_all(
            [{"Update": add(w.tables.data, "a", -50)}, {"Update": add(w.tables.data, "b", 50)}]
        )
        return tx.id

    tx_id = w.run(write_and_die)

    # When a sync sweep finds its record stale, then an asyncio sweep finds it done
    w.clock.advance(120)
    swept = w.make_tm().sweep(
        tx_id, rollback_after=timedelta(seconds=60), delete_after=timedelta(hours=1)
    )
    again = w.run(
        lambda: tm.sweep(tx_id, rollback_after=timedelta(seconds=60), delete_after=timedelta(0))
    )

    # Then the writes are undone and the record deleted, with nothing left behind
    assert swept is SweepOutcome.ROLLED_BACK
    assert again is SweepOutcome.DELETED
    assert balances(w.ddb, w.tables, "a", "b") == ["100", "0"]
    assert_clean(w.ddb, w.tables)


def test_given_many_tasks_when_transfers_run_on_one_loop_then_money_is_conserved(w: Both) -> None:
    # Given four accounts and twelve transfers between them, as tasks on one loop
    w.seed(a=100, b=100, c=100, d=100)
    tm = w.make_aio_tm(lock_wait=30.0)
    pairs = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")] * 3

    async def transfer(src: str, dst: str) -> None:
        async def work(tx: aio.Transaction) -> None:
            await tx.update_item(**add(w.tables.data, src, -1))
            await tx.update_item(**add(w.tables.data, dst, 1))

        await tm.run(work, attempts=50)

    async def all_transfers() -> None:
        await asyncio.gather(*(transfer(src, dst) for src, dst in pairs))

    # When they all run at once
    w.run(all_transfers)

    # Then every transfer applied once and the total is unchanged
    assert balances(w.ddb, w.tables, "a", "b", "c", "d") == ["100", "100", "100", "100"]
    assert_clean(w.ddb, w.tables)


def test_given_a_rolled_back_async_transaction_when_used_again_then_the_sync_error(w: Both) -> None:
    # Given an asyncio transaction that wrote, then rolled back
    w.seed(a=1)
    tm = w.make_aio_tm()

    async def use_after_rollback() -> None:
        tx = await tm.begin()
        await tx.update_item(**add(w.tables.data, "a", 1))
        await tx.rollback()
        # When it is asked for another request
        await tx.update_item(**add(w.tables.data, "a", 1))

    # Then it refuses as the sync API does
    with pytest.raises(TransactionRolledBackError, match="rolled back"):
        w.run(use_after_rollback)


def test_given_a_batch_when_async_transact_write_runs_then_as_sync_one_call_or_the_protocol(
    w: Both,
) -> None:
    # Given two accounts, and the same batch for each driver
    w.seed(a=10, b=0)
    batch = [{"Update": add(w.tables.data, "a", -1)}, {"Update": add(w.tables.data, "b", 1)}]
    sync_tm, aio_tm = w.make_tm(), w.make_aio_tm()
    assert (
        w.run(lambda: aio_tm.key_names(w.tables.data))
        == sync_tm.key_names(w.tables.data)
        == ("pk",)
    )

    # When the sync manager writes it, then the asyncio one
    with count_requests(sync_tm.client) as sync_sent:
        sync_route = sync_tm.transact_write(batch)
    with count_requests(aio_tm.client) as aio_sent:
        aio_route = w.run(lambda: aio_tm.transact_write(batch))

    # Then both took the same route (native where the emulator has the call) with the
    # same requests, and both applied
    assert aio_route == sync_route
    assert aio_sent.by_operation == sync_sent.by_operation
    assert balances(w.ddb, w.tables, "a", "b") == ["8", "2"]
    assert_clean(w.ddb, w.tables)


def test_given_tables_when_written_async_through_boto3_table_shapes_then_as_the_sync_table(
    w: Both,
) -> None:
    # Given two accounts, one of them held by a sync transaction that then went quiet
    w.seed(a=100, b=0)
    stalled = w.make_tm().begin()
    stalled.update_item(**add(w.tables.data, "b", 1000))
    tm = w.make_aio_tm()

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        # When a transaction writes and reads through its Table with Python values
        async with tm.transaction() as tx:
            accounts = tx.table(w.tables.data)
            await accounts.update_item(
                Key={"pk": "a"},
                UpdateExpression="SET balance = balance - :n",
                ConditionExpression=Attr("balance").gte(Decimal(10)),
                ExpressionAttributeValues={":n": Decimal(10)},
            )
            got = await accounts.get_item(Key={"pk": "a"}, ProjectionExpression="balance")
            seen["in tx"] = got["Item"]
        # And a write outside any transaction meets the stalled holder's lock
        w.clock.advance(10)
        await tm.table(w.tables.data).update_item(
            Key={"pk": "b"},
            UpdateExpression="ADD balance :n",
            ExpressionAttributeValues={":n": Decimal(10)},
        )
        got = await tm.table(w.tables.data).get_item(Key={"pk": "b"})
        seen["outside"] = got["Item"]["balance"]
        return seen

    seen = w.run(scenario)

    # Then the reads show Python values, the stalled holder was rolled back first, and
    # the outside write landed once
    assert seen == {"in tx": {"balance": Decimal(90)}, "outside": Decimal(10)}
    with pytest.raises(TransactionRolledBackError):
        stalled.commit()
    assert balances(w.ddb, w.tables, "a", "b") == ["90", "10"]
    assert_clean(w.ddb, w.tables)


def test_given_bad_arguments_to_async_entry_points_then_each_is_named_and_nothing_written(
    w: Both,
) -> None:
    # Given an account and an asyncio manager
    w.seed(a=1)
    tm = w.make_aio_tm()
    calls: list[str] = []

    async def work(tx: aio.Transaction) -> None:
        calls.append(tx.id)

    async def attempt(bad: Callable[[], Any]) -> BaseException:
        try:
            await bad()
        except Exception as exc:
            return exc
        raise AssertionError("accepted")

    async def scenario() -> list[BaseException]:
        async def bad_key() -> Any:
            async with tm.transaction() as tx:
                await tx.update_item(**add(w.tables.data, "a", 1), ConditionExpression=1)

        async def both_ids() -> Any:
            async with tm.transaction(delete=True, transaction_id="x"):
                pass

        return [
            await attempt(lambda: tm.run(work, attempts=0)),
            await attempt(lambda: tm.begin(transaction_id="")),
            await attempt(lambda: tm.transact_write("not a list")),  # type: ignore[arg-type]
            await attempt(bad_key),
            await attempt(both_ids),
        ]

    # When each bad call is made
    errors = w.run(scenario)

    # Then each fails with its own error naming the problem, no work ran, nothing was
    # written, and a bad setting is refused before anything exists
    assert [type(e).__name__ for e in errors] == [
        "ValueError",
        "InvalidTransactionIdError",
        "InvalidRequestError",
        "ParamValidationError",  # as aiobotocore raises it natively, before anything is sent
        "ValueError",
    ]
    assert "attempts" in str(errors[0]) and "must not be empty" in str(errors[1])
    assert "ConditionExpression" in str(errors[3]) and "delete=True" in str(errors[4])
    assert calls == []
    assert balances(w.ddb, w.tables, "a") == ["1"]
    assert records_left(w.ddb, w.tables.tx) == []
    assert_clean(w.ddb, w.tables)
    with pytest.raises(ValueError, match="lock_wait"):
        w.make_aio_tm(lock_wait=-1)


class AnswerNever:
    """An aiobotocore client whose first call matching ``stuck`` is sent (DynamoDB applies
    it) but never answered: the caller waits until cancelled, as on a dead connection."""

    def __init__(self, client: Any, stuck: Callable[[str, dict[str, Any]], bool]) -> None:
        self._client = client
        self._stuck = stuck
        self.meta = client.meta
        self.sent = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)

        async def call(**params: Any) -> Any:
            response = await method(**params)
            if not self.sent.is_set() and self._stuck(name, params):
                self.sent.set()
                await asyncio.Event().wait()  # the answer never comes
            return response

        return call


def unanswered(
    w: Both, stuck: Callable[[str, dict[str, Any]], bool]
) -> tuple[aio.TransactionManager, AnswerNever]:
    """An asyncio manager on an :class:`AnswerNever` client, and that client."""
    made: list[AnswerNever] = []

    def wrap(client: Any) -> AnswerNever:
        made.append(AnswerNever(client, stuck))
        return made[0]

    return w.make_aio_tm(wrap=wrap), made[0]


def test_given_a_commit_cancelled_in_flight_when_its_record_is_gone_then_rollback_says_unknown(
    w: Both,
) -> None:
    # Given an asyncio transfer whose commit decision DynamoDB applied, the task cancelled
    # before the answer came
    w.seed(a=100, b=0)

    def decides_commit(operation: str, params: dict[str, Any]) -> bool:
        values = params.get("ExpressionAttributeValues", {}).values()
        return params.get("TableName") == w.tables.tx and {"S": s.STATE_COMMITTED} in values

    aio_tm, client = unanswered(w, decides_commit)

    async def cancelled_commit() -> aio.Transaction:
        tx = await aio_tm.begin()
        await tx.update_item(**add(w.tables.data, "a", -10))
        await tx.update_item(**add(w.tables.data, "b", 10))
        commit = asyncio.ensure_future(tx.commit())
        await client.sent.wait()
        commit.cancel()
        with pytest.raises(asyncio.CancelledError):
            await commit
        return tx

    tx = w.run(cancelled_commit)
    # ...and a janitor completed the committed transaction and deleted its record
    sync_tm = w.make_tm()
    for _ in range(3):
        sync_tm.sweep(tx.id, rollback_after=timedelta(0), delete_after=timedelta(0))
    assert records_left(w.ddb, w.tables.tx) == []

    # When the program, having caught the cancellation, rolls back
    async def rollback() -> None:
        await tx.rollback()

    # Then it is told the outcome is unknown (never that it rolled back), and the items
    # show the commit
    with pytest.raises(TransactionOutcomeUnknownError):
        w.run(rollback)
    assert balances(w.ddb, w.tables, "a", "b") == ["90", "10"]
    assert_clean(w.ddb, w.tables)


def test_given_a_request_cancelled_in_flight_in_a_block_then_the_block_rolls_it_back(
    w: Both,
) -> None:
    # Given an asyncio transfer whose first update DynamoDB applied, the answer never coming
    w.seed(a=100, b=0)

    def applies(operation: str, params: dict[str, Any]) -> bool:
        expression = str(params.get("UpdateExpression"))
        return params.get("TableName") == w.tables.data and "ADD balance" in expression

    aio_tm, client = unanswered(w, applies)

    async def transfer() -> None:
        async with aio_tm.transaction() as tx:
            await tx.update_item(**add(w.tables.data, "a", -10))
            await tx.update_item(**add(w.tables.data, "b", 10))

    # When its task is cancelled while it waits for that answer
    async def cancelled() -> None:
        task = asyncio.ensure_future(transfer())
        await client.sent.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    w.run(cancelled)

    # Then the block rolled the applied update back on its way out: nothing moved, and
    # no lock, image or record is left
    assert balances(w.ddb, w.tables, "a", "b") == ["100", "0"]
    assert_clean(w.ddb, w.tables)


def test_given_a_write_outside_cancelled_in_flight_then_its_own_transaction_is_rolled_back(
    w: Both,
) -> None:
    # Given an account held by a sync transaction that went quiet, and an asyncio write
    # outside any transaction whose own transaction's write DynamoDB applies, the answer
    # never coming
    w.seed(b=0)
    stalled = w.make_tm().begin()
    stalled.update_item(**add(w.tables.data, "b", 1000))
    w.clock.advance(10)

    def applies(operation: str, params: dict[str, Any]) -> bool:
        expression = str(params.get("UpdateExpression"))
        return params.get("TableName") == w.tables.data and "ADD balance" in expression

    aio_tm, client = unanswered(w, applies)

    # When its task is cancelled while it waits for that answer
    async def cancelled() -> None:
        write = aio_tm.table(w.tables.data).update_item(
            Key={"pk": "b"},
            UpdateExpression="ADD balance :n",
            ExpressionAttributeValues={":n": Decimal(10)},
        )
        task = asyncio.ensure_future(write)
        await client.sent.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    w.run(cancelled)

    # Then the write's own transaction was rolled back on the way out, as a block's is:
    # the balance is back, and no pending record, lock or image is left
    assert balances(w.ddb, w.tables, "b") == ["0"]
    assert_clean(w.ddb, w.tables)


def test_given_a_record_in_entry_rows_when_async_and_sync_coordinators_add_then_as_one(
    w: Both, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given records that move to entry rows at their second request (issue 22), and an
    # asyncio coordinator that sent three requests one at a time
    monkeypatch.setattr(_entry_rows, "ROWS_AFTER", 0)
    w.seed(a=100, b=0, c=0, d=0)
    tm = w.make_aio_tm()

    async def three() -> str:
        tx = await tm.begin()
        for pk, amount in (("a", -30), ("b", 10), ("c", 10)):
            await tx.update_item(**add(w.tables.data, pk, amount))
        return tx.id

    tx_id = w.run(three)
    assert (
        s.TX_TAIL
        in w.ddb.get_item(
            TableName=w.tables.tx, Key={s.TX_PK: {"S": tx_id}, s.TX_SK: {"S": s.TX_HEADER_SK}}
        )["Item"]
    )
    # When a sync coordinator resumes it, adds a fourth in rows and commits
    sync_tx = w.make_tm().resume(tx_id)
    sync_tx.update_item(**add(w.tables.data, "d", 10))
    sync_tx.commit()
    sync_tx.delete()
    # Then all four writes landed once, and nothing of the record is left
    assert balances(w.ddb, w.tables, "a", "b", "c", "d") == ["70", "10", "10", "10"]
    assert_clean(w.ddb, w.tables)
    assert records_left(w.ddb, w.tables.tx) == []
