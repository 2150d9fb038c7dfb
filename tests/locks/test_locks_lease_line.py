"""The lease lock's line (issue 13, goal 2): waiters queue on the lease row, free
grants follow the line, so a holder that releases and acquires again at once
queues behind those already waiting; dead entries are skipped after a lease; lost
responses of every line write; and wait=0 clearing a dead line a lease later."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ddbtx.instrumentation import count_requests
from ddbtx.local import LocalDynamo
from ddbtx.locks import LeaseLockClient, LockNotGrantedError, list_locks
from ddbtx.locks import lease as lease_module

from .conftest import LEASE, MAX_POLL, R
from .support import Log, LoseOnce, VirtualTime, wait_until

MakeLock = Callable[..., Any]
Freeze = Callable[[Any, str], None]


def line(ddb: Any, locks: str) -> list[tuple[str | None, int | None]]:
    """(owner, ticket) of everyone in the lease lock's line, first first."""
    rows = list_locks(ddb, locks)
    return [(r.owner, r.ticket) for r in rows if r.kind == "lease" and r.state == "waiting"]


def holder(ddb: Any, locks: str) -> tuple[str | None, int | None]:
    (row,) = [r for r in list_locks(ddb, locks) if r.kind == "lease" and r.state != "waiting"]
    return row.owner, row.fencing_token


def queue(vt: VirtualTime, log: Log, ddb: Any, locks: str, *clients: Any) -> list[Any]:
    """Start one waiter per client, each only once the previous one is in line."""
    threads = []
    for lc in clients:
        threads.append(vt.spawn(log.waiter(lc)))
        wait_until(lambda o=lc.owner: o in dict(line(ddb, locks)), f"{lc.owner} in line")
    return threads


def join(vt: VirtualTime, threads: list[Any]) -> None:
    with vt.idle():
        for thread in threads:
            thread.join(timeout=30)


def fast_path_costs_one_request(make_lock: MakeLock) -> int:
    """A fresh client's acquire on the (free, empty-lined) lock: its fencing token,
    asserting it took exactly one request."""
    fresh = make_lock(LeaseLockClient, "fresh")
    with count_requests(fresh.client) as counts:
        lock = fresh.acquire(R, wait=0)
    assert dict(counts.by_operation) == {"UpdateItem": 1}
    token: int = lock.fencing_token
    lock.release()
    return token


# --- fairness ---------------------------------------------------------------------------


