"""The FIFO lock: ticket order, a ticket and its entry in one write (the stalled-ticket
double grant of the seed design cannot happen), handoff without a grant write, dead
waiters and holders skipped after a lease, one-item polls, and lost responses."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from ddbtx.chaos import Chaos
from ddbtx.instrumentation import count_requests
from ddbtx.locks import GC_MARGIN, FifoLock, LockNotGrantedError, LockRow, list_locks

from .conftest import LEASE, MAX_POLL, R, Wall
from .support import HoldBack, Log, LoseOnce, Stall, VirtualTime, wait_until

MakeLock = Callable[..., Any]
Freeze = Callable[[Any, str], None]


def fifo_rows(ddb: Any, locks: str) -> list[LockRow]:
    return [row for row in list_locks(ddb, locks) if row.kind == "fifo"]


def waiting(ddb: Any, locks: str) -> list[tuple[str | None, int | None]]:
    """(owner, ticket) of every queue row, first in line first."""
    return [(r.owner, r.ticket) for r in fifo_rows(ddb, locks) if r.state == "waiting"]


def head(ddb: Any, locks: str, namespace: str = "default") -> LockRow:
    (row,) = [r for r in fifo_rows(ddb, locks) if r.state != "waiting" and r.namespace == namespace]
    return row


def enqueue(vt: VirtualTime, log: Log, ddb: Any, locks: str, *fifos: FifoLock) -> list[Any]:
    """Start one waiter per lock client, each only once the previous one has its queue row."""
    threads = []
    for fifo in fifos:
        threads.append(vt.spawn(log.waiter(fifo)))
        wait_until(lambda f=fifo: f.owner in dict(waiting(ddb, locks)), f"{fifo.owner} queued")
    return threads


# --- grants and costs -----------------------------------------------------------------


def test_given_a_free_lock_when_acquired_heartbeaten_and_released_then_one_request_each(
    make_lock: MakeLock, ddb: Any, locks: str
) -> None:
    # Given
    fifo = make_lock(FifoLock, "p1")
    # When
    with count_requests(fifo.client) as acquiring:
        lock = fifo.acquire(R, namespace="sum")
    with count_requests(fifo.client) as beating:
        renewed = lock.heartbeat()
    with count_requests(fifo.client) as releasing:
        released = lock.release()
    again = fifo.acquire(R, namespace="sum")
    # Then
    assert (lock.fencing_token, renewed, released, again.fencing_token) == (1, True, True, 2)
    assert [c.by_operation for c in (acquiring, beating, releasing)] == [{"UpdateItem": 1}] * 3
    assert waiting(ddb, locks) == []


def test_given_two_namespaces_of_one_resource_then_they_are_independent_locks(
    make_lock: MakeLock, ddb: Any, locks: str
) -> None:
    # Given
    a, b = make_lock(FifoLock, "p1"), make_lock(FifoLock, "p2")
    # When
    summing = a.acquire(R, namespace="sum", wait=0)
    auditing = b.acquire(R, namespace="audit", wait=0)
    # Then
    assert (summing.fencing_token, auditing.fencing_token) == (1, 1)
    assert head(ddb, locks, "sum").owner == "p1"
    assert head(ddb, locks, "audit").owner == "p2"


def test_given_a_held_lock_when_another_tries_once_then_denied_and_no_row_is_left(
    make_lock: MakeLock, ddb: Any, locks: str
) -> None:
    # Given
    holder, other = make_lock(FifoLock, "p1"), make_lock(FifoLock, "p2")
    holder.acquire(R)
    # When
    with count_requests(other.client) as counts, pytest.raises(LockNotGrantedError):
        other.acquire(R, wait=0)
    # Then: one conditional write ("nobody there") told it the lock is held; nothing queued
    assert dict(counts.by_operation) == {"UpdateItem": 1}
    assert waiting(ddb, locks) == []
    assert head(ddb, locks).owner == "p1"


def test_given_waiters_when_the_lock_passes_along_then_enter_polls_and_release_are_all_it_costs(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given: a holder and one waiter, counted from before the waiter enters
    holder, fifo = make_lock(FifoLock, "p1"), make_lock(FifoLock, "p2")
    lock = holder.acquire(R)
    with count_requests(fifo.client) as waiter, count_requests(holder.client) as releaser:
        thread = vt.spawn(log.waiter(fifo))
        wait_until(lambda: "p2" in dict(waiting(ddb, locks)), "p2 queued")
        # When
        lock.release()
        with vt.idle():
            thread.join(timeout=30)
    # Then: the waiter sent one write (its entry, which the release turned into the
    # grant) and its own release; everything else was a one-item read of the head
    assert log.owners == ["p2"]
    assert waiter.by_operation["UpdateItem"] == 2
    assert set(waiter.by_operation) == {"UpdateItem", "GetItem"}
    assert waiter.items_read == waiter.by_operation["GetItem"]
    assert dict(releaser.by_operation) == {"UpdateItem": 1}


@pytest.mark.parametrize("lost", [False, True], ids=["answered", "leave-answer-lost"])
def test_given_a_held_lock_when_a_waiter_times_out_then_it_removes_its_row(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, lost: bool
) -> None:
    # Given: a heartbeating holder; with lost, the waiter's leaving is applied but its
    # answer lost (the retry finds the entry gone)
    holder, other = make_lock(FifoLock, "p1"), make_lock(FifoLock, "p2")
    lock = holder.acquire(R)
    beating = vt.every(9.0, lock.heartbeat)
    leaving = LoseOnce(other.client, "UpdateItem", lambda p: lost and "REMOVE" in str(p))
    # When
    start = vt.now()
    with pytest.raises(LockNotGrantedError):
        other.acquire(R, wait=5.0)
    beating.set()
    # Then
    assert leaving.fired is lost
    assert vt.now() - start == pytest.approx(5.0)
    assert waiting(ddb, locks) == []
    assert head(ddb, locks).owner == "p1"
    assert lock.release() is True


def test_given_queued_waiters_when_the_holder_releases_then_grants_follow_ticket_order(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given: four waiters queue up, one after the other, behind the holder
    holder = make_lock(FifoLock, "holder")
    lock = holder.acquire(R)
    names = ["w1", "w2", "w3", "w4"]
    threads = enqueue(vt, log, ddb, locks, *(make_lock(FifoLock, n) for n in names))
    tickets = dict(waiting(ddb, locks))
    # When
    lock.release()
    with vt.idle():
        for thread in threads:
            thread.join(timeout=30)
    # Then
    assert log.errors == []
    assert log.owners == names
    assert [token for _, token, _ in log.grants] == [tickets[n] for n in names]
    assert sorted(tickets.values()) == [tickets[n] for n in names]
    assert waiting(ddb, locks) == []


# --- the stalled ticket: a ticket and its entry are one write ---------------------------


def test_given_a_ticket_stalled_before_its_first_look_when_a_later_one_comes_then_never_both(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    """Seed design: 41 takes a ticket and stalls before writing its queue row; 42
    sees an empty queue and enters; 41 writes its row, sees nobody ahead, enters too.
    Here 41's ticket and its entry are one write, so 42 sees 41 ahead; and the
    release hands the lock to 41 before 41 has even looked."""
    # Given: p40 holds; p41 has entered and is stalled before its first look at the head
    p40, p41, p42 = (make_lock(FifoLock, name) for name in ("p40", "p41", "p42"))
    lock40 = p40.acquire(R)
    stall = Stall(p41.client, "GetItem", vt)
    thread41 = vt.spawn(log.waiter(p41))
    with vt.idle():
        assert stall.reached.wait(30)
    lock40.release()
    # When: p42 comes
    with pytest.raises(LockNotGrantedError):
        p42.acquire(R, wait=0)
    thread42 = vt.spawn(log.waiter(p42))
    wait_until(lambda: "p42" in dict(waiting(ddb, locks)), "p42 queued")
    # Then: p41 holds already (lowest ticket), p42 waits behind it
    assert (head(ddb, locks).owner, head(ddb, locks).fencing_token) == ("p41", 2)
    assert log.grants == []
    stall.go()
    with vt.idle():
        thread41.join(timeout=30)
        thread42.join(timeout=30)
    assert log.errors == []
    assert [(owner, token) for owner, token, _ in log.grants] == [("p41", 2), ("p42", 3)]


# --- dead waiters and holders ---------------------------------------------------------


def test_given_a_dead_waiter_in_the_queue_then_it_is_skipped_after_a_lease_and_order_kept(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log, freeze: Freeze
) -> None:
    # Given: behind the holder, a waiter that stops for good right after queueing,
    # then two live waiters
    lock = make_lock(FifoLock, "holder").acquire(R)
    freeze(make_lock(FifoLock, "dead"), R)
    threads = enqueue(vt, log, ddb, locks, make_lock(FifoLock, "w2"), make_lock(FifoLock, "w3"))
    assert [owner for owner, _ in waiting(ddb, locks)] == ["dead", "w2", "w3"]
    # When
    released_at = vt.now()
    lock.release()
    with vt.idle():
        for thread in threads:
            thread.join(timeout=30)
    # Then: w2 waited one lease for the dead row's record version to change, then w3
    assert log.owners == ["w2", "w3"]
    waited = log.grants[0][2] - released_at
    assert LEASE <= waited <= LEASE + MAX_POLL
    assert waiting(ddb, locks) == []


def line_owners(answer: dict[str, Any]) -> list[str]:
    """Owners of the entries on a head row as a GetItem answer shows it, first in line first."""
    item = answer.get("Item", {})
    tickets = {k[2:]: int(v["N"]) for k, v in item.items() if k.startswith("t_")}
    return [item[f"w_{hold}"]["M"]["owner"]["S"] for hold in sorted(tickets, key=tickets.get)]


def test_given_a_waiter_whose_turn_answer_comes_after_it_was_skipped_then_it_queues_again(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    """p2's lease counts from its last heartbeat write (the one p3 watches), not from
    when it notices its turn: noticed late, its turn may be p3's already."""
    # Given: p1 holds; p2 and p3 wait behind it; p2's answer that shows it first in line
    # will be held back; p3 holds, once granted, until the test lets it go
    p1, p2, p3 = (make_lock(FifoLock, name) for name in ("p1", "p2", "p3"))
    lock1 = p1.acquire(R)
    late = HoldBack(p2.client, "GetItem", vt, matches=lambda a: line_owners(a)[:1] == ["p2"])
    p3_done = threading.Event()
    threads = [vt.spawn(log.waiter(p2))]
    wait_until(lambda: "p2" in dict(waiting(ddb, locks)), "p2 queued")
    threads.append(vt.spawn(log.waiter(p3, until=p3_done)))
    wait_until(lambda: "p3" in dict(waiting(ddb, locks)), "p3 queued")
    tickets = dict(waiting(ddb, locks))
    # When: p1 releases; p2's poll shows p2 first but its answer is delayed past a lease,
    # while p3 watches p2's silent entry for a lease, removes it and holds
    lock1.release()
    with vt.idle():
        assert late.reached.wait(30), "p2 never polled after the release"
        wait_until(lambda: log.owners == ["p3"], "p3 granted")
    # and then p2 is handed the stale answer
    late.go()
    wait_until(
        lambda: "p2" in dict(waiting(ddb, locks)) or "p2" in log.owners, "p2 acted on its answer"
    )
    p3_done.set()
    with vt.idle():
        for thread in threads:
            thread.join(timeout=30)
    # Then: p2 did not take the lock p3 held; it queued again behind p3 and was granted
    # after p3 released, with a higher token
    assert (tickets["p2"], tickets["p3"]) == (2, 3)
    assert [(owner, token) for owner, token, _ in log.grants] == [("p3", 3), ("p2", 4)]
    assert log.grants[1][2] >= dict(log.released)["p3"]
    assert log.errors == []
    assert waiting(ddb, locks) == []


