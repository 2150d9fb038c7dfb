"""Exactly-once transactions keyed by the caller's id (``transaction_id=``).

A second attempt with the same id never applies the work twice: it resumes a
pending transaction (the work runs again, its requests matched with the
recorded ones), gets a committed one back without running the work, and starts
over only after a rollback. Bad ids and ids reused for other work are refused
with nothing written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from ddbtx import (
    AlreadyCommitted,
    InvalidTransactionIdError,
    Transaction,
    TransactionCommittedError,
    TransactionIdReusedError,
    TransactionManager,
    TransactionRolledBackError,
)
from ddbtx import schema as s
from ddbtx.chaos import Chaos, Crash
from ddbtx.errors import DdbtxError
from ddbtx.instrumentation import count_requests
from ddbtx.local import LocalDynamo
from ddbtx.sweeper import Sweeper
from ddbtx.transaction import SweepOutcome
from faults.inject import Pause
from helpers import Tables, assert_clean, clear, data_state, records_left, scan

ORDER = "order-42"
SEED = {"a": 100, "b": 5}
ONCE = {"a": 90, "b": 15, "o": 1}


class Work:
    """Pay 10 from a to b and record the order: the caller's work, counting its runs."""

    def __init__(self, table: str, amount: int = 10) -> None:
        self.table = table
        self.amount = amount
        self.runs = 0

    def __call__(self, tx: Transaction) -> str:
        self.runs += 1
        return self.steps(tx)

    def steps(self, tx: Transaction) -> str:
        self.add(tx, "a", -self.amount)
        self.add(tx, "b", self.amount)
        self.order(tx)
        return "paid"

    def order(self, tx: Transaction) -> None:
        tx.put_item(TableName=self.table, Item={"pk": {"S": "o"}, "balance": {"N": "1"}})

    def add(self, tx: Transaction, pk: str, amount: int) -> dict[str, Any]:
        return tx.update_item(
            TableName=self.table,
            Key={"pk": {"S": pk}},
            UpdateExpression="ADD balance :n",
            ExpressionAttributeValues={":n": {"N": str(amount)}},
        )


@pytest.fixture
def work(tables: Tables, seed: Callable[..., None]) -> Work:
    """The payment, with a and b seeded."""
    seed(**SEED)
    return Work(tables.data)


def balances(ddb: Any, tables: Tables) -> dict[str, int]:
    return {pk: int(item["balance"]["N"]) for pk, item in data_state(ddb, tables.data).items()}


def records(ddb: Any, tables: Tables) -> list[dict[str, Any]]:
    """Every TX record header."""
    return [r for r in scan(ddb, tables.tx) if r[s.TX_SK]["S"] == s.TX_HEADER_SK]


def named(tm: TransactionManager, caller_id: str = ORDER) -> str | None:
    """The internal transaction the caller's id names now."""
    return tm.protocol.run(tm.protocol.aliases.read(caller_id))


# --- the normal path and the second attempt ----------------------------------------------


def test_given_an_id_when_run_twice_then_the_work_applies_once_and_the_second_is_told(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, work: Work
) -> None:
    # Given the work committed once under an id
    first = make_tm().run(work, transaction_id=ORDER)
    assert first == "paid" and balances(ddb, tables) == ONCE
    # When another process runs it again with the same id
    again = make_tm().run(work, transaction_id=ORDER)
    # Then the work is not called and the caller learns it was already committed
    assert isinstance(again, AlreadyCommitted)
    assert again.transaction_id == ORDER and again.tx_id == named(make_tm())
    assert work.runs == 1
    assert balances(ddb, tables) == ONCE
    assert_clean(ddb, tables)


def test_given_a_committed_id_when_begun_or_entered_then_it_is_already_committed_and_takes_nothing(
    tm: TransactionManager, ddb: Any, tables: Tables, work: Work
) -> None:
    # Given the work committed under an id
    tm.run(work, transaction_id=ORDER)
    # When a transaction with the id is begun, or entered as a with block
    tx = tm.begin(transaction_id=ORDER)
    with tm.transaction(transaction_id=ORDER) as entered:
        assert entered.already_committed
    # Then it is the committed one, it refuses requests, and commits as a no-op
    assert tx.already_committed and tx.state == s.STATE_COMMITTED and tx.id == named(tm)
    with pytest.raises(TransactionCommittedError):
        work(tx)
    tx.commit()
    with pytest.raises(TransactionCommittedError), tm.transaction(transaction_id=ORDER) as tx:
        work(tx)
    assert balances(ddb, tables) == ONCE


