"""A coordinator dies at every call of a transaction; the sweeper (or a resuming coordinator
and then the sweeper) rolls it forward or back; the stream's committed changes are still
exactly each item's committed values (moto)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from ddbtx import TransactionManager
from ddbtx import schema as s
from ddbtx.chaos import Chaos, Crash
from ddbtx.errors import DdbtxError
from ddbtx.stream_reader import StreamReader
from ddbtx.streams import committed_change, committed_changes
from helpers import Tables, rescue

from .support import Ledger, decoded, passes_filters, replay
from .workload import LARGE, add, delete, key, put, transfer


def seed(ddb: Any, table: str, prefix: str) -> None:
    for pk, extra in (("a", {}), ("b", {}), ("d", {}), ("big", {"blob": {"S": LARGE}})):
        item = {**key(prefix + pk), "balance": {"N": "100"}, **extra}
        ddb.put_item(TableName=table, Item=item)


def work(table: str, prefix: str) -> Callable[[Any], None]:
    """A transfer, an insert, a delete, a read lock, several writes to one item and a
    write to a large item."""

    def run(tx: Any) -> None:
        p = prefix
        transfer(tx, table, p + "a", p + "b", 10)
        put(tx, table, p + "n", 7)
        delete(tx, table, p + "d")
        tx.get_item(TableName=table, Key=key(p + "missing"))
        add(tx, table, p + "a", 1)
        add(tx, table, p + "big", 1)

    return run


def crash_run(
    victim: TransactionManager, kind: str, index: int, work: Callable[[Any], None], ending: str
) -> tuple[Any, Chaos]:
    """``work(tx)`` then ``ending`` (commit or rollback), the coordinator dying at call
    ``index`` (helpers.crash_run, with the ending chosen)."""
    chaos = Chaos(victim.client)
    chaos.arm(kind, at=index)  # type: ignore[arg-type]
    tx = victim.begin()
    with contextlib.suppress(Crash, DdbtxError):
        work(tx)
        getattr(tx, ending)()
    return tx, chaos


@pytest.mark.parametrize("ending", ["commit", "rollback"])
@pytest.mark.parametrize(
    "kind", ["before", "after", "lost", pytest.param("throttle", marks=pytest.mark.slow)]
)
@pytest.mark.fault_product("kind")
def test_given_a_crash_at_every_call_when_rescued_then_the_changes_are_the_committed_values(
    make_tm: Callable[..., TransactionManager],
    ddb: Any,
    tables: Tables,
    reader: StreamReader,
    ledger: Ledger,
    kind: str,
    ending: str,
) -> None:
    committed: set[str] = set()
    schedules = 0
    for index in range(200):
        # Given fresh items and a coordinator that dies at call `index` of its transaction
        prefix = f"{index}-"
        seed(ddb, tables.data, prefix)
        ledger.snapshot()
        victim = make_tm(max_workers=1, max_attempts=1)
        tx, chaos = crash_run(victim, kind, index, work(tables.data, prefix), ending=ending)
        if not chaos.fired:
            # Past its last call: the transaction ran to its end, uninterrupted
            if tx.state == s.STATE_COMMITTED:
                committed.add(tx.id)
            ledger.snapshot()
            break
        schedules += 1
        # When a sweeper alone completes it (rolls a pending record back, a committed one
        # forward), or, every other schedule, another coordinator first resumes it
        # (committing it if it still can) and the sweeper completes what is left
        if index % 2:
            rescuer = rescue(make_tm, tx.id)
        else:
            rescuer = make_tm()
            rescuer.sweep(tx.id, rollback_after=timedelta(0), delete_after=timedelta(hours=1))
        header = rescuer.protocol.run(rescuer.protocol.records.read_header(tx.id))
        # (no record: the coordinator died before its first request was recorded)
        assert header is None or header.completed
        if header is not None and header.state == s.STATE_COMMITTED:
            committed.add(tx.id)
        ledger.snapshot()
    assert schedules >= 15, "the transaction should make at least 15 DynamoDB calls"
    # Then the stream's committed changes take each item through exactly its committed
    # values, and name only transactions that committed
    records = reader.read()
    changes = committed_changes(records)
    values, _ = replay(changes)
    assert values == decoded(ledger.values)
    assert {c.tx_id for c in changes if c.tx_id} == committed
    # And Lambda's filter patterns let through every record that carries a change
    assert all(passes_filters(r) for r in records if committed_change(r) is not None)
    # And, for a commit, transactions were rolled forward; and where the crash kills the
    # coordinator (a lost answer is only retried), others were rolled back
    if ending == "commit":
        assert committed
        assert kind in ("lost", "throttle") or len(committed) < schedules
