"""Transactions whose requests outgrow one item: bodies in their own rows, a small header."""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ddbtx import DuplicateRequestError, TransactionManager
from ddbtx import schema as s
from ddbtx._base.drive import perform
from ddbtx._base.effects import Call, Run
from ddbtx._base.items import item_size, request_id
from ddbtx._item_steps import body_rows as _body_rows
from ddbtx._item_steps import view as _view
from ddbtx._stores.completion import params_from_av
from ddbtx.chaos import Chaos, Crash
from ddbtx.errors import DdbtxError, Throttled
from ddbtx.sweeper import Sweeper
from ddbtx.transaction import HEADER_SOFT_LIMIT, SPILL_BYTES
from helpers import Tables, assert_clean, data_state, scan

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # benchmarks/ is a top-level package, not installed

from benchmarks import large  # noqa: E402

S = lambda v: {"S": v}  # noqa: E731

#: A request body too large for the header.
BIG = "z" * (SPILL_BYTES + 1024)


def big_put(tables: Tables, pk: str, tag: str) -> dict[str, Any]:
    return {"TableName": tables.data, "Item": {"pk": S(pk), "v": S(tag + BIG)}}


def record_rows(ddb: Any, tables: Tables) -> list[dict[str, Any]]:
    return [row for row in scan(ddb, tables.tx) if row[s.TX_SK]["S"] != "cursor"]


def test_given_many_large_requests_when_added_then_the_header_stays_small(
    tm: TransactionManager, ddb: Any, tables: Tables
) -> None:
    # Given a transaction of 30 requests of 17 KB each (over 500 KB in all)
    tx = tm.begin()
    tx.write_all([{"Put": big_put(tables, f"k{i:02d}", "new")} for i in range(30)])
    # Then each body has its own row, and the header holds only keys and nonces
    rows = record_rows(ddb, tables)
    header = next(row for row in rows if row[s.TX_SK]["S"] == s.TX_HEADER_SK)
    assert len(rows) == 31
    assert item_size(header) < HEADER_SOFT_LIMIT
    # And every body row expires by TTL even if the record never named it
    bodies = [row for row in rows if row is not header]
    assert all(int(row[s.TX_TTL]["N"]) > tm.clock() for row in bodies)
    # When it commits and its record is deleted, nothing of it is left
    tx.commit()
    tx.delete()
    assert len(data_state(ddb, tables.data)) == 30
    assert_clean(ddb, tables)


def test_given_a_large_request_added_twice_when_the_second_is_rejected_then_its_body_goes(
    tm: TransactionManager, ddb: Any, tables: Tables
) -> None:
    # Given a transaction that recorded a large put of "a"
    first = tm.begin()
    first.put_item(**big_put(tables, "a", "first"))
    # When a second coordinator of the same transaction adds "a" with another large body
    second = tm.resume(first.id)
    with pytest.raises(DuplicateRequestError):
        second.put_item(**big_put(tables, "a", "second"))
    # Then the rejected body is gone and the recorded one is intact: a resume reads it back
    rows = record_rows(ddb, tables)
    assert len(rows) == 2  # header + the first body
    body = next(row for row in rows if row[s.TX_SK]["S"] != s.TX_HEADER_SK)
    assert body["p"]["M"]["Item"]["M"]["v"] == S("first" + BIG)
    third = tm.resume(first.id)
    third.commit()
    third.delete()
    assert data_state(ddb, tables.data)["a"]["v"] == S("first" + BIG)
    assert_clean(ddb, tables)


def test_given_a_large_request_body_when_a_resume_finds_it_gone_then_it_says_so(
    tm: TransactionManager, ddb: Any, tables: Tables
) -> None:
    # Given a pending transaction whose large body row was removed (e.g. expired by TTL)
    tx = tm.begin()
    tx.put_item(**big_put(tables, "a", "x"))
    body = next(row for row in record_rows(ddb, tables) if row[s.TX_SK]["S"] != "#")
    ddb.delete_item(TableName=tables.tx, Key={k: body[k] for k in (s.TX_PK, s.TX_SK)})
    # When another coordinator resumes it, then the error names the missing body
    with pytest.raises(Exception, match="gone from the TX record"):
        tm.resume(tx.id)
    # And the transaction can still be rolled back and cleaned up
    tx.rollback()
    tx.delete()
    assert data_state(ddb, tables.data) == {}
    assert_clean(ddb, tables)