def test_given_a_with_block_with_an_id_when_it_ends_then_the_record_is_kept_to_remember_the_id(
    tm: TransactionManager, ddb: Any, tables: Tables, work: Work
) -> None:
    # Given a with block with an id
    with tm.transaction(transaction_id=ORDER) as tx:
        work(tx)
    # Then its record stays (completed, naming the id) and the alias names it
    (record,) = records(ddb, tables)
    assert record[s.TX_PK]["S"] == tx.id == named(tm)
    assert record[s.TX_CALLER_ID] == {"S": ORDER} and record[s.TX_COMPLETED] == {"BOOL": True}
    # and deleting on exit, which would forget the id at once, is refused up front
    with pytest.raises(ValueError, match="forget"), tm.transaction(transaction_id="x", delete=True):
        pass
    assert named(tm, "x") is None


def test_given_an_id_whose_work_makes_no_request_when_retried_then_it_is_not_run_again(
    tm: TransactionManager, ddb: Any, tables: Tables
) -> None:
    # Given work that writes nothing transactional, committed under an id
    runs: list[int] = []
    assert tm.run(lambda tx: runs.append(1), transaction_id=ORDER) is None
    # When it is retried
    again = tm.run(lambda tx: runs.append(1), transaction_id=ORDER)
    # Then it is still remembered as committed (one record, no requests)
    assert isinstance(again, AlreadyCommitted) and runs == [1]
    (record,) = records(ddb, tables)
    assert record[s.TX_STATE] == {"S": s.STATE_COMMITTED}


def test_given_a_rolled_back_id_when_retried_then_it_starts_over_and_commits_once(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, work: Work
) -> None:
    # Given an attempt whose work failed after writing: rolled back
    tm = make_tm()

    def failing(tx: Transaction) -> None:
        work(tx)
        raise RuntimeError("payment provider down")

    with pytest.raises(RuntimeError):
        tm.run(failing, transaction_id=ORDER)
    first = named(tm)
    assert balances(ddb, tables) == SEED
    # When the work is retried with the same id
    assert make_tm().run(work, transaction_id=ORDER) == "paid"
    # Then a new transaction carries the id and the work is applied once
    assert named(tm) not in (None, first)
    assert balances(ddb, tables) == ONCE
    states = sorted(r[s.TX_STATE]["S"] for r in records(ddb, tables))
    assert states == [s.STATE_COMMITTED, s.STATE_ROLLED_BACK]
    assert_clean(ddb, tables)


def test_given_an_id_when_begun_then_the_wound_wait_age_is_the_start_time_not_the_id(
    tm: TransactionManager,
) -> None:
    # Given an id that would sort before every transaction, begun after another one
    older = tm.begin()
    tx = tm.begin(transaction_id="0000000000000000-000000000000")
    # Then the transaction's own id is a fresh, time-ordered one: younger than the first
    assert tx.id != tx.transaction_id and tx.id > older.id


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("", "empty"),
        ("x" * 1025, "1025 bytes"),
        ("é" * 513, "1026 bytes"),
        (42, "not int"),
        (b"order-42", "not bytes"),
        ("order-\ud800", "surrogate"),
    ],
)
def test_given_a_bad_id_when_begun_then_it_is_refused_and_nothing_is_written(
    tm: TransactionManager, ddb: Any, tables: Tables, work: Work, bad: Any, says: str
) -> None:
    # When a transaction, a with block or a run is given a bad id
    for attempt in (
        lambda: tm.begin(transaction_id=bad),
        lambda: tm.transaction(transaction_id=bad).__enter__(),
        lambda: tm.run(work, transaction_id=bad),
    ):
        with pytest.raises(InvalidTransactionIdError, match=says):
            attempt()
    # Then nothing was written and the work never ran
    assert records_left(ddb, tables.tx) == [] and work.runs == 0
    assert balances(ddb, tables) == SEED