def test_given_waiters_in_line_when_the_holder_releases_and_acquires_at_once_then_it_queues_last(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given: three waiters queue, one after the other, behind the holder
    h = make_lock(LeaseLockClient, "h")
    lock = h.acquire(R)
    names = ["w1", "w2", "w3"]
    threads = queue(vt, log, ddb, locks, *(make_lock(LeaseLockClient, n) for n in names))
    tickets = dict(line(ddb, locks))
    # When: the holder releases and at once wants the lock again (the unfair fast path)
    lock.release()
    threads.append(vt.spawn(log.waiter(h)))
    join(vt, threads)
    # Then: the line was served in ticket order, the holder last
    assert log.errors == []
    assert log.owners == [*names, "h"]
    assert [token for _, token, _ in log.grants] == [2, 3, 4, 5]
    assert sorted(tickets.values()) == [tickets[n] for n in names]
    assert line(ddb, locks) == []
    assert fast_path_costs_one_request(make_lock) == 6


DENIED_ONCE = {"moto": {"UpdateItem": 1}, "dynalite": {"UpdateItem": 1, "GetItem": 1}}


def test_given_a_waiter_in_line_when_the_free_lock_is_tried_once_then_denied_and_it_goes_on(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log, backend: LocalDynamo
) -> None:
    # Given: w1 waits in line; the holder releases
    h = make_lock(LeaseLockClient, "h")
    lock = h.acquire(R)
    threads = queue(vt, log, ddb, locks, make_lock(LeaseLockClient, "w1"))
    lock.release()
    # When: the former holder tries once while w1 has not looked yet
    with count_requests(h.client) as counts, pytest.raises(LockNotGrantedError):
        h.acquire(R, wait=0)
    join(vt, threads)
    # Then: denied by one conditional write (dynalite: and a read of the row to
    # remember), nothing queued, and w1 got the lock
    assert dict(counts.by_operation) == DENIED_ONCE[backend.kind]
    assert log.owners == ["w1"]
    assert line(ddb, locks) == []


def test_given_a_client_that_got_the_lock_with_others_in_line_then_it_queues_at_once_next_time(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given: w1 got the lock while w2 was in line behind it
    h, w1, w2 = (make_lock(LeaseLockClient, n) for n in ("h", "w1", "w2"))
    lock = h.acquire(R)
    threads = queue(vt, log, ddb, locks, w1, w2)
    lock.release()
    join(vt, threads)
    assert log.owners == ["w1", "w2"]
    # When: w1 acquires again, with nobody in line any more
    with count_requests(w1.client) as crowded:
        w1.acquire(R).release()
    with count_requests(w1.client) as quiet:
        w1.acquire(R).release()
    # Then: the first acquire queued at once (entry, grant, release: no grant try that
    # the line would refuse); it saw nobody waiting, so the next took the fast path
    assert [crowded.by_operation, quiet.by_operation] == [{"UpdateItem": 3}, {"UpdateItem": 2}]
    assert line(ddb, locks) == []


# --- dead waiters, waits that run out --------------------------------------------------------


def test_given_a_dead_waiter_in_line_then_it_is_skipped_after_a_lease_and_order_kept(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log, freeze: Freeze
) -> None:
    # Given: behind the holder, a waiter that stops for good right after queueing, then two
    lock = make_lock(LeaseLockClient, "h").acquire(R)
    freeze(make_lock(LeaseLockClient, "dead"), R)
    threads = queue(
        vt, log, ddb, locks, make_lock(LeaseLockClient, "w2"), make_lock(LeaseLockClient, "w3")
    )
    assert [owner for owner, _ in line(ddb, locks)] == ["dead", "w2", "w3"]
    # When
    released_at = vt.now()
    lock.release()
    join(vt, threads)
    # Then: w2 waited one lease for the dead entry's record version to change, then w3
    assert log.errors == []
    assert log.owners == ["w2", "w3"]
    assert LEASE <= log.grants[0][2] - released_at <= LEASE + MAX_POLL
    assert line(ddb, locks) == []
    assert fast_path_costs_one_request(make_lock) == 4


@pytest.mark.parametrize("lost", [False, True], ids=["answered", "leave-answer-lost"])
def test_given_a_held_lock_when_a_waiter_times_out_then_it_leaves_the_line(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, lost: bool
) -> None:
    # Given: a heartbeating holder; with lost, the waiter's leaving is applied but its
    # answer lost (the retry finds the entry gone)
    h, w = make_lock(LeaseLockClient, "h"), make_lock(LeaseLockClient, "w")
    lock = h.acquire(R)
    beating = vt.every(9.0, lock.heartbeat)
    leaving = LoseOnce(w.client, "UpdateItem", lambda p: p["UpdateExpression"].startswith("REMOVE"))
    if not lost:
        leaving.fired = True  # disarmed
    # When
    with pytest.raises(LockNotGrantedError, match=r"within 5\.0s"):
        w.acquire(R, wait=5.0)
    beating.set()
    # Then: the line is empty again (its count too: the fast path is open once free)
    assert leaving.fired
    assert line(ddb, locks) == []
    assert holder(ddb, locks) == ("h", 1)
    assert lock.release() is True
    assert fast_path_costs_one_request(make_lock) == 2


# --- lost responses ------------------------------------------------------------------------


def test_given_a_lost_entry_response_while_held_when_the_sdk_retries_then_it_queues_once(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given: while h holds, w's entry is applied but its answer lost
    h, w = make_lock(LeaseLockClient, "h"), make_lock(LeaseLockClient, "w")
    lock = h.acquire(R)
    lost = LoseOnce(w.client, "UpdateItem", lambda p: "#next" in p["UpdateExpression"])
    threads = queue(vt, log, ddb, locks, w)
    # When
    lock.release()
    join(vt, threads)
    # Then: one ticket, found by a read after the failed retry, and granted next
    assert lost.fired
    assert log.errors == []
    assert [(owner, token) for owner, token, _ in log.grants] == [("w", 2)]
    assert line(ddb, locks) == []
    assert fast_path_costs_one_request(make_lock) == 3


def test_given_a_lost_grant_response_of_the_first_in_line_then_one_read_finds_it(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given: w is first in line; its grant is applied but its answer lost
    h, w = make_lock(LeaseLockClient, "h"), make_lock(LeaseLockClient, "w")
    lock = h.acquire(R)
    lost = LoseOnce(
        w.client,
        "UpdateItem",
        lambda p: p["ConditionExpression"] == lease_module.LEASE_GRANT_FIRST,
    )
    threads = queue(vt, log, ddb, locks, w)
    # When
    lock.release()
    join(vt, threads)
    # Then: granted once (the retry did not count its entry out a second time)
    assert lost.fired
    assert log.errors == []
    assert [(owner, token) for owner, token, _ in log.grants] == [("w", 2)]
    assert line(ddb, locks) == []
    assert fast_path_costs_one_request(make_lock) == 3


def test_given_a_lost_takeover_response_of_the_first_in_line_then_one_read_finds_it(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime
) -> None:
    # Given: the holder dies; w's takeover a lease later is applied but its answer lost
    dead = make_lock(LeaseLockClient, "dead").acquire(R)
    w = make_lock(LeaseLockClient, "w")
    lost = LoseOnce(
        w.client,
        "UpdateItem",
        lambda p: p["ConditionExpression"] == lease_module.LEASE_TAKEOVER_FIRST,
    )
    # When
    start = vt.now()
    lock = w.acquire(R)
    # Then
    assert lost.fired
    assert LEASE <= vt.now() - start <= LEASE + MAX_POLL
    assert (lock.fencing_token, holder(ddb, locks)) == (2, ("w", 2))
    assert dead.heartbeat() is False
    assert line(ddb, locks) == []


def test_given_a_lost_skip_response_when_a_dead_waiter_is_removed_then_order_and_count_hold(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log, freeze: Freeze
) -> None:
    # Given: a dead waiter behind the holder, and w2 behind it whose removal of the
    # dead entry is applied but its answer lost
    lock = make_lock(LeaseLockClient, "h").acquire(R)
    freeze(make_lock(LeaseLockClient, "dead"), R)
    w2 = make_lock(LeaseLockClient, "w2")
    lost = LoseOnce(
        w2.client, "UpdateItem", lambda p: ":seen" in p.get("ExpressionAttributeValues", {})
    )
    threads = queue(vt, log, ddb, locks, w2)
    # When
    lock.release()
    join(vt, threads)
    # Then
    assert lost.fired
    assert log.errors == []
    assert log.owners == ["w2"]
    assert fast_path_costs_one_request(make_lock) == 3


# --- wait=0 and a dead line ------------------------------------------------------------------


def test_given_a_dead_holder_and_a_dead_waiter_when_tried_once_a_lease_apart_then_taken_over(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, freeze: Freeze
) -> None:
    # Given: the holder died, and so did the only waiter in line; a function runs
    # once a minute with wait=0
    dead = make_lock(LeaseLockClient, "dead").acquire(R)
    freeze(make_lock(LeaseLockClient, "dead-waiter"), R)
    b = make_lock(LeaseLockClient, "b")
    with pytest.raises(LockNotGrantedError):
        b.acquire(R, wait=0)  # only looks
    # When: a lease and more later
    vt.sleep(60.0)
    lock = b.acquire(R, wait=0)
    # Then: the dead entry was removed and the dead holder's lock taken over
    assert (lock.fencing_token, holder(ddb, locks)) == (2, ("b", 2))
    assert line(ddb, locks) == []
    assert dead.heartbeat() is False


def test_given_a_waiter_in_line_behind_a_dead_holder_when_tried_once_then_the_waiter_takes_over(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given: a dead holder, and a live waiter in line (it renews its entry every 9 s)
    make_lock(LeaseLockClient, "dead").acquire(R)
    b = make_lock(LeaseLockClient, "b")
    threads = queue(vt, log, ddb, locks, make_lock(LeaseLockClient, "w"))
    # When: b tries once now, just before the waiter's takeover, and a lease later
    for pause in (LEASE - 1.0, LEASE):
        with pytest.raises(LockNotGrantedError):
            b.acquire(R, wait=0)
        vt.sleep(pause)
    join(vt, threads)
    # Then: the waiter in line took the dead holder's lock, never the wait=0 caller
    assert log.owners == ["w"]
    assert [token for _, token, _ in log.grants] == [2]