def test_given_another_coordinators_large_request_when_a_view_follows_then_unlocked_reads(
    tm: TransactionManager, ddb: Any, tables: Tables
) -> None:
    # Given a transaction whose one request has its body in a row of its own
    tx = tm.begin()
    tx.put_item(**big_put(tables, "a", "x"))
    p = tm.protocol
    header = p.run(p.records.read_header(tx.id))
    assert header is not None
    (entry,) = header.entries.values()
    assert entry.spilled
    # When a view that never saw that request adopts the record without its body
    view = _view.RecordView(tx.id, p.records, write_batches=p.write_batches)
    # Then nothing changes (no I/O happens in adopt) and it names the body it lacks
    assert view.adopt(header) == [entry]
    assert (view.version, view.created, view.requests) == (0, False, {})
    # When it follows the record instead, then every request goes out with the view's
    # lock free (an asyncio driver would interleave another task there)
    sent: list[str] = []
    for effect in (run := Run(view.follow(header))):
        assert isinstance(effect, Call)
        probe = threading.Thread(target=view.unconfirmed, daemon=True)
        probe.start()
        probe.join(timeout=10)
        assert not probe.is_alive(), f"{effect.operation} was sent under the view's lock"
        sent.append(effect.operation)
        with run.outcome() as out:
            out.value = perform(p.client, p.sleep, effect)
    # And the body took one read, and the request is known as another's, unconfirmed
    assert sent == ["get_item"]
    assert (view.version, view.created) == (header.version, True)
    (local,) = view.unconfirmed()
    assert local.elsewhere
    assert local.request.params == tx.record.requests[entry.rid].request.params
    tx.rollback()
    tx.delete()
    assert_clean(ddb, tables)


def test_given_the_large_benchmark_at_small_size_then_every_run_ends_right(
    ddb: Any, table_name: Callable[[str], str]
) -> None:
    # Given 12 items of 17 KB each (every body in its own row)
    # When committed, rolled back, killed while locking, killed while completing
    fresh = itertools.count()
    runs = large.measure(
        ddb,
        12,
        SPILL_BYTES + 1024,
        conversational=True,
        name=lambda role: table_name(f"{role}{next(fresh)}"),
    )
    # Then every run left each item whole with the right value and no record behind
    assert [run.name for run in runs] == [
        "commit",
        "commit, one by one",
        "rollback",
        "crash, locking",
        "crash, completing",
    ]
    assert all(run.ok for run in runs)
    # And the record spread over the header plus one row per body
    assert all(run.record_rows == 13 for run in runs if not run.name.startswith("crash"))
    # And the sweeper touched items only after a crash (beyond its scan for stray locks)
    scan_only = runs[0].sweeper.requests["data"]
    for run in runs:
        touched = run.sweeper.requests["data"] - scan_only
        assert touched >= 6 if run.name.startswith("crash") else touched == 0
    text = large.table(ddb.meta.region_name, runs)
    assert "crash, completing" in text


class LeftOut:
    """Report the rows of the next ``times`` BatchWriteItem calls as unprocessed.

    The rows were written all the same; DynamoDB may leave any of them out under
    load, and resending a body row is harmless.
    """

    def __init__(self, client: Any, times: int) -> None:
        self.client, self.times, self.calls = client, times, 0
        client.meta.events.register("after-call.dynamodb.BatchWriteItem", self._after)
        client.meta.events.register("before-parameter-build.dynamodb.BatchWriteItem", self._keep)

    def _keep(self, params: dict[str, Any], **_: Any) -> None:
        self.sent = params["RequestItems"]

    def _after(self, parsed: dict[str, Any], **_: Any) -> None:
        self.calls += 1
        if self.times > 0:
            self.times -= 1
            parsed["UnprocessedItems"] = self.sent