def test_given_the_longest_id_when_run_then_it_works(
    tm: TransactionManager, ddb: Any, tables: Tables, work: Work
) -> None:
    longest = "é" * 512  # 1,024 bytes in UTF-8
    assert tm.run(work, transaction_id=longest) == "paid"
    assert isinstance(tm.run(work, transaction_id=longest), AlreadyCommitted)
    assert balances(ddb, tables) == ONCE


# --- a pending id: resumed, its work run again -------------------------------------------


def dies(tm: TransactionManager, kind: str, at: int) -> Chaos:
    """Arm a fault at ``tm``'s ``at``-th call; after a ``before``/``after`` crash the process
    is gone: every later call of its client dies too (no rollback on the way out)."""
    chaos = Chaos(tm.client)
    chaos.arm(kind, at)  # type: ignore[arg-type]
    if kind in ("before", "after"):

        def gone(**_: Any) -> None:
            if chaos.fired:
                raise Crash("the coordinator is gone")

        tm.client.meta.events.register_first("before-call.dynamodb", gone)
    return chaos


def abandoned(make_tm: Callable[..., TransactionManager], work: Callable[..., Any], at: int) -> str:
    """Run ``work`` under the id in a coordinator that dies after its ``at``-th call."""
    victim = make_tm(max_workers=1)
    victim.key_names(work.table)  # type: ignore[attr-defined]
    dies(victim, "after", at)
    with pytest.raises(Crash):
        victim.run(work, transaction_id=ORDER)
    tx_id = named(make_tm())
    assert tx_id is not None
    return tx_id


def test_given_a_coordinator_that_died_mid_work_when_retried_then_it_resumes_and_applies_once(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, work: Work
) -> None:
    # Given a coordinator that recorded and applied the first update, then died (calls:
    # claim, create, lock a, apply a)
    pending = abandoned(make_tm, work, at=3)
    assert balances(ddb, tables) == {"a": 90, "b": 5}
    # When the work is retried with the same id
    assert make_tm().run(work, transaction_id=ORDER) == "paid"
    # Then the pending transaction was resumed, not replaced, and a's update applied once
    assert named(make_tm()) == pending
    assert balances(ddb, tables) == ONCE
    assert_clean(ddb, tables)


def test_given_a_read_before_a_recorded_write_when_replayed_then_it_sees_the_item_as_before(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given work that reads a balance and writes the value it computed from it
    seed(**SEED)

    class ReadThenWrite(Work):
        def steps(self, tx: Transaction) -> str:
            seen = int(
                tx.get_item(TableName=self.table, Key={"pk": {"S": "a"}})["Item"]["balance"]["N"]
            )
            tx.update_item(
                TableName=self.table,
                Key={"pk": {"S": "a"}},
                UpdateExpression="SET balance = :v",
                ExpressionAttributeValues={":v": {"N": str(seen - 10)}},
            )
            self.add(tx, "b", 10)
            self.order(tx)
            return "paid"

    work = ReadThenWrite(tables.data)
    # and a coordinator that died once a's write was applied (claim, create, lock a,
    # upgrade a, apply a)
    abandoned(make_tm, work, at=4)
    assert balances(ddb, tables)["a"] == 90
    # When the work runs again: its read must see 100 (as the first read did), not 90
    assert make_tm().run(work, transaction_id=ORDER) == "paid"
    # Then the write it makes again is the recorded one, applied once
    assert balances(ddb, tables) == ONCE
    assert_clean(ddb, tables)


def test_given_batched_work_when_its_coordinator_died_then_a_retry_replays_the_batch_once(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, seed: Any
) -> None:
    seed(**SEED)

    class Batched(Work):
        def steps(self, tx: Transaction) -> str:
            adds = [("o", 1), ("a", -10), ("b", 10)]
            tx.write_all(
                [
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": {"pk": {"S": pk}},
                            "UpdateExpression": "ADD balance :n",
                            "ExpressionAttributeValues": {":n": {"N": str(n)}},
                        }
                    }
                    for pk, n in adds
                ]
            )
            return "paid"

    work = Batched(tables.data)
    # Given a coordinator that recorded the batch, locked o (inserting it) and died
    abandoned(make_tm, work, at=2)
    # When the batch runs again under the id
    assert make_tm().run(work, transaction_id=ORDER) == "paid"
    # Then every write applied once
    assert balances(ddb, tables) == ONCE
    assert_clean(ddb, tables)