def test_given_a_dead_holder_when_a_waiter_is_first_in_line_then_it_takes_over_after_a_lease(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime
) -> None:
    # Given: the holder never heartbeats again
    holder, waiter = make_lock(FifoLock, "holder"), make_lock(FifoLock, "waiter")
    dead = holder.acquire(R)
    # When
    start = vt.now()
    lock = waiter.acquire(R)
    # Then
    assert LEASE <= vt.now() - start <= LEASE + MAX_POLL
    assert lock.fencing_token > dead.fencing_token
    assert head(ddb, locks).owner == "waiter"
    assert dead.heartbeat() is False
    assert dead.lost


def test_given_a_row_past_its_ttl_ahead_when_waiting_then_it_counts_as_gone_at_once(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, wall: Wall, freeze: Freeze
) -> None:
    # Given: a waiter stopped for good; its row outlived its TTL, but DynamoDB TTL
    # deletes late (or, on dynalite, never)
    lock = make_lock(FifoLock, "holder").acquire(R)
    freeze(make_lock(FifoLock, "dead"), R)
    lock.release()
    wall.now += LEASE + GC_MARGIN + 1
    # When
    start = vt.now()
    granted = make_lock(FifoLock, "late").acquire(R)
    # Then: no lease spent watching it
    assert vt.now() - start < LEASE
    assert granted.fencing_token > lock.fencing_token
    assert waiting(ddb, locks) == []


