"""The janitors' IAM grants cover every call they really make (on both emulators).

The grants are exact (action, table) pairs, so a protocol step that starts
using a new API call would fail in AWS with AccessDenied while every emulator
test passed. Here the sweeper recovers the worst mess it meets (a large
crashed transaction with request-body rows, a decided one, a stray lock, an
orphaned image, an expired lock row) while a hook records what it calls; and
the recovery function breaks a lock of each kind, which the sweeper's grant on
the locks table (UpdateItem naming only the attributes of freeing a mutex)
would refuse.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import cdk_support  # noqa: F401  (puts the repository root on sys.path for ``infra``)
import pytest
from infra.tables import (
    DATA_ACTIONS,
    IMAGES_ACTIONS,
    LOCK_INDEX_ACTIONS,
    LOCKS_ACTIONS,
    SWEEP_INDEX_ACTIONS,
    SWEEPER_LOCK_UPDATE_CONDITION,
    TRANSACTIONS_ACTIONS,
)

from ddbtx import schema as s
from ddbtx.chaos import Chaos, Crash
from ddbtx.locks import FifoLock, LeaseLockClient, Mutex, break_lock, create_lock_table
from ddbtx.sweeper import Sweeper
from ddbtx.transaction import SPILL_BYTES
from helpers import Tables, assert_clean

S = lambda v: {"S": v}  # noqa: E731
#: The call IAM authorizes for each kind of action in a TransactWriteItems.
ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}


@contextmanager
def recorded(client: Any) -> Iterator[set[tuple[str, str, str | None]]]:
    """(operation, table, index) of every call ``client`` makes; batch calls name each table."""
    seen: set[tuple[str, str, str | None]] = set()
    lock = threading.Lock()

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name == "TransactWriteItems":
            # IAM authorizes each action of a transaction as its own call on its table
            actions = [
                (ACTIONS[k], v["TableName"]) for a in params["TransactItems"] for k, v in a.items()
            ]
            with lock:
                seen.update((name, table, None) for name, table in actions)
            return
        tables = [params["TableName"]] if "TableName" in params else list(params["RequestItems"])
        with lock:
            seen.update((model.name, t, params.get("IndexName")) for t in tables)

    client.meta.events.register("before-parameter-build.dynamodb", record)
    try:
        yield seen
    finally:
        client.meta.events.unregister("before-parameter-build.dynamodb", record)


@contextmanager
def lock_updates(client: Any, locks_table: str) -> Iterator[list[set[str]]]:
    """The attribute names (keys included) each UpdateItem of ``client`` on the locks table
    names: what IAM's ``dynamodb:Attributes`` condition key sees."""
    seen: list[set[str]] = []

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name == "UpdateItem" and params["TableName"] == locks_table:
            names = set(params.get("ExpressionAttributeNames", {}).values())
            seen.append(names | set(params["Key"]))

    client.meta.events.register("before-parameter-build.dynamodb", record)
    try:
        yield seen
    finally:
        client.meta.events.unregister("before-parameter-build.dynamodb", record)


#: What the sweeper's UpdateItem on the locks table may name.
SWEEPER_MAY_NAME = set(
    SWEEPER_LOCK_UPDATE_CONDITION["ForAllValues:StringEquals"]["dynamodb:Attributes"]
)


def granted(tables: Tables, locks_table: str) -> set[tuple[str, str, str | None]]:
    def pairs(actions: tuple[str, ...], table: str, index: str | None = None) -> set[Any]:
        return {(a.removeprefix("dynamodb:"), table, index) for a in actions}

    return (
        pairs(TRANSACTIONS_ACTIONS, tables.tx)
        | pairs(SWEEP_INDEX_ACTIONS, tables.tx, s.SWEEP_INDEX)
        | pairs(IMAGES_ACTIONS, tables.images)
        | pairs(LOCKS_ACTIONS, locks_table)
        | pairs(DATA_ACTIONS, tables.data)
        | pairs(LOCK_INDEX_ACTIONS, tables.data, s.LOCK_INDEX)
    )