class OtherAmount(Work):
    """The same items, another amount: other work under the same id."""

    def __init__(self, table: str) -> None:
        super().__init__(table, amount=20)


class OtherItemFirst(Work):
    def steps(self, tx: Transaction) -> str:
        self.add(tx, "c", 1)
        return super().steps(tx)


class FewerRequests(Work):
    def steps(self, tx: Transaction) -> str:
        self.add(tx, "a", -self.amount)
        return "half"


@pytest.mark.parametrize(
    ("other", "at"),
    [(OtherAmount, 3), (OtherItemFirst, 3), (FewerRequests, 6)],
    ids=["other-parameters", "other-item-first", "fewer-requests-at-commit"],
)
def test_given_a_pending_id_when_reused_for_other_work_then_refused_and_nothing_written(
    make_tm: Callable[..., TransactionManager],
    ddb: Any,
    tables: Tables,
    work: Work,
    other: type[Work],
    at: int,
) -> None:
    # Given a coordinator that died mid-work under the id
    pending = abandoned(make_tm, work, at=at)
    before_data, before_tx = data_state(ddb, tables.data), scan(ddb, tables.tx)
    # When other work runs under the same id
    with pytest.raises(TransactionIdReusedError) as raised:
        make_tm().run(other(tables.data), transaction_id=ORDER)
    # Then it is refused, naming the transaction, and nothing was written anywhere
    assert raised.value.tx_id == pending
    assert data_state(ddb, tables.data) == before_data
    assert scan(ddb, tables.tx) == before_tx
    # and the right work still applies exactly once
    assert make_tm().run(work, transaction_id=ORDER) == "paid"
    assert balances(ddb, tables) == ONCE
    assert_clean(ddb, tables)


# --- an alias without its record: fencing ------------------------------------------------


def test_given_a_coordinator_that_claimed_the_id_and_died_when_retried_then_it_is_fenced_once(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, work: Work
) -> None:
    # Given a coordinator that claimed the id and died before creating its record
    claimed = abandoned(make_tm, work, at=0)
    assert records(ddb, tables) == []
    # When the work is retried
    assert make_tm().run(work, transaction_id=ORDER) == "paid"
    # Then the claimed transaction is fenced (rolled back, completed) and a new one commits
    reader = make_tm().protocol
    fence = reader.run(reader.records.read_header(claimed))
    assert fence is not None and fence.state == s.STATE_ROLLED_BACK and fence.completed
    assert named(make_tm()) != claimed
    assert balances(ddb, tables) == ONCE
    assert_clean(ddb, tables)


def test_given_a_slow_coordinator_whose_id_was_fenced_when_it_goes_on_then_it_is_rolled_back(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, work: Work
) -> None:
    # Given a coordinator that claimed the id, then stalled before its first request
    slow = make_tm().begin(transaction_id=ORDER)
    # and a retry that fenced it and committed the work meanwhile
    assert make_tm().run(work, transaction_id=ORDER) == "paid"
    # When the slow one makes its first request
    with pytest.raises(TransactionRolledBackError):
        work(slow)
    # Then it wrote nothing: the work is applied once
    assert balances(ddb, tables) == ONCE
    assert_clean(ddb, tables)


# --- lifetime: as long as the record is kept ---------------------------------------------


def test_given_an_id_past_delete_after_when_swept_then_alias_and_record_go_and_it_starts_over(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, work: Work, clock: Any
) -> None:
    # Given the work committed under an id, a day and a second ago
    tm = make_tm()
    tm.run(work, transaction_id=ORDER)
    tx_id = named(tm)
    assert tx_id is not None
    clock.advance(86_401)
    # When the sweeper deletes its record
    assert (
        tm.sweep(tx_id, rollback_after=timedelta(minutes=1), delete_after=timedelta(days=1))
        is SweepOutcome.DELETED
    )
    # Then the alias went with it, and the id is new again: the work applies again
    assert records_left(ddb, tables.tx) == []
    assert tm.run(work, transaction_id=ORDER) == "paid"
    assert balances(ddb, tables) == {"a": 80, "b": 25, "o": 1}