def test_given_rows_left_unprocessed_when_bodies_are_written_then_they_are_resent(
    make_tm: Any, ddb: Any, tables: Tables, clock: Any
) -> None:
    # Given a coordinator whose first two batches come back unprocessed
    tm = make_tm()
    left_out = LeftOut(tm.client, times=2)
    started = clock.time()
    # When it records two large requests
    tx = tm.begin()
    tx.write_all([{"Put": big_put(tables, pk, "v")} for pk in ("a", "b")])
    # Then the batch was resent until processed, after backing off
    assert left_out.calls == 3
    assert clock.time() > started
    tx.commit()
    tx.delete()
    assert len(data_state(ddb, tables.data)) == 2
    assert_clean(ddb, tables)


def test_given_rows_never_processed_when_bodies_are_written_then_throttling_is_reported(
    make_tm: Any, ddb: Any, tables: Tables
) -> None:
    # Given a coordinator whose batches always come back unprocessed
    tm = make_tm()
    LeftOut(tm.client, times=1000)
    # When it records a large request, then it gives up with a throttling error
    tx = tm.begin()
    with pytest.raises(Throttled, match="unprocessed"):
        tx.put_item(**big_put(tables, "a", "v"))
    # And no item was touched and no record was created (the orphan row carries a TTL)
    assert data_state(ddb, tables.data) == {}
    assert all(s.TX_TTL in row for row in record_rows(ddb, tables))


