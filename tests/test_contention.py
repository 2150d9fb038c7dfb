"""Contention: wound-wait by start order, bounded waits, stale holders, orphan locks."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from ddbtx import (
    ConditionalCheckFailedError,
    Contention,
    TransactionConflictError,
    TransactionManager,
    TransactionRolledBackError,
)
from ddbtx import schema as s
from ddbtx._base.drive import drive, perform
from ddbtx._base.effects import Call, Gather, Run, Sleep
from ddbtx.chaos import Chaos, Crash, FaultKind
from ddbtx.sweeper import CURSOR_SK, Sweeper
from helpers import Tables, assert_clean, data_state, scan


def bump(tx: Any, table: str, pk: str, amount: int = 1) -> None:
    tx.update_item(
        TableName=table,
        Key={"pk": {"S": pk}},
        UpdateExpression="ADD balance :n",
        ExpressionAttributeValues={":n": {"N": str(amount)}},
    )


def balance(ddb: Any, tables: Tables, pk: str) -> str:
    return str(data_state(ddb, tables.data)[pk]["balance"]["N"])


def test_given_two_begins_in_a_row_then_the_first_is_strictly_older(tm: TransactionManager) -> None:
    ids = [tm.begin().id for _ in range(50)]
    assert ids == sorted(ids) and len(set(ids)) == 50


def test_given_a_younger_holder_when_an_older_transaction_needs_the_item_then_it_wounds_it(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given: the older transaction began first, the younger took the lock
    seed(x=0, y=0)
    older, younger = make_tm().begin(), make_tm().begin()
    bump(younger, tables.data, "y")
    bump(younger, tables.data, "x", 10)
    # When
    bump(older, tables.data, "x", 1)
    older.commit()
    # Then: the younger was rolled back completely and learns it on its next call
    assert (balance(ddb, tables, "x"), balance(ddb, tables, "y")) == ("1", "0")
    with pytest.raises(TransactionRolledBackError):
        younger.commit()
    assert_clean(ddb, tables)


def test_given_an_older_holder_when_a_younger_one_waits_past_the_bound_then_it_rolls_itself_back(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any, clock: Any
) -> None:
    seed(x=0, y=0)
    older = make_tm().begin()
    younger = make_tm(lock_wait=2.0, stale_after=60.0).begin()
    bump(older, tables.data, "x")
    bump(younger, tables.data, "y", 5)
    start = clock.now
    # When the younger keeps finding x locked by a live, older transaction
    with pytest.raises(TransactionConflictError, match="older transaction"):
        bump(younger, tables.data, "x", 5)
    # Then it waited (on the injected clock) at least the bound, and undid its own writes
    assert clock.now - start >= 2.0
    assert younger.state == s.STATE_ROLLED_BACK
    assert balance(ddb, tables, "y") == "0"
    older.commit()
    assert balance(ddb, tables, "x") == "1"
    assert_clean(ddb, tables)


def test_given_a_holder_without_progress_when_waited_on_past_stale_after_then_it_is_broken(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    seed(x=0)
    stuck = make_tm().begin()  # older, but its coordinator stopped making progress
    bump(stuck, tables.data, "x", 100)
    waiter = make_tm(lock_wait=30.0, stale_after=1.0).begin()
    bump(waiter, tables.data, "x", 1)
    waiter.commit()
    assert balance(ddb, tables, "x") == "1"
    with pytest.raises(TransactionRolledBackError):
        stuck.commit()
    assert_clean(ddb, tables)


def test_given_a_committed_but_not_completed_holder_when_its_item_is_needed_then_it_rolls_forward(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    seed(x=0)
    dead = make_tm().begin()
    bump(dead, tables.data, "x", 7)
    dead.p.run(
        dead.p.records.decide(dead.id, s.STATE_COMMITTED)
    )  # committed, then its coordinator died
    tx = make_tm().begin()
    bump(tx, tables.data, "x", 1)
    tx.commit()
    assert balance(ddb, tables, "x") == "8"
    assert_clean(ddb, tables)


def test_given_a_forged_lock_to_a_missing_record_when_an_item_is_needed_then_it_is_released(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given a user write that forged a lock attribute pointing nowhere
    seed(x=0)
    ddb.update_item(
        TableName=tables.data,
        Key={"pk": {"S": "x"}},
        UpdateExpression="SET #l = :l",
        ExpressionAttributeNames={"#l": s.ATTR_LOCK},
        ExpressionAttributeValues={":l": {"S": "0000000000000000-deadbeef/0000"}},
    )
    # When
    tx = tm.begin()
    bump(tx, tables.data, "x", 3)
    tx.commit()
    # Then the forged lock is gone and the write landed on the original data
    assert data_state(ddb, tables.data)["x"] == {"pk": {"S": "x"}, "balance": {"N": "3"}}
    assert_clean(ddb, tables)


def test_given_the_java_policy_when_contending_then_the_holder_is_always_rolled_back(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    seed(x=0)
    older = make_tm(contention=Contention.ROLLBACK_HOLDER).begin()
    younger = make_tm(contention=Contention.ROLLBACK_HOLDER).begin()
    bump(older, tables.data, "x", 5)
    bump(younger, tables.data, "x", 1)  # younger breaks the older holder: no waiting
    younger.commit()
    with pytest.raises(TransactionRolledBackError):
        older.commit()
    assert balance(ddb, tables, "x") == "1"
    assert_clean(ddb, tables)


def test_given_an_item_created_while_a_lock_was_being_taken_then_a_rollback_never_deletes_it(
    make_tm: Any, backend: Any, ddb: Any, tables: Tables
) -> None:
    """The Java library's flaw: a lock on a missing item checked only 'unlocked'."""
    # Given: right before our insert-lock is sent, someone else creates and commits the item
    tm = make_tm()
    other = make_tm()
    fired = []

    def create_first(params: dict[str, Any], **_: Any) -> None:
        is_our_insert_lock = params.get("TableName") == tables.data and params.get("Item", {}).get(
            "pk"
        ) == {"S": "x"}
        if is_our_insert_lock and not fired:
            fired.append(True)
            with other.transaction() as tx2:
                tx2.put_item(TableName=tables.data, Item={"pk": {"S": "x"}, "v": {"S": "theirs"}})

    tm.client.meta.events.register("provide-client-params.dynamodb.PutItem", create_first)
    tx = tm.begin()
    # When we insert (the condition expects no item) and then roll back
    tx.put_item(TableName=tables.data, Item={"pk": {"S": "y"}, "v": {"S": "ours"}})
    tx.put_item(TableName=tables.data, Item={"pk": {"S": "x"}, "v": {"S": "ours"}})
    tx.rollback()
    # Then their committed item survives untouched
    assert fired
    assert data_state(ddb, tables.data) == {"x": {"pk": {"S": "x"}, "v": {"S": "theirs"}}}
    assert_clean(ddb, tables)