def test_given_a_sweeper_dying_between_the_alias_and_the_record_then_the_next_sweep_deletes_it(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, work: Work, clock: Any
) -> None:
    # Given a record past delete_after, and a sweeper that dies after deleting its alias
    make_tm().run(work, transaction_id=ORDER)
    tx_id = named(make_tm())
    assert tx_id is not None
    clock.advance(86_401)
    ages = {"rollback_after": timedelta(minutes=1), "delete_after": timedelta(days=1)}
    sweeper = make_tm()
    dies(sweeper, "after", at=1)  # read the record, delete the alias
    with pytest.raises(Crash):
        sweeper.sweep(tx_id, **ages)
    # Then the record is still there for the next sweep (no alias naming a deleted record)
    assert named(make_tm()) is None and len(records(ddb, tables)) == 1
    assert make_tm().sweep(tx_id, **ages) is SweepOutcome.DELETED
    assert records_left(ddb, tables.tx) == []


def test_given_a_rolled_back_attempt_swept_later_then_the_alias_of_the_new_attempt_stays(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, work: Work, clock: Any
) -> None:
    # Given an attempt rolled back and a retry that committed under the same id
    tm = make_tm()
    first = tm.begin(transaction_id=ORDER)
    work(first)
    first.rollback()
    tm.run(work, transaction_id=ORDER)
    second = named(tm)
    # When the first attempt's record is swept past delete_after, the second's not yet
    clock.advance(86_401)
    ages = {"rollback_after": timedelta(minutes=1), "delete_after": timedelta(days=1)}
    assert tm.sweep(first.id, **ages) is SweepOutcome.DELETED
    # Then the id still names the committed attempt: a retry is told, nothing applies twice
    assert named(tm) == second
    assert isinstance(tm.run(work, transaction_id=ORDER), AlreadyCommitted)
    assert balances(ddb, tables) == ONCE


def test_given_an_alias_whose_record_ttl_removed_when_retried_then_it_is_fenced_and_starts_over(
    tm: TransactionManager, ddb: Any, tables: Tables, work: Work
) -> None:
    # Given a committed id whose record DynamoDB TTL deleted (the alias outlives it)
    tm.run(work, transaction_id=ORDER)
    tx_id = named(tm)
    assert tx_id is not None
    ddb.delete_item(TableName=tables.tx, Key=tm.protocol.records.header_key(tx_id))
    # When it is retried, the id has expired: fenced, then the work starts over
    assert tm.run(work, transaction_id=ORDER) == "paid"
    fence = tm.protocol.run(tm.protocol.records.read_header(tx_id))
    assert fence is not None and fence.state == s.STATE_ROLLED_BACK
    assert named(tm) != tx_id
    assert balances(ddb, tables) == {"a": 80, "b": 25, "o": 1}


def test_given_aliases_when_the_sweeper_runs_every_pass_then_they_are_not_records(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, work: Work, clock: Any
) -> None:
    # Given a committed id, a claimed id that never got a record, and a pending one
    make_tm().run(work, transaction_id=ORDER)
    make_tm().begin(transaction_id="claimed-only")
    pending = make_tm().begin(transaction_id="pending")
    work.add(pending, "c", 1)
    clock.advance(120)
    # When a sweeper runs its index and scan passes, and a full scan
    tm = make_tm()
    ages = {"rollback_after": timedelta(minutes=1), "delete_after": timedelta(days=1)}
    report = Sweeper(tm, data_tables=[tables.data], persist_cursor=False, **ages).run()
    full = Sweeper(tm, data_tables=[tables.data], persist_cursor=False, **ages).run_full()
    # Then only the records were visited (the pending one rolled back), no alias was
    # taken for one, and every alias is still there
    assert report.errors == full.errors == 0 and report.rolled_back == 1
    assert all(named(tm, i) is not None for i in (ORDER, "claimed-only", "pending"))
    assert balances(ddb, tables) == ONCE


# --- faults and races: more than one rescuer, the work applied once ----------------------


def fresh_start(ddb: Any, tables: Tables) -> Work:
    clear(ddb, tables)
    for pk, balance in SEED.items():
        ddb.put_item(TableName=tables.data, Item={"pk": {"S": pk}, "balance": {"N": str(balance)}})
    return Work(tables.data)


