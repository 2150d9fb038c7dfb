"""Breaking a lock by hand (issue 13, goal 6): mutex, lease and FIFO rows; refused while
the holder heartbeats (watched for one lease, in virtual time) unless forced; the
write conditioned on the holder as read; counters kept; a lost answer; bad input."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from ddbtx import schema
from ddbtx.locks import (
    FifoLock,
    LeaseLockClient,
    LockNotFoundError,
    Mutex,
    Seen,
    break_lock,
    list_locks,
)
from helpers import scan

from .conftest import LEASE, R, Wall
from .support import Log, LoseOnce, Stall, VirtualTime, wait_until

MakeLock = Callable[..., Any]
Breaks = Callable[..., Any]


@pytest.fixture
def breaks(ddb: Any, locks: str, vt: VirtualTime, wall: Wall) -> Breaks:
    """``breaks(resource, **options)``: :func:`break_lock` by "alice@ops" on the
    test's virtual clock and wall clock."""

    def run(resource: str = R, **options: Any) -> Any:
        settings = {"by": "alice@ops", "clock": vt.now, "sleep": vt.sleep, "wall_clock": wall}
        return break_lock(ddb, locks, resource, **{**settings, **options})

    return run


def row(ddb: Any, locks: str, sort_key: str, resource: str = R) -> dict[str, Any]:
    key = {schema.LOCK_PK: {"S": resource}, schema.LOCK_SK: {"S": sort_key}}
    item: dict[str, Any] = ddb.get_item(TableName=locks, Key=key, ConsistentRead=True)["Item"]
    return item


def mark(item: dict[str, Any]) -> dict[str, Any]:
    """The break mark of a row (who, whose grant, forced), as plain values."""
    body = item["brk"]["M"]
    assert {"id", "at"} <= set(body)
    return {k: next(iter(v.values())) for k, v in body.items() if k not in ("id", "at")}


# --- lease ------------------------------------------------------------------------------


def test_given_a_dead_lease_holder_with_a_waiter_when_broken_then_freed_counter_and_line_kept(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, breaks: Breaks
) -> None:
    # Given: a holder that stopped heartbeating
    dead = make_lock(LeaseLockClient, "host-a").acquire(R)
    # When: watched for one lease on the breaker's clock
    start = vt.now()
    result = breaks(kind="lease")
    # Then: broken; its fencing counter stays; the broken holder learns it lost the lock
    assert (result.outcome, result.kind, result.owner, result.fencing_token) == (
        "broken", "lease", "host-a", 1,
    )  # fmt: skip
    assert vt.now() - start >= LEASE
    assert result.before["owner"] == {"S": "host-a"}
    assert dead.heartbeat() is False and dead.lost
    after = row(ddb, locks, "lease")
    assert after["fence"] == {"N": "1"} and "owner" not in after
    assert mark(after) == {"by": "alice@ops", "owner": "host-a", "token": "1", "forced": False}
    assert make_lock(LeaseLockClient, "host-b").acquire(R, wait=0).fencing_token == 2


def test_given_a_dead_holder_and_a_waiter_in_line_when_broken_then_the_waiter_gets_it_next(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, wall: Wall, breaks: Breaks
) -> None:
    # Given: a dead holder, seen by a break a lease ago (the waiter in line has watched
    # it for less, so it has not taken over yet)
    make_lock(LeaseLockClient, "host-a").acquire(R)
    seen = breaks(max_wait=0).seen
    log = Log(vt, R)
    thread = vt.spawn(log.waiter(make_lock(LeaseLockClient, "host-b")))
    wait_until(lambda: any(r.state == "waiting" for r in list_locks(ddb, locks)), "in line")
    wall.now += LEASE
    # When
    result = breaks(max_wait=0, seen=seen)
    with vt.idle():
        thread.join(timeout=30)
    # Then: the line stayed, and its first took the freed lock with the next token
    assert result.outcome == "broken"
    assert [(owner, token) for owner, token, _ in log.grants] == [("host-b", 2)]


def test_given_a_heartbeating_lease_holder_when_broken_then_refused_and_nothing_written(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, breaks: Breaks
) -> None:
    # Given: a holder that heartbeats every 9 s of its 20 s lease
    lock = make_lock(LeaseLockClient, "host-a").acquire(R)
    beating = vt.every(9.0, lock.heartbeat)
    # When
    result = breaks()
    beating.set()
    # Then
    assert result.outcome == "refused"
    assert "record version moved" in result.reason
    assert lock.heartbeat() is True and not lock.lost
    assert "brk" not in row(ddb, locks, "lease")