def requests_seen(tm: TransactionManager) -> list[tuple[str, str, str]]:
    """(operation, table, hash key) of every request ``tm`` sends from now on."""
    seen: list[tuple[str, str, str]] = []

    def note(params: dict[str, Any], model: Any, **_: Any) -> None:
        key = params.get("Key") or params.get("Item") or {}
        first = next(iter(key.values()), {}) if key else {}
        seen.append((model.name, params.get("TableName", ""), str(first.get("S", ""))))

    tm.client.meta.events.register("provide-client-params.dynamodb", note)
    return seen


def test_given_an_older_holder_when_a_younger_lock_step_waits_then_each_pause_is_a_sleep_effect(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given an older holder of x, and a younger transaction's recorded write to x, on a
    # manager whose own sleep must never be called (the driver sleeps, not the step)
    seed(x=0)
    older = make_tm().begin()
    bump(older, tables.data, "x", 2)

    def never(seconds: float) -> None:
        raise AssertionError("a step slept by itself")

    younger = make_tm(sleep=never).begin()
    params = {
        "TableName": tables.data,
        "Key": {"pk": {"S": "x"}},
        "UpdateExpression": "ADD balance :n",
        "ExpressionAttributeValues": {":n": {"N": "1"}},
    }
    req = younger.p.run(younger.build("update", params))
    (local,) = younger.p.run(younger.add([younger.plan(req)]))
    p = younger.p
    # When its lock step is driven here, and the older commits during its second pause
    effects: list[Any] = []
    for effect in (run := Run(younger.steps.lock_and_apply(local))):
        effects.append(effect)
        with run.outcome() as out:
            if isinstance(effect, Sleep):
                if sum(isinstance(e, Sleep) for e in effects) == 2:
                    older.commit()
            elif isinstance(effect, Gather):
                out.value = [drive(sub, p.client) for sub in effect.steps]
            else:
                out.value = perform(p.client, p.sleep, effect)
    # Then each wait came out as a Sleep effect, between the step's requests
    assert [type(e) for e in effects].count(Sleep) == 2
    assert all(isinstance(e, (Call, Sleep)) for e in effects)
    younger.commit()
    assert balance(ddb, tables, "x") == "3"
    assert_clean(ddb, tables)


def test_given_an_older_holder_when_a_younger_one_waits_then_each_poll_is_one_item_read(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given an older holder that commits during the younger's third pause
    seed(x=0, y=0)
    older = make_tm().begin()
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            older.commit()

    younger = make_tm(sleep=sleep).begin()
    bump(older, tables.data, "x", 2)
    bump(younger, tables.data, "y")
    seen = requests_seen(younger.manager)
    # When the younger needs x
    bump(younger, tables.data, "x", 1)
    younger.commit()
    # Then it read the holder's record once, and polled with item reads alone
    header_reads = [r for r in seen if r[:2] == ("GetItem", tables.tx) and r[2] == older.id]
    item_reads = [r for r in seen if r[:2] == ("GetItem", tables.data)]
    x_writes = [r for r in seen if r == ("UpdateItem", tables.data, "x")]
    assert len(sleeps) == 3 and len(header_reads) == 1
    assert len(item_reads) == 1 + 3  # after the failed lock, then once per pause
    assert len(x_writes) == 4  # the failed lock, the lock, the write, the commit's release
    assert (balance(ddb, tables, "x"), balance(ddb, tables, "y")) == ("3", "1")
    assert_clean(ddb, tables)


def test_given_a_decided_holder_still_releasing_when_its_item_is_needed_then_it_is_left_to_it(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given a holder decided committed, whose live coordinator releases during our first pause
    seed(x=0)
    holder = make_tm().begin()
    bump(holder, tables.data, "x", 7)
    holder.p.run(holder.p.records.decide(holder.id, s.STATE_COMMITTED))
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 1:
            holder.commit()

    for policy in Contention:
        tm = make_tm(sleep=sleep, contention=policy)
        seen = requests_seen(tm)
        # When another transaction needs x
        with tm.transaction() as tx:
            bump(tx, tables.data, "x", 1)
        sleeps.clear()
        # Then it waited and never wrote to the holder's record or items on its behalf
        assert not [
            r for r in seen if r[1] == tables.tx and r[2] == holder.id and r[0] != "GetItem"
        ]
    assert balance(ddb, tables, "x") == "9"
    assert_clean(ddb, tables)


def test_given_an_earlier_attempts_priority_when_a_retry_begins_then_it_is_that_old_and_unique(
    tm: TransactionManager,
) -> None:
    first = tm.begin()
    younger = tm.begin()
    retry = tm.begin(priority=first.id)
    assert retry.id < younger.id and retry.id != first.id and retry.id[:16] == first.id[:16]
    assert tm.begin(priority=retry.id).id[:16] == first.id[:16]
    with pytest.raises(ValueError, match="priority"):
        tm.begin(priority="not-an-id")


def test_given_a_retry_with_its_first_attempts_priority_when_a_younger_holds_then_it_wounds(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given a first attempt that was rolled back, and a transaction begun after it holding x
    seed(x=0, y=0)
    first = make_tm().begin()
    bump(first, tables.data, "y", 100)
    first.rollback()
    younger = make_tm().begin()
    bump(younger, tables.data, "x", 10)
    # A retry with a fresh priority is the younger one: it gives up (lock_wait 0)
    with pytest.raises(TransactionConflictError):
        bump(make_tm(lock_wait=0.0).begin(), tables.data, "x", 1)
    # When the retry instead keeps the first attempt's priority
    retry = make_tm(lock_wait=0.0).begin(priority=first.id)
    bump(retry, tables.data, "x", 1)
    retry.commit()
    # Then it is the older one: it wounded the holder
    with pytest.raises(TransactionRolledBackError):
        younger.commit()
    assert (balance(ddb, tables, "x"), balance(ddb, tables, "y")) == ("1", "0")
    assert_clean(ddb, tables)


def test_given_work_wounded_on_its_first_attempt_when_run_then_it_retries_as_old_and_commits(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    seed(x=0, y=0)
    tm = make_tm()
    older = make_tm().begin()
    ids: list[str] = []

    def work(tx: Any) -> str:
        ids.append(tx.id)
        bump(tx, tables.data, "y", 1)
        if len(ids) == 1:
            bump(older, tables.data, "y", 10)  # the older transaction wounds this attempt
            older.commit()
        bump(tx, tables.data, "x", 1)
        return "done"

    # When the work runs under tm.run
    assert tm.run(work, attempts=3) == "done"
    # Then the second attempt kept the first one's priority, and only it committed
    assert len(ids) == 2 and ids[0] != ids[1] and ids[0][:16] == ids[1][:16]
    assert (balance(ddb, tables, "x"), balance(ddb, tables, "y")) == ("1", "11")
    assert_clean(ddb, tables)


def test_given_run_when_attempts_run_out_or_another_error_occurs_then_it_raises(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    seed(x=0)
    tm = make_tm(lock_wait=0.0)
    holder = make_tm().begin()  # older, so every attempt of the work waits and gives up
    bump(holder, tables.data, "x", 5)
    calls: list[str] = []

    def blocked(tx: Any) -> None:
        calls.append(tx.id)
        bump(tx, tables.data, "x", 1)

    with pytest.raises(TransactionConflictError):
        tm.run(blocked, attempts=2)
    assert len(calls) == 2
    holder.commit()

    def overdraw(tx: Any) -> None:
        calls.append(tx.id)
        tx.update_item(
            TableName=tables.data,
            Key={"pk": {"S": "x"}},
            UpdateExpression="ADD balance :n",
            ConditionExpression="balance >= :big",
            ExpressionAttributeValues={":n": {"N": "-100"}, ":big": {"N": "100"}},
        )

    from ddbtx import ConditionalCheckFailedError

    with pytest.raises(ConditionalCheckFailedError):
        tm.run(overdraw, attempts=5)
    assert len(calls) == 3  # the user's own condition is not retried
    with pytest.raises(ValueError):
        tm.run(overdraw, attempts=0)
    assert balance(ddb, tables, "x") == "5"
    assert_clean(ddb, tables)


class ReleasedInBetween:
    """Each time ``client`` writes ``pk``, another transaction has just locked it; each
    time it reads ``pk`` next, that transaction has just committed (``rounds`` times)."""

    def __init__(self, client: Any, other: TransactionManager, table: str, pk: str, rounds: int):
        self.other, self.table, self.pk, self.rounds = other, table, pk, rounds
        self.holder: Any = None
        self.conflicts = 0
        client.meta.events.register("before-parameter-build.dynamodb.UpdateItem", self._lock)
        client.meta.events.register("before-parameter-build.dynamodb.GetItem", self._release)

    def _mine(self, params: dict[str, Any]) -> bool:
        return params.get("TableName") == self.table and params["Key"]["pk"]["S"] == self.pk

    def _lock(self, params: dict[str, Any], **_: Any) -> None:
        if self._mine(params) and self.rounds > 0 and self.holder is None:
            self.rounds -= 1
            self.holder = self.other.begin()
            bump(self.holder, self.table, self.pk)

    def _release(self, params: dict[str, Any], **_: Any) -> None:
        if self._mine(params) and self.holder is not None:
            self.holder.commit()
            self.holder = None
            self.conflicts += 1


@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_given_a_holder_released_between_a_failed_write_and_its_read_then_no_condition_is_blamed(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any, rounds: int
) -> None:
    # Given an item whose lock is taken and released around each write and read of ours
    seed(a=100)
    tm = make_tm()
    race = ReleasedInBetween(tm.client, make_tm(), tables.data, "a", rounds)
    # When a request whose condition holds throughout meets that race
    tx = tm.begin()
    tx.update_item(
        TableName=tables.data,
        Key={"pk": {"S": "a"}},
        UpdateExpression="SET balance = balance - :n",
        ConditionExpression="balance >= :n",
        ExpressionAttributeValues={":n": {"N": "10"}},
    )
    tx.commit()
    # Then it was not refused: it saw every race and still applied after the others
    assert race.conflicts == rounds
    assert balance(ddb, tables, "a") == str(100 + rounds - 10)
    assert_clean(ddb, tables)


def test_given_a_false_condition_on_a_contended_item_then_it_is_still_refused(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given the same race on an item whose balance can never cover the request
    seed(a=5)
    tm = make_tm()
    ReleasedInBetween(tm.client, make_tm(), tables.data, "a", 2)
    # When the request is made, then its condition is reported false, and nothing changed
    tx = tm.begin()
    with pytest.raises(ConditionalCheckFailedError, match="condition is false"):
        tx.update_item(
            TableName=tables.data,
            Key={"pk": {"S": "a"}},
            UpdateExpression="SET balance = balance - :n",
            ConditionExpression="balance >= :n",
            ExpressionAttributeValues={":n": {"N": "10"}},
        )
    assert int(balance(ddb, tables, "a")) in (5, 6, 7)
    assert_clean(ddb, tables)


def raw_header(ddb: Any, tables: Tables, tx_id: str) -> dict[str, Any]:
    item: dict[str, Any] = ddb.get_item(
        TableName=tables.tx,
        Key={s.TX_PK: {"S": tx_id}, s.TX_SK: {"S": s.TX_HEADER_SK}},
        ConsistentRead=True,
    )["Item"]
    return item


def test_given_a_running_younger_holder_when_an_older_one_needs_its_item_then_it_waits_for_it(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given a younger holder of x that is running (not waiting), and commits during
    # the older one's second pause
    seed(x=0, y=0)
    older = make_tm().begin()
    younger = make_tm().begin()
    bump(older, tables.data, "y", 1)
    bump(younger, tables.data, "x", 10)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            younger.commit()

    older.manager.sleep = sleep
    seen = requests_seen(older.manager)
    # When the older one needs x
    bump(older, tables.data, "x", 1)
    older.commit()
    # Then it waited for the holder instead of rolling it back: both writes stand,
    # and it never wrote to the younger one's record
    assert len(sleeps) == 2
    assert not [r for r in seen if r[1] == tables.tx and r[2] == younger.id and r[0] != "GetItem"]
    assert younger.state == s.STATE_COMMITTED
    assert (balance(ddb, tables, "x"), balance(ddb, tables, "y")) == ("11", "1")
    assert_clean(ddb, tables)


def test_given_a_younger_holder_that_stays_idle_when_patience_runs_out_then_it_is_wounded(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any, clock: Any
) -> None:
    # Given a younger holder of x whose coordinator does nothing more (user think time)
    seed(x=0)
    older = make_tm(wound_patience=0.5).begin()
    younger = make_tm().begin()
    bump(younger, tables.data, "x", 10)
    start = clock.now
    # When the older one needs x
    bump(older, tables.data, "x", 1)
    older.commit()
    # Then it waited its patience (on the injected clock) and then rolled the holder back
    assert 0.5 <= clock.now - start < 0.5 + 1.0
    with pytest.raises(TransactionRolledBackError):
        younger.commit()
    assert balance(ddb, tables, "x") == "1"
    # And with no patience at all it wounds at once, without a pause
    idle = make_tm().begin()
    bump(idle, tables.data, "x", 10)
    start = clock.now
    impatient = make_tm(wound_patience=0.0)
    with impatient.transaction(priority=older.id) as tx:
        bump(tx, tables.data, "x", 1)
    assert clock.now == start
    with pytest.raises(TransactionRolledBackError):
        idle.commit()
    assert balance(ddb, tables, "x") == "2"
    assert_clean(ddb, tables)


def older_on_x_younger_on_y(
    make_tm: Any, tables: Tables, seed: Any, *accounts: str, **younger_options: Any
) -> tuple[Any, TransactionManager, Any]:
    """An older transaction holding x, and a younger one (its own manager) holding y."""
    seed(**{name: 0 for name in ("x", "y", *accounts)})
    older = make_tm().begin()
    bump(older, tables.data, "x", 2)
    younger_tm = make_tm(**younger_options)
    younger = younger_tm.begin()
    bump(younger, tables.data, "y", 1)
    return older, younger_tm, younger


def test_given_a_waiting_transaction_then_its_record_is_marked_once_and_the_next_add_clears_it(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any, clock: Any
) -> None:
    # Given a younger transaction holding y, which will wait for x held by an older one
    older, younger_tm, younger = older_on_x_younger_on_y(make_tm, tables, seed, "z")
    during: list[dict[str, Any]] = []
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        during.append(raw_header(ddb, tables, younger.id))
        if len(sleeps) == 3:
            older.commit()

    younger_tm.sleep = sleep
    seen = requests_seen(younger_tm)
    # Time moves on with each of its writes, so a write that stamped the record would show
    younger_tm.client.meta.events.register(
        "before-parameter-build.dynamodb.UpdateItem", lambda **_: clock.advance(1.0)
    )
    added_x_at = {"N": str(int(clock.now * 1000))}
    # When it waits three pauses for x, gets it, and then adds z
    bump(younger, tables.data, "x", 1)
    after_wait = raw_header(ddb, tables, younger.id)
    bump(younger, tables.data, "z", 1)
    after_add = raw_header(ddb, tables, younger.id)
    header_writes = [r for r in seen if r[:2] == ("UpdateItem", tables.tx)]
    younger.commit()
    # Then the record named the holder from the first pause on, with one write, and
    # neither its version nor its timestamp moved (staleness and sweeps go by them)
    assert len(sleeps) == 3
    assert all(h.get(s.TX_WAITING) == {"S": older.id} for h in during)
    assert len(header_writes) == 3  # the add of x, the mark (once for three pauses), the add of z
    for h in [*during, after_wait]:
        assert h[s.TX_VERSION] == {"N": "2"}  # the create with y, the add of x
        assert h[s.TX_UPDATED] == added_x_at
    # And the add of z took the mark away in its own write
    assert s.TX_WAITING in after_wait and s.TX_WAITING not in after_add
    assert after_add[s.TX_VERSION] == {"N": "3"}
    assert [balance(ddb, tables, k) for k in "xyz"] == ["3", "1", "1"]
    assert_clean(ddb, tables)


def test_given_a_deadlock_when_the_older_finds_the_younger_marked_then_it_wounds_it_at_once(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given A (older) holding x and B (younger) holding y: A moves 3 from x to y,
    # B moves 1 from y to x. A's patience is far longer than the test could wait.
    seed(x=10, y=10)
    a_sleeps: list[float] = []
    a_tm = make_tm(wound_patience=3600.0, sleep=a_sleeps.append)
    b_tm = make_tm()
    a, b = a_tm.begin(), b_tm.begin()
    bump(a, tables.data, "x", -3)
    bump(b, tables.data, "y", -1)
    b_sleeps: list[float] = []

    def b_sleep(seconds: float) -> None:
        # While B waits for x (held by the older A), A asks for y (held by B): a cycle.
        b_sleeps.append(seconds)
        if len(b_sleeps) == 1:
            bump(a, tables.data, "y", 3)
            a.commit()

    b_tm.sleep = b_sleep
    # When B asks for x: B waits for the older A (and marks itself waiting); during
    # its first pause A asks for y, finds B marked, and rolls it back without a pause
    with pytest.raises(TransactionRolledBackError):
        bump(b, tables.data, "x", 1)
        b.commit()
    assert a.state == s.STATE_COMMITTED and a_sleeps == []
    # Then B, retried with its first attempt's priority, commits too, and money is conserved
    b_tm.sleep = lambda seconds: None
    with b_tm.transaction(priority=b.id) as retry:
        bump(retry, tables.data, "y", -1)
        bump(retry, tables.data, "x", 1)
    assert (balance(ddb, tables, "x"), balance(ddb, tables, "y")) == ("8", "12")
    assert_clean(ddb, tables)


class WaitMarkFault:
    """A :class:`Chaos` fault armed at a client's first wait-mark write; counts those writes.

    The wait mark is the UpdateItem that sets the TX record's waiting attribute
    (an add also names it, to remove it).
    """

    def __init__(self, client: Any, kind: FaultKind) -> None:
        self.chaos = Chaos(client)
        self.kind = kind
        self.marks = 0
        client.meta.events.register("before-parameter-build.dynamodb.UpdateItem", self._arm)

    def _arm(self, params: dict[str, Any], **_: Any) -> None:
        names = params.get("ExpressionAttributeNames") or {}
        if s.TX_WAITING in names.values() and "REMOVE" not in params["UpdateExpression"]:
            self.marks += 1
            if self.marks == 1:
                self.chaos.arm(self.kind, at=0)  # this very call: it is counted next


def records_left(ddb: Any, tables: Tables) -> list[dict[str, Any]]:
    """TX record rows (headers and request bodies), without the sweeper's cursor."""
    return [row for row in scan(ddb, tables.tx) if row[s.TX_SK]["S"] != CURSOR_SK]


@pytest.mark.parametrize("kind", ["before", "after"])
def test_given_a_blocked_younger_one_when_it_crashes_at_its_wait_mark_then_a_sweep_undoes_it(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any, clock: Any, kind: FaultKind
) -> None:
    # Given an older transaction holding x, and a younger one holding y whose coordinator
    # dies right before (or right after) writing its wait mark, on finding x locked
    older, younger_tm, younger = older_on_x_younger_on_y(make_tm, tables, seed, "z")
    fault = WaitMarkFault(younger_tm.client, kind)
    with pytest.raises(Crash):
        bump(younger, tables.data, "x", 1)
    # Then its record names the older one only if the mark was written, and the mark
    # moved neither its version nor its timestamp (the sweeper goes by them)
    record = raw_header(ddb, tables, younger.id)
    assert fault.chaos.fired and fault.marks == 1
    assert record.get(s.TX_WAITING) == ({"S": older.id} if kind == "after" else None)
    assert record[s.TX_VERSION] == {"N": "2"}  # the create with y, the add of x
    assert record[s.TX_UPDATED] == {"N": str(int(clock.now * 1000))}
    # When time passes, the older one goes on (z), a sweeper runs, and the older commits
    clock.advance(31)
    bump(older, tables.data, "z", 1)
    sweeper = Sweeper(make_tm(), rollback_after=timedelta(seconds=30), delete_after=timedelta(0))
    swept = sweeper.run()
    older.commit()
    older.delete()
    clock.advance(1)
    sweeper.run()
    # Then the sweeper rolled the younger one back (y is as before, x is the older's) and
    # deleted its record; no lock, image, protocol attribute or record is left
    assert swept.rolled_back == 1
    assert [balance(ddb, tables, k) for k in "xyz"] == ["2", "0", "1"]
    assert_clean(ddb, tables)
    assert records_left(ddb, tables) == []


def test_given_a_blocked_younger_one_when_its_wait_mark_answer_is_lost_then_it_goes_on(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any, clock: Any
) -> None:
    # Given an older transaction holding x, and a younger one holding y that waits for x;
    # the answer to its wait mark is lost and the SDK sends the mark again. The older one
    # adds w during the first pause and commits once 4 s have passed, so the younger one
    # reads its record again (after stale_after, 3 s) and finds it making progress.
    older, younger_tm, younger = older_on_x_younger_on_y(
        make_tm, tables, seed, "w", "z", lock_wait=30.0
    )
    start = clock.now
    during: list[dict[str, Any]] = []

    def sleep(seconds: float) -> None:
        during.append(raw_header(ddb, tables, younger.id))
        if len(during) == 1:
            bump(older, tables.data, "w", 1)
        clock.advance(seconds)
        if clock.now - start >= 4.0 and older.state == s.STATE_PENDING:
            older.commit()

    younger_tm.sleep = sleep
    fault = WaitMarkFault(younger_tm.client, "lost")
    # When it gets x after the wait, and then adds z
    bump(younger, tables.data, "x", 1)
    after_wait = raw_header(ddb, tables, younger.id)
    bump(younger, tables.data, "z", 1)
    after_add = raw_header(ddb, tables, younger.id)
    younger.commit()
    # Then the mark was written once (resent only by the SDK) and named the older one
    # throughout the wait, and the add of z took it away in its own write
    assert fault.chaos.fired and fault.marks == 1
    assert during and all(h.get(s.TX_WAITING) == {"S": older.id} for h in [*during, after_wait])
    assert s.TX_WAITING not in after_add
    assert [balance(ddb, tables, k) for k in "wxyz"] == ["1", "3", "1", "1"]
    assert_clean(ddb, tables)