def committed(tm: TransactionManager) -> bool:
    """Whether the transaction the id names is committed."""
    tx_id = named(tm)
    header = tm.protocol.run(tm.protocol.records.read_header(tx_id)) if tx_id else None
    return header is not None and header.state == s.STATE_COMMITTED


def sweep_all(tm: TransactionManager, ddb: Any, tables: Tables) -> None:
    """A sweeper that rolls back every pending record at once and completes the rest."""
    for record in records(ddb, tables):
        tm.sweep(record[s.TX_PK]["S"], rollback_after=timedelta(0), delete_after=timedelta(days=1))


def then_applied_once(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, work: Work, at: str
) -> None:
    """The work's writes are there once; a further attempt is told, and nothing is left."""
    assert balances(ddb, tables) == ONCE, at
    again = make_tm().run(work, transaction_id=ORDER)
    assert isinstance(again, AlreadyCommitted), at
    assert balances(ddb, tables) == ONCE, at
    assert_clean(ddb, tables)


@pytest.mark.parametrize("rescuer", ["retry", "sweeper-then-retry"])
# Throttling past the retries is slow here (as in test_crash): `make faults` runs it.
@pytest.mark.parametrize(
    "kind", ["before", "after", "lost", pytest.param("throttle", marks=pytest.mark.slow)]
)
@pytest.mark.fault_product("kind")
def test_given_a_fault_at_any_call_of_a_run_when_rescued_then_the_work_applies_once(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, kind: str, rescuer: str
) -> None:
    schedules = 0
    for index in range(60):
        # Given a coordinator running the work under the id, faulted at call `index`
        work = fresh_start(ddb, tables)
        victim = make_tm(max_workers=1, max_attempts=1 if kind == "throttle" else 3)
        victim.key_names(tables.data)
        chaos = dies(victim, kind, index)
        with contextlib.suppress(Crash, DdbtxError):
            victim.run(work, transaction_id=ORDER)
        if not chaos.fired:
            break
        schedules += 1
        at = f"{kind} at call {index} ({chaos.calls[index]})"
        # When a sweeper (or nobody) moves its record along, and then the work is retried
        tm = make_tm()
        if rescuer == "sweeper-then-retry":
            sweep_all(tm, ddb, tables)
        was_committed = committed(tm)
        outcome = tm.run(work, transaction_id=ORDER)
        # Then the retry ran the work only if it was not committed, and it applied once
        assert isinstance(outcome, AlreadyCommitted) == was_committed, at
        then_applied_once(make_tm, ddb, tables, work, at)
    assert schedules >= 12, "a run of the work should make at least 12 DynamoDB calls"


def attempt(tm: TransactionManager, work: Work, outcomes: list[Any]) -> Callable[[], None]:
    """A whole run of the work under the id, its outcome noted."""
    return lambda: outcomes.append(tm.run(work, transaction_id=ORDER))


@pytest.mark.parametrize("history", ["new-id", "after-a-rollback"])
@pytest.mark.fault_product("history")
def test_given_two_attempts_with_one_id_when_one_runs_at_any_point_of_the_other_then_once(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, history: str
) -> None:
    schedules = 0
    for index in range(60):
        # Given an attempt that stalls before its `index`-th call while a second attempt
        # with the same id runs from start to end (another process, a Lambda retry); with
        # an earlier attempt rolled back, both start over and race to move the alias
        work = fresh_start(ddb, tables)
        if history == "after-a-rollback":
            earlier = make_tm().begin(transaction_id=ORDER)
            work(earlier)
            earlier.rollback()
        first, second = make_tm(max_workers=1), make_tm(max_workers=1)
        first.key_names(tables.data)
        outcomes: list[Any] = []
        stall = Pause(first.client, index, attempt(second, work, outcomes))
        # When the first goes on afterwards
        outcomes.append(first.run(work, transaction_id=ORDER))
        stall.close()
        if not stall.fired:
            break
        schedules += 1
        # Then both end well, at least one ran the work to its commit, and it applied once
        at = f"second attempt before call {index} of the first"
        assert all(o == "paid" or isinstance(o, AlreadyCommitted) for o in outcomes), at
        assert "paid" in outcomes, at
        then_applied_once(make_tm, ddb, tables, work, at)
    assert schedules >= 12


# --- cost ---------------------------------------------------------------------------------