def test_given_a_live_lease_holder_when_broken_by_force_then_broken_at_once(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, breaks: Breaks
) -> None:
    # Given
    lock = make_lock(LeaseLockClient, "host-a").acquire(R)
    # When
    start = vt.now()
    result = breaks(force=True)
    # Then: no watching, and the holder's next heartbeat finds it gone
    assert (result.outcome, vt.now()) == ("broken", start)
    assert mark(row(ddb, locks, "lease"))["forced"] is True
    assert lock.heartbeat() is False
    assert make_lock(LeaseLockClient, "host-b").acquire(R, wait=0).fencing_token == 2


def test_given_a_holder_that_heartbeats_between_read_and_break_then_the_break_is_refused(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, breaks: Breaks
) -> None:
    # Given: the break (forced) has read the row; the holder heartbeats before it writes
    lock = make_lock(LeaseLockClient, "host-a").acquire(R)
    stall = Stall(ddb, "UpdateItem", vt)
    answers: list[Any] = []
    thread = vt.spawn(lambda: answers.append(breaks(force=True)))
    with vt.idle():
        assert stall.reached.wait(30)
    # When
    assert lock.heartbeat() is True
    stall.go()
    with vt.idle():
        thread.join(timeout=30)
    # Then: its condition (the holder as read) failed: nothing broken
    (result,) = answers
    assert (result.outcome, result.reason) == (
        "refused", "the row changed since it was read: look again",
    )  # fmt: skip
    assert lock.heartbeat() is True
    assert "brk" not in row(ddb, locks, "lease")


def test_given_a_lost_break_answer_when_the_sdk_retries_then_the_break_is_recognised(
    make_lock: MakeLock, ddb: Any, locks: str, breaks: Breaks
) -> None:
    # Given: the break is applied but its answer lost; its retry finds the holder gone
    lock = make_lock(LeaseLockClient, "host-a").acquire(R)
    lost = LoseOnce(ddb, "UpdateItem", lambda p: ":mark" in p["ExpressionAttributeValues"])
    # When
    result = breaks(force=True)
    # Then
    assert lost.fired
    assert result.outcome == "broken"
    assert lock.heartbeat() is False


def test_given_a_lease_longer_than_the_caller_may_wait_then_it_observes_and_breaks_a_lease_later(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, wall: Wall, breaks: Breaks
) -> None:
    # Given: a dead holder; the caller (a Lambda function) may watch only 5 s
    make_lock(LeaseLockClient, "host-a").acquire(R)
    first = breaks(max_wait=5.0)
    assert (first.outcome, "brk" in row(ddb, locks, "lease")) == ("observing", False)
    # When: called again with what it saw, too early and then a lease later
    wall.now += LEASE / 2
    early = breaks(max_wait=5.0, seen=first.seen)
    wall.now += LEASE / 2
    late = breaks(max_wait=5.0, seen=first.seen)
    # Then
    assert early.outcome == "observing" and "10 s" in early.reason
    assert late.outcome == "broken"


def test_given_a_seen_record_that_moved_since_then_the_break_is_refused(
    make_lock: MakeLock, ddb: Any, locks: str, wall: Wall, breaks: Breaks
) -> None:
    # Given: what an earlier call saw; the holder has heartbeaten since
    lock = make_lock(LeaseLockClient, "host-a").acquire(R)
    first = breaks(max_wait=0)
    assert lock.heartbeat() is True
    wall.now += 2 * LEASE
    # When
    result = breaks(max_wait=0, seen=first.seen)
    # Then
    assert (result.outcome, "brk" in row(ddb, locks, "lease")) == ("refused", False)
    assert "moved since it was seen" in result.reason


# --- FIFO ------------------------------------------------------------------------------------


def test_given_a_dead_fifo_holder_with_a_waiter_when_broken_then_the_next_ticket_holds(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, wall: Wall, breaks: Breaks
) -> None:
    # Given: a FIFO holder that stopped heartbeating, seen by a break a lease ago, and a
    # waiter that has watched it for less
    dead = make_lock(FifoLock, "p1").acquire(R, namespace="sum")
    seen = breaks(namespace="sum", max_wait=0).seen
    log = Log(vt, R)
    thread = vt.spawn(log.waiter(make_lock(FifoLock, "p2"), namespace="sum"))
    wait_until(lambda: any(r.state == "waiting" for r in list_locks(ddb, locks)), "in line")
    wall.now += LEASE
    # When
    result = breaks(namespace="sum", max_wait=0, seen=seen)
    with vt.idle():
        thread.join(timeout=30)
    # Then: the break removed the holder's entry only, which made p2 the holder; the
    # ticket counter stays
    assert (result.outcome, result.kind, result.namespace) == ("broken", "fifo", "sum")
    assert (result.owner, result.fencing_token) == ("p1", 1)
    assert [(owner, token) for owner, token, _ in log.grants] == [("p2", 2)]
    assert dead.heartbeat() is False
    head = row(ddb, locks, "fifo#sum#")
    assert (head["next"], head["n"]) == ({"N": "2"}, {"N": "0"})
    assert make_lock(FifoLock, "p3").acquire(R, namespace="sum", wait=0).fencing_token == 3


