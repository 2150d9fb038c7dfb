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
from ddbtx.locks import LeaseLockClient, LockNotGrantedError, break_lock, list_locks
from ddbtx.locks import lease as lease_module

from .conftest import LEASE, MAX_POLL, R
from .support import Log, LoseOnce, Stall, VirtualTime, wait_until

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
    leaving = LoseOnce(
        w.client, "UpdateItem", lambda p: lost and p["UpdateExpression"].startswith("REMOVE")
    )
    # When
    with pytest.raises(LockNotGrantedError, match=r"within 5\.0s"):
        w.acquire(R, wait=5.0)
    beating.set()
    # Then: the line is empty again (its count too: the fast path is open once free)
    assert leaving.fired is lost
    assert line(ddb, locks) == []
    assert holder(ddb, locks) == ("h", 1)
    assert lock.release() is True
    assert fast_path_costs_one_request(make_lock) == 2


# --- lost responses ------------------------------------------------------------------------


LOST_WRITES = {
    # its entry in line: the retry fails ("no entry of mine yet"), a read finds it
    "entry": lambda p: "#next" in p["UpdateExpression"],
    # its grant as first in line: the retry fails (not free any more), a read finds it,
    # and its entry was counted out of the line once
    "grant": lambda p: p["ConditionExpression"] == lease_module.LEASE_GRANT_FIRST,
}


@pytest.mark.parametrize("write", list(LOST_WRITES))
def test_given_a_lost_answer_of_a_waiters_write_when_the_sdk_retries_then_it_counts_once(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log, write: str
) -> None:
    # Given: while h holds, one of w's writes is applied but its answer lost
    h, w = make_lock(LeaseLockClient, "h"), make_lock(LeaseLockClient, "w")
    lock = h.acquire(R)
    lost = LoseOnce(w.client, "UpdateItem", LOST_WRITES[write])
    threads = queue(vt, log, ddb, locks, w)
    # When
    lock.release()
    join(vt, threads)
    # Then: one ticket, one grant, and the line is empty again (its count too)
    assert lost.fired
    assert log.errors == []
    assert [(owner, token) for owner, token, _ in log.grants] == [("w", 2)]
    assert line(ddb, locks) == []
    assert fast_path_costs_one_request(make_lock) == 3