#: One write fewer where the endpoint serves TransactWriteItems: an insert's unlock rides in
#: the record's completion (docs/protocol.md, "Fault model"); dynalite has none.
SERVES_TRANSACTIONS = {"moto": 1, "dynalite": 0}


def test_given_an_id_when_counted_then_the_first_run_costs_what_a_plain_run_does(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, backend: LocalDynamo
) -> None:
    # Given the same work from the same state, without and with an id
    costs = []
    for transaction_id in (None, ORDER):
        work = fresh_start(ddb, tables)
        tm = make_tm(key_schemas={tables.data: {"pk": "S"}})
        with count_requests(tm.client) as counts:
            tm.run(work, **({"transaction_id": transaction_id} if transaction_id else {}))
        costs.append(counts)
    plain, with_id = costs
    # Then the id costs one write, its claim (both keep the record, so neither deletes it)
    assert with_id.writes == plain.writes + 1 and with_id.reads == plain.reads == 0
    assert with_id.by_operation["PutItem"] == plain.by_operation["PutItem"] + 1
    assert "DeleteItem" not in plain.by_operation and "DeleteItem" not in with_id.by_operation
    # and a retry of the committed id costs the failed claim and two reads, nothing else
    assert cost(make_tm, work, tables) == (1, 2)
    # the figures in docs/transactions.md: one fewer where the unlock of its insert rides in
    # the record's completion (TransactWriteItems: moto) than where it goes alone (dynalite)
    assert plain.writes == 13 - SERVES_TRANSACTIONS[backend.kind]


def cost(make_tm: Callable[..., TransactionManager], work: Work, tables: Tables) -> tuple[int, int]:
    """Writes and reads of one more run of ``work`` under the id, by a new coordinator."""
    tm = make_tm(key_schemas={tables.data: {"pk": "S"}})
    with count_requests(tm.client) as counts:
        tm.run(work, transaction_id=ORDER)
    return counts.writes, counts.reads


def test_given_a_rolled_back_or_dead_attempt_when_retried_then_the_cost_is_a_run_and_little_more(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, backend: LocalDynamo
) -> None:
    # Given an attempt rolled back after its work: the retry claims (refused), reads the
    # alias and the record, moves the alias, then runs as usual (14 writes, claim included)
    work = fresh_start(ddb, tables)
    first = make_tm().begin(transaction_id=ORDER)
    work(first)
    first.rollback()
    assert cost(make_tm, work, tables) == (15 - SERVES_TRANSACTIONS[backend.kind], 2)
    # Given an attempt that died after locking its first item (claim, create, lock a):
    # resumed, a's write is made under the recorded lock once the record, read again,
    # proves that lock is not a late one (a read more), and nothing is written twice
    work = fresh_start(ddb, tables)
    victim = make_tm(max_workers=1, key_schemas={tables.data: {"pk": "S"}})
    dies(victim, "before", 3)
    with pytest.raises(Crash):
        victim.run(work, transaction_id=ORDER)
    assert cost(make_tm, work, tables) == (13 - SERVES_TRANSACTIONS[backend.kind], 4)
    assert balances(ddb, tables) == ONCE


def test_given_a_second_attempt_dying_at_any_call_while_the_first_stalls_then_the_first_joins_it(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables
) -> None:
    schedules = 0
    for index in range(40):
        # Given a first attempt stalled before recording its second request (claim, create,
        # lock a, apply a, then the add of b), while a second attempt with the id resumes
        # the transaction, runs ahead and dies at its `index`-th call
        work = fresh_start(ddb, tables)
        first, second = make_tm(max_workers=1), make_tm(max_workers=1)
        first.key_names(tables.data)
        second.key_names(tables.data)
        chaos = dies(second, "after", index)

        def second_dies(second: TransactionManager = second, work: Work = work) -> None:
            with contextlib.suppress(Crash):
                second.run(work, transaction_id=ORDER)

        stall = Pause(first.client, 4, second_dies)
        # When the first goes on: the requests the second recorded first are the same ones
        outcome = first.run(work, transaction_id=ORDER)
        stall.close()
        if not chaos.fired:
            break
        schedules += 1
        # Then it ends well and the work applied once
        at = f"second attempt died after its call {index} ({chaos.calls[index]})"
        assert outcome == "paid" or isinstance(outcome, AlreadyCommitted), at
        then_applied_once(make_tm, ddb, tables, work, at)
    assert schedules >= 10