#: Fault kinds at every call: one runs by default; the rest are slow (`make faults`),
#: each minutes of calls.
EVERY_KIND = [
    "before",
    pytest.param("after", marks=pytest.mark.slow),
    pytest.param("throttle", marks=pytest.mark.slow),
    pytest.param("lost", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("kind", EVERY_KIND)
def test_given_a_fault_at_any_call_of_a_large_transaction_when_swept_then_all_or_nothing(
    make_tm: Any, ddb: Any, tables: Tables, clock: Any, kind: str
) -> None:
    old = {pk: S("old" + BIG) for pk in ("a", "b", "c")}
    new = {pk: S("new" + BIG) for pk in ("a", "b", "c")}
    puts = [
        {"Put": {"TableName": tables.data, "Item": {"pk": S(pk), "v": v}}} for pk, v in new.items()
    ]

    def coordinator() -> tuple[Any, Callable[[], None]]:
        # Given three items and a coordinator of a large transaction writing them all
        victim = make_tm(max_attempts=1 if kind == "throttle" else 3)
        tx = victim.begin()

        def work() -> None:
            tx.write_all(puts)
            tx.commit()
            tx.delete()

        return victim.client, work

    schedules = fault_at_every_call(make_tm, ddb, tables, clock, kind, (old, new), coordinator)
    assert schedules >= 8, "the transaction should make at least 8 DynamoDB calls"


def fault_at_every_call(
    make_tm: Any,
    ddb: Any,
    tables: Tables,
    clock: Any,
    kind: str,
    outcomes: tuple[dict[str, Any], dict[str, Any]],
    coordinator: Callable[[], tuple[Any, Callable[[], None]]],
) -> int:
    """Run ``coordinator()``'s work with ``kind`` at call 0, 1, ... until no fault fires.

    Each schedule starts from ``outcomes[0]`` with no record rows, and ends with a
    sweep and its checks. Returns how many schedules met their fault.
    """
    for index in range(60):
        reset(ddb, tables, outcomes[0])
        client, work = coordinator()
        # When the coordinator meets the fault at call `index`
        chaos = Chaos(client)
        chaos.arm(kind, at=index)  # type: ignore[arg-type]
        done = False
        with contextlib.suppress(Crash, DdbtxError):
            work()
            done = True
        chaos.close()
        if not chaos.fired:
            return index
        sweep_then_check(make_tm, ddb, tables, clock, outcomes, done or kind == "lost")
    raise AssertionError("a fault still fired at call 60: the work does not end")


def reset(ddb: Any, tables: Tables, items: dict[str, Any]) -> None:
    """No record rows; the data items hold ``items``' values."""
    for row in record_rows(ddb, tables):
        ddb.delete_item(TableName=tables.tx, Key={k: row[k] for k in (s.TX_PK, s.TX_SK)})
    for pk, value in items.items():
        ddb.put_item(TableName=tables.data, Item={"pk": S(pk), "v": value})


def sweep_then_check(
    make_tm: Any,
    ddb: Any,
    tables: Tables,
    clock: Any,
    outcomes: tuple[dict[str, Any], dict[str, Any]],
    committed: bool,
) -> None:
    """A sweeper completes whatever a fault left, then deletes it; all or nothing must remain."""
    old, new = outcomes
    # When a sweeper completes whatever is left, then deletes it
    sweeper = Sweeper(make_tm(), rollback_after=timedelta(0), delete_after=timedelta(0))
    clock.advance(1)
    sweeper.run()
    clock.advance(1)
    sweeper.run()
    # Then the items are all old or all new (new whenever the coordinator's commit went through)
    values = {pk: item["v"] for pk, item in data_state(ddb, tables.data).items()}
    assert values in (old, new)
    assert values == new if committed else True, "the commit went through: it committed"
    assert_clean(ddb, tables)
    # And only body rows its record never named may be left, to expire by TTL
    left = record_rows(ddb, tables)
    assert all(row[s.TX_SK]["S"] != s.TX_HEADER_SK and s.TX_TTL in row for row in left)


def sort_key(row: dict[str, Any]) -> str:
    return str(row[s.TX_SK]["S"])


def named_rows(tm: TransactionManager, tx_id: str) -> set[str]:
    """Sort keys of the rows a transaction's record names: the header and its spilled bodies."""
    header = tm.protocol.run(tm.protocol.records.read_header(tx_id))
    assert header is not None
    records = tm.protocol.records
    spilled = [
        key[s.TX_SK]["S"]
        for entry in header.entries.values()
        if entry.spilled
        for key in records.body_keys(tx_id, entry)
    ]
    return {s.TX_HEADER_SK, *spilled}


@pytest.mark.parametrize("read_body", ["spilled", "inline"])
def test_given_a_read_lock_when_its_upgrade_is_rejected_at_the_add_then_its_body_row_is_as_before(
    tm: TransactionManager,
    ddb: Any,
    tables: Tables,
    monkeypatch: pytest.MonkeyPatch,
    read_body: str,
) -> None:
    # Given a transaction holding a read lock on "x" (its body in a row of its own, or
    # in the header), and another coordinator of the same transaction that added "y"
    ddb.put_item(TableName=tables.data, Item={"pk": S("x"), "v": S("old")})
    if read_body == "spilled":
        monkeypatch.setattr(_body_rows, "HEADER_SOFT_LIMIT", 0)  # every body gets a row
    tx = tm.begin()
    read = {"TableName": tables.data, "Key": {"pk": S("x")}}
    assert tx.get_item(**read)["Item"]["v"] == S("old")
    other = tm.resume(tx.id)
    other.put_item(TableName=tables.data, Item={"pk": S("y"), "v": S("theirs")})
    before = record_rows(ddb, tables)
    # When it upgrades "x" to a large write (its body in the read's row: same item, same
    # nonce) together with "y", and the add is refused because "y" is already recorded
    upgrade = {
        "TableName": tables.data,
        "Key": {"pk": S("x")},
        "UpdateExpression": "SET v = :v",
        "ExpressionAttributeValues": {":v": S("new" + BIG)},
    }
    with pytest.raises(DuplicateRequestError):
        tx.write_all([{"Update": upgrade}, {"Put": big_put(tables, "y", "ours")}])
    # Then the rows are those before the upgrade: the read's row holds the read again
    # (or, for a read in the header, is gone), the record names every row left, and
    # the other coordinator's body is untouched
    rows = record_rows(ddb, tables)
    assert sorted(rows, key=sort_key) == sorted(before, key=sort_key)
    assert {row[s.TX_SK]["S"] for row in rows} == named_rows(tm, tx.id)
    x_body = f"r#{request_id(tables.data, read['Key'])}#"
    x_rows = [row for row in rows if row[s.TX_SK]["S"].startswith(x_body)]
    if read_body == "spilled":
        assert [params_from_av(row["p"]) for row in x_rows] == [read]
    else:
        assert x_rows == []
    # And the transaction is still usable: another coordinator can load every body,
    # the upgrade goes through on a second try, and the commit leaves nothing behind
    tm.resume(tx.id)  # builds each recorded request from its body
    tx.update_item(**upgrade)
    tx.commit()
    tx.delete()
    assert {pk: item["v"] for pk, item in data_state(ddb, tables.data).items()} == {
        "x": S("new" + BIG),
        "y": S("theirs"),
    }
    assert_clean(ddb, tables)
    assert record_rows(ddb, tables) == []


def test_given_a_large_request_taken_over_by_another_coordinator_then_its_body_row_follows(
    make_tm: Any, ddb: Any, tables: Tables
) -> None:
    # Given a transaction whose coordinator recorded a large put of "a" and died before
    # locking it
    tx_id = died_before_locking(make_tm, tables, "a", "v")
    # When another coordinator commits it, taking the request over under a new nonce, and
    # a third one resumes it right before the decision
    rescuer = make_tm().resume(tx_id)
    resumed: list[Any] = []

    def resume_before_the_decision(params: dict[str, Any], **_: Any) -> None:
        deciding = ":to" in params.get("ExpressionAttributeValues", {})
        if params.get("TableName") == tables.tx and deciding and not resumed:
            resumed.append(make_tm().resume(tx_id))

    rescuer.manager.client.meta.events.register(
        "before-parameter-build.dynamodb.UpdateItem", resume_before_the_decision
    )
    rescuer.commit()
    rescuer.delete()
    # Then the third one found the body under the new nonce, the put committed, and the
    # record left no row behind (the old nonce's row included)
    assert resumed
    assert data_state(ddb, tables.data)["a"]["v"] == S("v" + BIG)
    assert_clean(ddb, tables)
    assert record_rows(ddb, tables) == []


def died_before_locking(make_tm: Any, tables: Tables, pk: str, tag: str) -> str:
    """A transaction whose coordinator recorded a large put of ``pk`` and died before locking it."""
    first = make_tm()
    first.key_names(tables.data)
    crash = Chaos(first.client)
    tx = first.begin()
    crash.arm("before", at=2)  # the body's row, the record's creation, then the lock
    with pytest.raises(Crash):
        tx.put_item(**big_put(tables, pk, tag))
    crash.close()
    return tx.id


# One kind runs by default; the rest are slow (`make faults`).
@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("before", marks=pytest.mark.slow),
        "after",
        pytest.param("lost", marks=pytest.mark.slow),
    ],
)
def test_given_a_fault_at_any_call_of_a_take_over_of_a_large_request_then_all_or_nothing(
    make_tm: Any, ddb: Any, tables: Tables, clock: Any, kind: str
) -> None:
    old, new = {"a": S("old" + BIG)}, {"a": S("v" + BIG)}

    def coordinator() -> tuple[Any, Callable[[], None]]:
        # Given a large put of "a" recorded by a coordinator that died before locking it,
        # and another coordinator that takes the request over (its body row under a new
        # nonce, the old row deleted) and commits
        tx_id = died_before_locking(make_tm, tables, "a", "v")
        rescuer = make_tm()
        resumed = rescuer.resume(tx_id)

        def work() -> None:
            resumed.commit()
            resumed.delete()

        return rescuer.client, work

    schedules = fault_at_every_call(make_tm, ddb, tables, clock, kind, (old, new), coordinator)
    assert schedules >= 6, "the take-over and commit should make at least 6 DynamoDB calls"