# --- mutex -------------------------------------------------------------------------------------


def test_given_a_mutex_without_expiry_when_broken_then_refused_unless_forced(
    make_mutex: Callable[..., Mutex], ddb: Any, locks: str, breaks: Breaks
) -> None:
    # Given
    holder = make_mutex("worker-1")
    assert holder.acquire_token(R) == 1
    # When
    unforced = breaks()
    forced = breaks(force=True)
    # Then: freed by force only, its fencing counter kept
    assert unforced.outcome == "refused" and "never heartbeats" in unforced.reason
    assert (forced.outcome, forced.owner, forced.fencing_token) == ("broken", "worker-1", 1)
    assert holder.release(R) is False
    assert make_mutex("worker-2").acquire_token(R) == 2


def test_given_a_mutex_whose_expiry_passed_when_broken_then_broken_without_force(
    make_mutex: Callable[..., Mutex], ddb: Any, locks: str, wall: Wall, breaks: Breaks
) -> None:
    # Given: a mutex with expire_after 60 s, by its holder's clock
    assert make_mutex("worker-1", expire_after=60.0).acquire(R)
    # When: 30 s later and 61 s later
    wall.now += 30
    early = breaks()
    wall.now += 31
    late = breaks()
    # Then
    assert early.outcome == "refused" and "expire_after not over" in early.reason
    assert late.outcome == "broken"
    assert set(row(ddb, locks, "mutex")) == {"pk", "sk", "fence", "brk"}


# --- nothing to break, bad input -------------------------------------------------------------


def test_given_a_free_lock_when_broken_then_not_held_and_nothing_written(
    make_lock: MakeLock, ddb: Any, locks: str, breaks: Breaks
) -> None:
    # Given
    make_lock(LeaseLockClient, "host-a").acquire(R).release()
    before = scan(ddb, locks)
    # When
    result = breaks(force=True)
    # Then
    assert (result.outcome, result.reason) == ("not_held", "nobody holds it")
    assert scan(ddb, locks) == before


BAD = [
    ({"resource": "no-such-thing"}, LockNotFoundError, "no lock row for resource 'no-such-thing'"),
    ({"namespace": "other"}, LockNotFoundError, "no fifo namespace 'other' lock row"),
    ({"kind": "mutex"}, LockNotFoundError, "its lock rows: fifo/default, lease"),
    ({}, ValueError, "several lock rows \\(fifo/default, lease\\)"),
    ({"kind": "queue"}, ValueError, "kind must be one of mutex, lease, fifo"),
    ({"kind": "lease", "namespace": "default"}, ValueError, "a namespace names a FIFO lock"),
    ({"namespace": "a#b"}, ValueError, "namespace must not contain"),
    ({"resource": ""}, ValueError, "resource must not be empty"),
    ({"by": ""}, ValueError, "by must not be empty"),
    ({"by": None}, ValueError, "by must be a str"),
    ({"force": "yes"}, ValueError, "force must be a bool"),
    ({"max_wait": -1}, ValueError, "max_wait must be"),
    ({"seen": {"hold": "h"}}, ValueError, "seen must be a Seen"),
    # A NaN or infinite time would make any lease look watched through: no watch at all
    ({"seen": Seen("h", "r", math.nan)}, ValueError, "seen.at must be a finite number"),
    ({"seen": Seen("h", "r", math.inf)}, ValueError, "seen.at must be a finite number"),
    ({"seen": Seen("h", None, 1.0)}, ValueError, "seen.hold and seen.rvn must be str"),  # type: ignore[arg-type]
    ({"max_wait": math.nan}, ValueError, "max_wait must be"),
    ({"resource": "\udcff"}, ValueError, "resource must be valid Unicode text"),
    ({"by": "\udcff"}, ValueError, "by must be valid Unicode text"),
]


@pytest.mark.parametrize(("options", "error", "message"), BAD, ids=[m for _, _, m in BAD])
def test_given_bad_arguments_when_broken_then_a_specific_error_and_nothing_written(
    make_lock: MakeLock, ddb: Any, locks: str, breaks: Breaks,
    options: dict[str, Any], error: type[Exception], message: str,
) -> None:  # fmt: skip
    # Given: a held lease and a held FIFO lock on one resource
    make_lock(LeaseLockClient, "host-a").acquire(R)
    make_lock(FifoLock, "p1").acquire(R)
    before = scan(ddb, locks)
    # When / Then
    with pytest.raises(error, match=message):
        breaks(**{"force": True, **options})
    assert scan(ddb, locks) == before