# --- several writes to one item (the record keeps the last, with its number) --------------


class TwiceSame(Work):
    """Two equal writes to a: only their number tells them apart."""

    def steps(self, tx: Transaction) -> str:
        self.add(tx, "a", -5)
        self.add(tx, "a", -5)
        self.add(tx, "b", 10)
        self.order(tx)
        return "paid"


class TwiceOther(Work):
    """A put, then an update of the same item: the record keeps the update."""

    def steps(self, tx: Transaction) -> str:
        tx.put_item(TableName=self.table, Item={"pk": {"S": "a"}, "balance": {"N": "93"}})
        self.add(tx, "a", -3)
        self.add(tx, "b", 10)
        self.order(tx)
        return "paid"


class ReadBetween(Work):
    """Reads a between its two writes: what it saw there is not kept anywhere."""

    def steps(self, tx: Transaction) -> str:
        before = self.balance(tx)
        self.add(tx, "a", -5)
        assert self.balance(tx) == before - 5
        self.add(tx, "a", -5)
        self.add(tx, "b", 10)
        self.order(tx)
        return "paid"

    def balance(self, tx: Transaction) -> int:
        item = tx.get_item(TableName=self.table, Key={"pk": {"S": "a"}})["Item"]
        return int(item["balance"]["N"])


class QueryThenWrite(Work):
    """Reads with a Query and a BatchGetItem (read locks on what they return), then writes
    the values it computed from them."""

    def steps(self, tx: Transaction) -> str:
        (a,) = tx.query(
            TableName=self.table,
            KeyConditionExpression="pk = :a",
            ExpressionAttributeValues={":a": {"S": "a"}},
        )["Items"]
        keys = {self.table: {"Keys": [{"pk": {"S": "b"}}]}}
        (b,) = tx.batch_get_item(RequestItems=keys)["Responses"][self.table]
        for pk, item, amount in (("a", a, -10), ("b", b, 10)):
            tx.update_item(
                TableName=self.table,
                Key={"pk": {"S": pk}},
                UpdateExpression="SET balance = :v",
                ExpressionAttributeValues={":v": {"N": str(int(item["balance"]["N"]) + amount)}},
            )
        self.order(tx)
        return "paid"


@pytest.mark.parametrize(
    ("chain", "blob"),
    [
        (TwiceSame, 0),
        (TwiceOther, 0),
        (ReadBetween, 0),
        (ReadBetween, 70_000),
        (QueryThenWrite, 0),
    ],
    ids=[
        "same-writes",
        "put-then-update",
        "read-between",
        "read-between-image-apart",
        "query-then-write",
    ],
)
@pytest.mark.fault_product("chain")
def test_given_work_writing_an_item_twice_when_its_attempt_dies_anywhere_then_a_retry_applies_once(
    make_tm: Callable[..., TransactionManager],
    ddb: Any,
    tables: Tables,
    chain: type[Work],
    blob: int,
) -> None:
    schedules = 0
    for index in range(60):
        # Given an attempt that dies after its `index`-th call (with a blob, a's image is
        # too large to ride in the item and goes to the images table)
        fresh_start(ddb, tables)
        if blob:
            a = {"pk": {"S": "a"}, "balance": {"N": "100"}, "blob": {"S": "x" * blob}}
            ddb.put_item(TableName=tables.data, Item=a)
        work = chain(tables.data)
        victim = make_tm(max_workers=1)
        victim.key_names(tables.data)
        chaos = dies(victim, "after", index)
        with contextlib.suppress(Crash):
            victim.run(work, transaction_id=ORDER)
        if not chaos.fired:
            break
        schedules += 1
        # When the work is retried under the id: resumed (the earlier writes to a are
        # neither applied again nor compared), or, where a read between them must be
        # answered, rolled back and run again from the start
        outcome = make_tm().run(work, transaction_id=ORDER)
        # Then every write applied once
        at = f"died after call {index} ({chaos.calls[index]})"
        assert outcome == "paid" or isinstance(outcome, AlreadyCommitted), at
        then_applied_once(make_tm, ddb, tables, work, at)
    assert schedules >= 14