def test_given_every_kind_of_leftover_when_swept_then_each_call_is_granted(
    make_tm: Any, ddb: Any, tables: Tables, clock: Any, table_name: Any
) -> None:
    # Given a large transaction that died while locking (bodies in their own rows)
    big = "b" * (SPILL_BYTES + 1024)
    for pk in ("a", "b", "c"):
        ddb.put_item(TableName=tables.data, Item={"pk": S(pk), "v": S(big)})
    victim = make_tm()
    chaos = Chaos(victim.client)
    chaos.arm("before", at=3)
    tx = victim.begin()
    with pytest.raises(Crash):
        tx.write_all(
            [
                {"Put": {"TableName": tables.data, "Item": {"pk": S(pk), "v": S(pk + big)}}}
                for pk in ("a", "b", "c")
            ]
        )
    chaos.close()
    # And one that committed but never unlocked, and an expired mutex in the locks table
    other = make_tm()
    committed = other.begin()
    committed.update_item(
        TableName=tables.data,
        Key={"pk": S("d")},
        UpdateExpression="SET n = :n",
        ExpressionAttributeValues={":n": {"N": "1"}},
    )
    other.protocol.run(other.protocol.records.decide(committed.id, s.STATE_COMMITTED))
    # And a lock whose record is gone, and an image whose transaction never existed
    lost = other.begin()
    lost.update_item(
        TableName=tables.data,
        Key={"pk": S("e")},
        UpdateExpression="SET n = :n",
        ExpressionAttributeValues={":n": {"N": "2"}},
    )
    ddb.delete_item(TableName=tables.tx, Key=other.protocol.records.header_key(lost.id))
    ddb.put_item(
        TableName=tables.images,
        Item={s.IMAGE_PK: S("0-no-such-tx"), s.IMAGE_SK: S("r"), s.IMAGE_ITEM: {"M": {}}},
    )
    locks = table_name("locks")
    create_lock_table(ddb, locks)
    dead = Mutex(ddb, locks, owner="dead", expire_after=60, wall_clock=clock.time)
    assert dead.acquire("job")
    clock.advance(7200)
    # When the sweeper runs (twice: complete, then delete) while every call is recorded
    janitor = make_tm()
    sweeper = Sweeper(
        janitor,
        rollback_after=timedelta(minutes=5),
        delete_after=timedelta(0),
        locks_table=locks,
        data_tables=[tables.data],
        lock_grace=0,
        persist_cursor=True,
    )
    with recorded(janitor.client) as calls, lock_updates(janitor.client, locks) as updates:
        sweeper.run()
        clock.advance(1)  # completed records are deleted once older than delete_after
        sweeper.run()
        sweeper.run_full(segments=2)
    # Then it did the work, and every call it made is one the CDK app grants
    assert_clean(ddb, tables)
    rows = ddb.scan(TableName=tables.tx)["Items"]
    assert [row[s.TX_PK]["S"] for row in rows] == ["#sweeper"]  # only its cursor is left
    # The dead holder's mutex is freed; its row stays only for its fencing counter
    assert [set(row) for row in ddb.scan(TableName=locks)["Items"]] == [{"pk", "sk", "fence"}]
    assert ("BatchWriteItem", tables.tx, None) in calls  # the body rows went
    assert ("Scan", tables.data, s.LOCK_INDEX) in calls  # stray locks came from the index
    assert calls <= granted(tables, locks), calls - granted(tables, locks)
    # And its update of the locks table names only what its conditioned grant allows
    assert updates and all(names <= SWEEPER_MAY_NAME for names in updates), updates


def test_given_a_dead_holder_of_each_kind_when_broken_then_recovery_may_and_the_sweeper_may_not(
    ddb: Any, table_name: Any
) -> None:
    # Given a mutex, a lease and a FIFO lock, each held
    locks = table_name("locks")
    create_lock_table(ddb, locks)
    assert Mutex(ddb, locks, owner="dead").acquire("job")
    lease, fifo = LeaseLockClient(ddb, locks, owner="dead"), FifoLock(ddb, locks, owner="dead")
    lease.acquire("Moe")
    fifo.acquire("orders", namespace="sum")
    for dead in (lease, fifo):
        # Dead: no more heartbeats (left running, the thread outlived the test and its
        # table, and logged its failures into later tests).
        dead._heartbeats.close()
    # When the recovery function's core breaks each (forced: no watching) while recorded
    with recorded(ddb) as calls, lock_updates(ddb, locks) as updates:
        outcomes = [
            break_lock(ddb, locks, resource, by="ops", force=True).outcome
            for resource in ("job", "Moe", "orders")
        ]
    # Then every call is one the recovery role is granted (it has LOCKS_ACTIONS on the
    # locks table, without a condition) ...
    assert outcomes == ["broken"] * 3
    assert {(op, table) for op, table, _ in calls} <= {
        (a.removeprefix("dynamodb:"), locks) for a in LOCKS_ACTIONS
    }
    # ... and not one of the breaks would pass the sweeper's condition
    assert len(updates) == 3
    assert not [names for names in updates if names <= SWEEPER_MAY_NAME]
