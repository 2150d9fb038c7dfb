"""Entry rows (issue 22): a TX record whose requests, sent one at a time, cost O(N).

Past :data:`ddbtx._stores.entry_rows.ROWS_AFTER` the header's entries move to rows of their own
and each later add writes one row, accepted by a small header change. Here the budget is
0, so the second request of a transaction already goes to rows: the whole mechanism runs
on a few items, cheap enough to fault at every call of it, on both emulators.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ddbtx import DuplicateRequestError, TransactionManager
from ddbtx import schema as s
from ddbtx._base.items import item_size
from ddbtx._stores import entry_rows
from ddbtx.chaos import Chaos, Crash
from ddbtx.errors import TransactionError
from ddbtx.instrumentation import count_requests
from helpers import Tables, assert_clean, data_state
from test_large_transactions import (
    BIG,
    EVERY_KIND,
    big_put,
    died_before_locking,
    fault_at_every_call,
    record_rows,
)

S = lambda v: {"S": v}  # noqa: E731
ITEMS = ("a", "b", "c", "d", "e", "f")


@pytest.fixture(autouse=True)
def rows_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every add after the record's creation goes to entry rows."""
    monkeypatch.setattr(entry_rows, "ROWS_AFTER", 0)


@pytest.fixture
def rows_past_3_kb(rows_at_once: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Instead, the record moves to rows once its header would pass 3,000 bytes."""
    monkeypatch.setattr(entry_rows, "ROWS_AFTER", 3000)


def put(tables: Tables, pk: str, value: str) -> dict[str, Any]:
    return {"TableName": tables.data, "Item": {"pk": S(pk), "v": S(value)}}


def header_row(ddb: Any, tables: Tables) -> dict[str, Any]:
    return next(r for r in record_rows(ddb, tables) if r[s.TX_SK]["S"] == s.TX_HEADER_SK)


def test_requests_sent_one_at_a_time_go_to_rows_and_the_header_stays_small(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables
) -> None:
    # Given a transaction that sends six puts one at a time
    tm = make_tm()
    tx = tm.begin()
    costs = []
    for pk in ITEMS:
        with count_requests(tm.client) as counts:
            tx.put_item(**put(tables, pk, "new"))
        costs.append(dict(counts.by_operation))
    # Then the first created the header; each later one wrote a row and accepted it
    assert costs[1:] == [{"PutItem": 2, "UpdateItem": 1}] * 5  # row, item (insert), accept
    header = header_row(ddb, tables)
    assert s.TX_REQUESTS not in header and s.TX_TAIL in header
    rows = [r for r in record_rows(ddb, tables) if r[s.TX_SK]["S"].startswith("e#")]
    assert len(rows) == 5 and all(s.TX_TTL in r for r in rows)
    assert item_size(header) < 400
    # And another coordinator reading the record sees all six requests
    seen = make_tm().protocol.run(tm.protocol.records.read_header(tx.id))
    assert seen is not None and len(seen.entries) == 6
    # When it commits and deletes its record, every item is new and nothing is left
    tx.commit()
    tx.delete()
    assert {pk: item["v"] for pk, item in data_state(ddb, tables.data).items()} == {
        pk: S("new") for pk in ITEMS
    }
    assert_clean(ddb, tables)
    assert record_rows(ddb, tables) == []


@pytest.mark.parametrize("ending", ["rollback", "resume and commit"])
def test_a_record_in_rows_is_completed_by_another_coordinator(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, ending: str
) -> None:
    # Given items holding "old", and a transaction in rows that wrote four of them
    for pk in ITEMS:
        ddb.put_item(**put(tables, pk, "old"))
    tx = make_tm().begin()
    for pk in ITEMS[:4]:
        tx.update_item(
            TableName=tables.data,
            Key={"pk": S(pk)},
            UpdateExpression="SET v = :n",
            ExpressionAttributeValues={":n": S("new")},
        )
    # When another coordinator resumes it, adds the other two, and ends it
    other = make_tm().resume(tx.id)
    for pk in ITEMS[4:]:
        other.put_item(**put(tables, pk, "new"))
    if ending == "rollback":
        other.rollback()
    else:
        other.commit()
    other.delete()
    # Then all six are as the ending says, and nothing of the record is left
    expected = "old" if ending == "rollback" else "new"
    values = {pk: item["v"] for pk, item in data_state(ddb, tables.data).items()}
    assert values == {pk: S(expected) for pk in ITEMS}
    assert_clean(ddb, tables)
    assert record_rows(ddb, tables) == []


def test_a_stale_coordinator_adds_after_the_rows_another_added(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables
) -> None:
    # Given a transaction in rows, and a second coordinator that added an item meanwhile
    first = make_tm()
    tx = first.begin()
    tx.put_item(**put(tables, "a", "new"))
    tx.put_item(**put(tables, "b", "new"))
    second = make_tm().resume(tx.id)
    second.put_item(**put(tables, "c", "new"))
    # When the first, whose view is a version behind, adds another item
    tx.put_item(**put(tables, "d", "new"))
    # Then the record holds all four requests, each once, along one chain
    header = first.protocol.run(first.protocol.records.read_header(tx.id))
    assert header is not None and sorted(e.key["pk"]["S"] for e in header.entries.values()) == [
        "a",
        "b",
        "c",
        "d",
    ]
    # And the second can commit all of them once it has caught up
    second.commit()
    second.delete()
    assert sorted(data_state(ddb, tables.data)) == ["a", "b", "c", "d"]
    assert_clean(ddb, tables)
    assert record_rows(ddb, tables) == []


def test_the_same_item_added_twice_in_rows_is_refused(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables
) -> None:
    # Given a transaction in rows holding a put of "b" by its first coordinator
    tx = make_tm().begin()
    tx.put_item(**put(tables, "a", "first"))
    tx.put_item(**put(tables, "b", "first"))
    # When another coordinator of it writes "b" too, then it is refused, as in the header
    other = make_tm().resume(tx.id)
    with pytest.raises(DuplicateRequestError):
        other.put_item(**put(tables, "b", "second"))
    tx.commit()
    tx.delete()
    assert data_state(ddb, tables.data)["b"]["v"] == S("first")
    assert_clean(ddb, tables)
    assert record_rows(ddb, tables) == []


@pytest.mark.parametrize("kind", EVERY_KIND)
@pytest.mark.fault_product("kind")
def test_a_fault_at_any_call_of_adds_in_rows_leaves_all_or_nothing(
    make_tm: Any, ddb: Any, tables: Tables, clock: Any, kind: str
) -> None:
    old = {pk: S("old" + BIG) for pk in ("a", "b", "c")}
    new = {pk: S("new" + BIG) for pk in ("a", "b", "c")}

    def coordinator() -> tuple[Any, Callable[[], None]]:
        # Given a coordinator that writes three items one at a time (the last two in rows,
        # the first moved there with them), then commits and deletes its record
        victim = make_tm(max_attempts=1 if kind == "throttle" else 3)
        tx = victim.begin()

        def work() -> None:
            for pk in ("a", "b", "c"):
                tx.put_item(**big_put(tables, pk, "new"))
            tx.commit()
            tx.delete()

        return victim.client, work

    schedules = fault_at_every_call(make_tm, ddb, tables, clock, kind, (old, new), coordinator)
    assert schedules >= 12, "three adds, locks, a commit and a delete: at least 12 calls"


@pytest.mark.parametrize("kind", ["after", pytest.param("lost", marks=pytest.mark.slow)])
def test_a_fault_at_any_call_of_a_take_over_in_rows_leaves_all_or_nothing(
    make_tm: Any, ddb: Any, tables: Tables, clock: Any, kind: str
) -> None:
    old = {pk: S("old" + BIG) for pk in ("a", "b")}
    new = {"a": S("v" + BIG), "b": S("w" + BIG)}

    def coordinator() -> tuple[Any, Callable[[], None]]:
        # Given a transaction in rows whose coordinator recorded "a" and "b" and died
        # before locking "b", and another coordinator that takes "b" over and commits
        tx_id = died_before_locking(make_tm, tables, "a", "v")
        first = make_tm()
        resumed = first.resume(tx_id)
        resumed.put_item(**big_put(tables, "b", "w"))
        rescuer = make_tm()
        taken = rescuer.resume(tx_id)

        def work() -> None:
            taken.commit()
            taken.delete()

        return rescuer.client, work

    schedules = fault_at_every_call(make_tm, ddb, tables, clock, kind, (old, new), coordinator)
    assert schedules >= 6


def test_an_adder_that_died_between_its_row_and_its_acceptance_blocks_nobody(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables
) -> None:
    # Given a transaction in rows whose coordinator wrote its next row and died before
    # the header accepted it
    first = make_tm()
    first.key_names(tables.data)
    tx = first.begin()
    tx.put_item(**put(tables, "a", "new"))
    crash = Chaos(first.client)
    crash.arm("before", at=1)  # the row lands; the acceptance is never sent
    with pytest.raises(Crash):
        tx.put_item(**put(tables, "b", "new"))
    crash.close()
    # When another coordinator resumes it and adds an item, and commits
    other = make_tm().resume(tx.id)
    other.put_item(**put(tables, "c", "new"))
    other.commit()
    other.delete()
    # Then its item is written, the dead one's never, and no row is left
    assert sorted(data_state(ddb, tables.data)) == ["a", "c"]
    assert_clean(ddb, tables)
    assert record_rows(ddb, tables) == []


@pytest.mark.usefixtures("rows_past_3_kb")
def test_a_coordinator_whose_view_predates_the_move_adds_in_rows(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables
) -> None:
    # Given two coordinators of a small record, and one add that moves it to rows
    tx = make_tm().begin()
    tx.put_item(**put(tables, "a", "new"))
    other = make_tm().resume(tx.id)
    tx.put_item(**put(tables, "b", "x" * 4000))
    assert s.TX_TAIL in header_row(ddb, tables)
    # When the other, whose view still has the entries in the header, adds a new item
    other.put_item(**put(tables, "c", "new"))
    # Then it is recorded in rows (not refused as a duplicate), and commits with the rest
    other.commit()
    other.delete()
    assert sorted(data_state(ddb, tables.data)) == ["a", "b", "c"]
    assert record_rows(ddb, tables) == []


@pytest.mark.usefixtures("rows_past_3_kb")
def test_a_rewrite_kept_inline_after_a_body_in_its_own_row_moves_as_it_is(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables
) -> None:
    # Given a large put of "x" (its body in a row of its own), then a small put of "x"
    # whose entry holds its body, interrupted before its item write
    first = make_tm()
    first.key_names(tables.data)
    tx = first.begin()
    tx.put_item(**big_put(tables, "x", "first"))
    crash = Chaos(first.client)
    crash.arm("before", at=1)  # the add lands; the item write is never sent
    with pytest.raises(Crash):
        tx.put_item(**put(tables, "x", "second"))
    crash.close()
    # When a later add moves the entries to rows and another coordinator commits
    tx.put_item(**put(tables, "y", "y" * 2900))
    assert s.TX_TAIL in header_row(ddb, tables)
    other = make_tm().resume(tx.id)
    other.commit()
    other.delete()
    # Then x holds the second write, not the first one's body
    assert data_state(ddb, tables.data)["x"]["v"] == S("second")
    assert_clean(ddb, tables)


def test_a_pending_record_whose_entry_row_is_gone_says_so(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables
) -> None:
    # Given a pending record in rows, one of whose accepted rows was removed (by TTL)
    tm = make_tm()
    tx = tm.begin()
    for pk in ITEMS[:3]:
        tx.put_item(**put(tables, pk, "new"))
    row = min(r[s.TX_SK]["S"] for r in record_rows(ddb, tables) if r[s.TX_SK]["S"] != "#")
    ddb.delete_item(TableName=tables.tx, Key={s.TX_PK: S(tx.id), s.TX_SK: S(row)})
    # When another coordinator reads the record, then it is told, not given a part of it
    with pytest.raises(TransactionError, match="gone from the TX record"):
        make_tm().resume(tx.id)
    # And the transaction can still be rolled back by its own coordinator
    tx.rollback()
    assert data_state(ddb, tables.data) == {}