# --- polls --------------------------------------------------------------------------------


class Reads:
    """Every read a client makes: operation, request and how many items it returned."""

    def __init__(self, client: Any) -> None:
        self.calls: list[tuple[str, dict[str, Any], int]] = []
        self._params: dict[str, Any] = {}
        client.meta.events.register("provide-client-params.dynamodb", self._request)
        client.meta.events.register("after-call.dynamodb", self._response)

    def _request(self, params: dict[str, Any], **_: Any) -> None:
        self._params = dict(params)

    def _response(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name in ("GetItem", "Query", "BatchGetItem", "Scan"):
            self.calls.append((model.name, self._params, 1 if parsed.get("Item") else 0))


def test_given_a_long_queue_when_waiters_poll_then_each_poll_reads_the_head_alone(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given: a holder that keeps heartbeating, and six waiters; the first and the last
    # record their sleeps and reads
    holder = make_lock(FifoLock, "holder")
    lock = holder.acquire(R)
    beating = vt.every(9.0, lock.heartbeat)
    sleeps: dict[str, list[float]] = {"w1": [], "w6": []}

    def recording(name: str) -> Callable[[float], None]:
        def sleep(seconds: float) -> None:
            sleeps[name].append(seconds)
            vt.sleep(seconds)

        return sleep

    fifos = [
        make_lock(FifoLock, f"w{i}", **({"sleep": recording(f"w{i}")} if f"w{i}" in sleeps else {}))
        for i in range(1, 7)
    ]
    reads = Reads(fifos[-1].client)
    threads = enqueue(vt, log, ddb, locks, *fifos)
    # When: forty virtual seconds of waiting
    vt.sleep(40.0)
    beating.set()
    lock.release()
    with vt.idle():
        for thread in threads:
            thread.join(timeout=30)
    # Then: every read of the last waiter was one consistent GetItem of the head
    assert log.owners == [f"w{i}" for i in range(1, 7)]
    assert len(reads.calls) > 5
    head_key = {"pk": {"S": R}, "sk": {"S": "fifo#default#"}}
    for operation, params, items in reads.calls:
        assert (operation, params["Key"], params["ConsistentRead"], items) == (
            "GetItem", head_key, True, 1,
        )  # fmt: skip
    # and the first in line backed off: doubling from min_poll, never beyond max_poll
    first = sleeps["w1"]
    assert first[:4] == [0.1, 0.2, 0.4, 0.8]
    assert max(first) <= MAX_POLL


# --- lost responses -------------------------------------------------------------------


def test_given_a_lost_try_once_response_when_the_sdk_retries_then_the_grant_is_recognised(
    make_lock: MakeLock, ddb: Any, locks: str
) -> None:
    # Given: the entry is applied, its answer lost; the retry fails its "nobody there"
    fifo = make_lock(FifoLock, "p1")
    chaos = Chaos(fifo.client)
    chaos.arm("lost", at=0)
    # When
    lock = fifo.acquire(R, wait=0)
    # Then: one read of the head found our own entry, with our ticket
    assert chaos.fired and chaos.calls == ["UpdateItem", "GetItem"]
    assert (head(ddb, locks).owner, head(ddb, locks).fencing_token) == ("p1", 1)
    assert lock.fencing_token == 1
    assert lock.release() is True
    assert head(ddb, locks).state == "free"


def test_given_a_lost_try_once_response_and_a_waiter_in_between_then_still_the_grant_holds(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given: p1's try-once is applied (p1 holds), then p2 enters, then p1's answer is lost
    p1, p2 = make_lock(FifoLock, "p1"), make_lock(FifoLock, "p2")
    threads: list[Any] = []

    def p2_enters() -> None:
        threads.append(vt.spawn(log.waiter(p2)))
        wait_until(lambda: "p2" in dict(waiting(ddb, locks)), "p2 queued")

    lost = LoseOnce(p1.client, "UpdateItem", lambda params: True, between=p2_enters)
    # When
    lock = p1.acquire(R, wait=0)
    # Then: p1's lower ticket is the holder; p2 gets it after p1's release
    assert lost.fired
    assert (lock.fencing_token, head(ddb, locks).owner) == (1, "p1")
    lock.release()
    with vt.idle():
        threads[0].join(timeout=30)
    assert [(owner, token) for owner, token, _ in log.grants] == [("p2", 2)]


def test_given_a_lost_enter_response_while_held_when_the_sdk_retries_then_it_queues_once(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    # Given: while p1 holds, p2's entry is applied but its answer lost
    holder, fifo = make_lock(FifoLock, "p1"), make_lock(FifoLock, "p2")
    lock = holder.acquire(R)
    chaos = Chaos(fifo.client)
    chaos.arm("lost", at=0)
    thread = vt.spawn(log.waiter(fifo))
    wait_until(lambda: "p2" in dict(waiting(ddb, locks)), "p2 queued")
    # When
    lock.release()
    with vt.idle():
        thread.join(timeout=30)
    # Then: one ticket, recognised by a read, and granted next
    assert chaos.fired and chaos.calls[:2] == ["UpdateItem", "GetItem"]
    assert log.errors == []
    assert [(owner, token) for owner, token, _ in log.grants] == [("p2", 2)]
    assert waiting(ddb, locks) == []
    assert head(ddb, locks).state == "free"


def test_given_a_lost_skip_response_when_a_dead_waiter_is_removed_then_order_and_count_hold(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log, freeze: Freeze
) -> None:
    # Given: a dead waiter behind the holder, and w2 behind it whose removal of the
    # dead entry is applied but its answer lost
    lock = make_lock(FifoLock, "holder").acquire(R)
    freeze(make_lock(FifoLock, "dead"), R)
    w2 = make_lock(FifoLock, "w2")
    lost = LoseOnce(
        w2.client,
        "UpdateItem",
        lambda p: (
            "ConditionExpression" in p and (":seen" in p.get("ExpressionAttributeValues", {}))
        ),
    )
    threads = enqueue(vt, log, ddb, locks, w2)
    # When
    lock.release()
    with vt.idle():
        threads[0].join(timeout=30)
    # Then
    assert lost.fired
    assert log.errors == []
    assert log.owners == ["w2"]
    assert head(ddb, locks).state == "free"
    assert make_lock(FifoLock, "later").acquire(R, wait=0).fencing_token == 4


@pytest.mark.parametrize("operation", ["heartbeat", "release"])
def test_given_a_lost_holder_write_response_when_the_sdk_retries_then_it_counts_as_done(
    make_lock: MakeLock, ddb: Any, locks: str, operation: str
) -> None:
    # Given
    fifo = make_lock(FifoLock, "p1")
    lock = fifo.acquire(R)
    chaos = Chaos(fifo.client)
    chaos.arm("lost", at=0)
    # When
    done = getattr(lock, operation)()
    # Then
    assert chaos.fired
    assert done is True and not lock.lost
    assert head(ddb, locks).state == ("held" if operation == "heartbeat" else "free")