def test_given_a_lost_entry_answer_and_the_lock_handed_over_before_the_retry_then_it_holds(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given: while h holds, w's entry in line is applied but its answer lost; before the
    # SDK's retry, h heartbeats (so it sees w first in line) and releases: a handoff to w
    # that removes w's entry
    h, w = make_lock(LeaseLockClient, "h"), make_lock(LeaseLockClient, "w")
    lock = h.acquire(R)
    lost = LoseOnce(
        w.client,
        "UpdateItem",
        LOST_WRITES["entry"],
        between=lambda: (lock.heartbeat(), lock.release()),
    )
    # When: the retry goes out and w waits on
    threads = [vt.spawn(log.waiter(w))]
    join(vt, threads)
    # Then: the retry did not queue w behind its own grant: w holds with the handed
    # token, and the line is empty (no second ticket, its count too)
    assert lost.fired and log.errors == []
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


# --- the release hands the lock to the first in line ------------------------------------------


def test_given_a_waiter_in_line_at_the_grant_when_released_then_one_write_hands_it_over(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given: w1 is granted while w2 waits behind it (so w1's grant shows w2 first in line)
    h, w1, w2 = (make_lock(LeaseLockClient, n) for n in ("h", "w1", "w2"))
    lock = h.acquire(R)
    with count_requests(w1.client) as first, count_requests(w2.client) as second:
        threads = queue(vt, log, ddb, locks, w1, w2)
        # When h releases (w1 takes the free lock with a grant), then w1 releases
        lock.release()
        join(vt, threads)
    # Then w1's release was the handoff, and w2 never wrote a grant: its entry, polls,
    # and its own release only
    assert [(owner, token) for owner, token, _ in log.grants] == [("w1", 2), ("w2", 3)]
    assert first.by_operation["UpdateItem"] == 4  # try, entry, grant, release (the handoff)
    assert second.by_operation["UpdateItem"] == 3  # try, entry, release
    assert line(ddb, locks) == []
    assert fast_path_costs_one_request(make_lock) == 4


def handed_over(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log, **options: Any
) -> tuple[Any, Any, Any]:
    """h holds with w (with ``options``) first in line behind it at h's grant: (h's lock,
    w's client, w's thread)."""
    h0, h, w = (make_lock(LeaseLockClient, n) for n in ("h0", "h", "w"))
    first = h0.acquire(R)
    granted: list[Any] = []
    thread_h = vt.spawn(lambda: granted.append(h.acquire(R)))
    wait_until(lambda: "h" in dict(line(ddb, locks)), "h in line")
    thread_w = vt.spawn(log.waiter(w, **options))
    wait_until(lambda: "w" in dict(line(ddb, locks)), "w in line")
    first.release()
    join(vt, [thread_h])
    (lock,) = granted
    return lock, w, thread_w


def test_given_the_first_in_line_with_data_when_handed_the_lock_then_it_writes_its_data(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given
    lock, _, thread = handed_over(make_lock, ddb, locks, vt, log, data=b"w's payload")
    # When
    assert lock.release() is True
    join(vt, [thread])
    # Then: the grant handed over carries w's data
    assert [(owner, token) for owner, token, _ in log.grants] == [("w", 3)]
    assert log.data == [b"w's payload"]
    assert fast_path_costs_one_request(make_lock) == 4


def test_given_the_next_in_line_left_when_released_then_a_plain_release_frees_the_lock(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given: w was first in line at h's grant, then its wait ran out
    lock, _, thread = handed_over(make_lock, ddb, locks, vt, log, wait=5.0)
    join(vt, [thread])
    assert isinstance(log.errors[0], LockNotGrantedError)
    # When
    with count_requests(lock._lc.client) as releasing:
        released = lock.release()
    # Then: the handoff failed (w left), and the plain release freed the lock
    assert released is True
    assert releasing.by_operation == {"UpdateItem": 2}
    assert line(ddb, locks) == [] and holder(ddb, locks) == (None, 2)
    assert fast_path_costs_one_request(make_lock) == 3


def release_as_the_new_holder(ddb: Any, locks: str) -> None:
    """What the handed holder's release writes (it may come before a retried handoff)."""
    ddb.update_item(
        TableName=locks,
        Key={"pk": {"S": R}, "sk": {"S": "lease"}},
        UpdateExpression="SET #r = #h REMOVE #h, #o, #v",
        ExpressionAttributeNames={"#r": "rel", "#h": "hold", "#o": "owner", "#v": "rvn"},
    )


def test_given_a_lost_handoff_answer_when_the_sdk_retries_then_released_once(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given: h's handoff to w is applied, its answer lost
    lock, _, thread = handed_over(make_lock, ddb, locks, vt, log)
    lost = LoseOnce(
        lock._lc.client,
        "UpdateItem",
        lambda p: p["ConditionExpression"] == lease_module.LEASE_HANDOFF,
    )
    # When
    released = lock.release()
    join(vt, [thread])
    # Then: done once (w counted out of the line once, no second release), w got it
    assert lost.fired and released is True and lock.released
    assert [(owner, token) for owner, token, _ in log.grants] == [("w", 3)]
    assert fast_path_costs_one_request(make_lock) == 4


def h_first_in_line_at_its_grant(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, freeze: Freeze, stalled: str
) -> tuple[Any, Any, list[Any], Any]:
    """h0 holds; h waits first in line (its thread appends its lock to the list once
    granted), and ``stalled`` entered behind it and never runs again: h0's lock, h's
    client, that list and h's thread."""
    h0, h = make_lock(LeaseLockClient, "h0"), make_lock(LeaseLockClient, "h")
    first = h0.acquire(R)
    granted: list[Any] = []
    thread = vt.spawn(lambda: granted.append(h.acquire(R)))
    wait_until(lambda: "h" in dict(line(ddb, locks)), "h in line")
    freeze(make_lock(LeaseLockClient, stalled), R)
    return first, h, granted, thread


def test_given_a_lost_handoff_answer_and_the_lock_released_since_then_still_released(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, freeze: Freeze
) -> None:
    # Given: h holds with a (stalled) waiter first in line at its grant; h's handoff to
    # it is applied, its answer lost, and the new holder releases before the SDK retries
    first, h, granted, thread = h_first_in_line_at_its_grant(make_lock, ddb, locks, vt, freeze, "w")
    first.release()
    join(vt, [thread])
    (lock,) = granted
    lost = LoseOnce(
        h.client,
        "UpdateItem",
        lambda p: p["ConditionExpression"] == lease_module.LEASE_HANDOFF,
        between=lambda: release_as_the_new_holder(ddb, locks),
    )
    # When
    released = lock.release()
    # Then: the retry found the lock no longer h's: the handoff counts as done, and
    # nothing was released twice (the line is empty, its count too)
    assert lost.fired and released is True and lock.released
    assert line(ddb, locks) == [] and holder(ddb, locks) == (None, 3)
    assert fast_path_costs_one_request(make_lock) == 4


def test_given_a_waiter_whose_wait_ran_out_when_handed_the_lock_then_it_releases_it(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given: w's wait ran out and its leaving is held just before it is sent
    lock, w, thread = handed_over(make_lock, ddb, locks, vt, log, wait=5.0)
    beating = vt.every(4.0, lock.heartbeat)
    leaving = Stall(w.client, "UpdateItem", vt)
    with vt.idle():
        assert leaving.reached.wait(30)
    beating.set()
    # When: h's release hands w the lock, and then w's leaving goes out
    assert lock.release() is True
    leaving.go()
    join(vt, [thread])
    # Then: w found itself holding, released it and reported that it was not granted
    assert isinstance(log.errors[0], LockNotGrantedError) and log.grants == []
    assert line(ddb, locks) == [] and holder(ddb, locks) == (None, 3)
    assert fast_path_costs_one_request(make_lock) == 4


def test_given_a_dead_waiter_handed_the_lock_then_the_next_takes_it_over_after_a_lease(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log, freeze: Freeze
) -> None:
    # Given: h holds with a dead waiter first in line at its grant, and w2 behind it
    first, _, granted, thread_h = h_first_in_line_at_its_grant(
        make_lock, ddb, locks, vt, freeze, "dead"
    )
    threads = queue(vt, log, ddb, locks, make_lock(LeaseLockClient, "w2"))
    first.release()
    join(vt, [thread_h])
    # When: h's release hands the lock to the dead waiter
    released_at = vt.now()
    assert granted[0].release() is True
    join(vt, threads)
    # Then: w2, first in line behind the new (dead) holder, took it over a lease later
    assert [(owner, token) for owner, token, _ in log.grants] == [("w2", 4)]
    assert LEASE <= log.grants[0][2] - released_at <= LEASE + MAX_POLL


def test_given_a_waiter_that_came_during_the_hold_when_a_heartbeat_saw_it_then_handed_over(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given: h got the lock with nobody in line; w came later; h heartbeat since
    h, w = make_lock(LeaseLockClient, "h"), make_lock(LeaseLockClient, "w")
    lock = h.acquire(R)
    with count_requests(w.client) as waiting:
        threads = queue(vt, log, ddb, locks, w)
        assert lock.heartbeat() is True
        # When
        with count_requests(h.client) as releasing:
            assert lock.release() is True
        join(vt, threads)
    # Then: the release was the handoff the heartbeat learned of; w wrote no grant
    assert dict(releasing.by_operation) == {"UpdateItem": 1}
    assert waiting.by_operation["UpdateItem"] == 3  # try, entry, release
    assert [(owner, token) for owner, token, _ in log.grants] == [("w", 2)]


def test_given_a_lock_handed_over_and_lost_before_it_was_noticed_then_the_waiter_waits_on(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given: w waits with a heartbeat of 15 s (so it renews its handed grant at once);
    # its grant is broken between w's look at the row and that renewal
    h = make_lock(LeaseLockClient, "h")
    lock = h.acquire(R)
    w = make_lock(LeaseLockClient, "w", heartbeat_period=15.0)
    thread = vt.spawn(log.waiter(w))
    wait_until(lambda: "w" in dict(line(ddb, locks)), "w in line")
    assert lock.heartbeat() is True  # h learns that w is first in line

    def break_first(params: dict[str, Any], **_: Any) -> None:
        if params.get("ConditionExpression") == lease_module.LEASE_RENEW:
            w.client.meta.events.unregister(
                "provide-client-params.dynamodb.UpdateItem", break_first
            )
            break_lock(ddb, locks, R, by="test", force=True)

    w.client.meta.events.register("provide-client-params.dynamodb.UpdateItem", break_first)
    vt.sleep(6.0)
    # When: h hands w the lock
    assert lock.release() is True
    join(vt, [thread])
    # Then: w never got the lost grant (token 2); it queued again and got token 3
    assert log.errors == []
    assert [(owner, token) for owner, token, _ in log.grants] == [("w", 3)]
