"""The FIFO lock: ticket order, one-write grants (the stalled-ticket double grant of
the seed design cannot happen), dead waiters and holders skipped after a lease,
O(1) polls, lost responses, and mutual exclusion under real threads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from ddbtx.chaos import Chaos
from ddbtx.instrumentation import count_requests
from ddbtx.locks import GC_MARGIN, FifoLock, LockNotGrantedError, LockRow, list_locks

from .conftest import LEASE, MAX_POLL, Wall
from .support import Stall, VirtualTime, wait_until

MakeLock = Callable[..., Any]
Freeze = Callable[[FifoLock, str], None]
R = "order-history"


def fifo_rows(ddb: Any, locks: str) -> list[LockRow]:
    return [row for row in list_locks(ddb, locks) if row.kind == "fifo"]


def waiting(ddb: Any, locks: str) -> list[tuple[str | None, int | None]]:
    """(owner, ticket) of every queue row, first in line first."""
    return [(r.owner, r.ticket) for r in fifo_rows(ddb, locks) if r.state == "waiting"]


def head(ddb: Any, locks: str, namespace: str = "default") -> LockRow:
    (row,) = [r for r in fifo_rows(ddb, locks) if r.state != "waiting" and r.namespace == namespace]
    return row


class Log:
    """Grants as the waiters saw them: (owner, token, virtual time)."""

    def __init__(self, vt: VirtualTime) -> None:
        self.vt = vt
        self.grants: list[tuple[str, int, float]] = []
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()

    def waiter(self, fifo: FifoLock, hold_for: float = 1.0, **options: Any) -> Callable[[], None]:
        """A participant's body: acquire, log the grant, hold a while, release."""

        def body() -> None:
            try:
                with fifo.acquire(R, **options) as lock:
                    with self._lock:
                        self.grants.append((fifo.owner, lock.fencing_token, self.vt.now()))
                    self.vt.sleep(hold_for)
            except BaseException as exc:  # asserted on by the test
                self.errors.append(exc)

        return body

    @property
    def owners(self) -> list[str]:
        return [owner for owner, _, _ in self.grants]


@pytest.fixture
def log(vt: VirtualTime) -> Log:
    return Log(vt)


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
    # Then: the fast path and a ticket told it the lock is held; nothing was queued
    assert dict(counts.by_operation) == {"UpdateItem": 2}
    assert waiting(ddb, locks) == []
    assert head(ddb, locks).owner == "p1"


def test_given_a_held_lock_when_a_waiter_times_out_then_it_removes_its_row(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime
) -> None:
    # Given
    holder, other = make_lock(FifoLock, "p1"), make_lock(FifoLock, "p2")
    lock = holder.acquire(R)
    beating = vt.every(9.0, lock.heartbeat)
    # When
    start = vt.now()
    with pytest.raises(LockNotGrantedError):
        other.acquire(R, wait=5.0)
    beating.set()
    # Then
    assert vt.now() - start == pytest.approx(5.0)
    assert waiting(ddb, locks) == []


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


# --- the stalled ticket: one conditional write per grant -------------------------------


def test_given_a_ticket_stalled_before_its_row_when_a_later_ticket_enters_then_never_both(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log
) -> None:
    """Seed design: 41 takes a ticket and stalls before writing its queue row; 42
    sees an empty queue and enters; 41 writes its row, sees nobody ahead, enters too.
    Here 42's grant moves the now-serving pointer past 41, so 41 queues again."""
    # Given: p40 holds; p41 has taken its ticket and is stalled before its queue row
    p40, p41, p42 = (make_lock(FifoLock, name) for name in ("p40", "p41", "p42"))
    lock40 = p40.acquire(R)
    stall = Stall(p41.client, "PutItem", vt)
    thread41 = vt.spawn(log.waiter(p41))
    assert stall.reached.wait(30)
    lock40.release()
    # When: p42 comes and finds no queue row ahead
    lock42 = p42.acquire(R, wait=0)
    stall.go()  # p41 writes its row at last

    def requeued() -> list[int]:
        return [t for owner, t in waiting(ddb, locks) if owner == "p41" and t and t > 3]

    wait_until(lambda: bool(requeued()), "p41 queued again")
    # Then: p41 was passed over (tickets 1 p40, 2 p41, 3 p42) and waits behind p42
    assert lock42.fencing_token == 3
    assert head(ddb, locks).owner == "p42"
    assert log.grants == []
    (ticket41,) = requeued()
    lock42.release()
    with vt.idle():
        thread41.join(timeout=30)
    assert log.errors == []
    assert [(owner, token) for owner, token, _ in log.grants] == [("p41", ticket41)]


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
        if model.name == "Query":
            self.calls.append(("Query", self._params, len(parsed.get("Items", []))))
        elif model.name == "BatchGetItem":
            items = sum(len(v) for v in parsed.get("Responses", {}).values())
            self.calls.append(("BatchGetItem", self._params, items))


def test_given_a_long_queue_when_waiters_poll_then_each_reads_two_items_at_most_all_ahead(
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
    last_ticket = dict(waiting(ddb, locks))["w6"]
    assert last_ticket is not None
    # When: forty virtual seconds of waiting
    vt.sleep(40.0)
    beating.set()
    lock.release()
    with vt.idle():
        for thread in threads:
            thread.join(timeout=30)
    # Then: every read of the last waiter returned at most two items, all before its ticket
    assert log.owners == [f"w{i}" for i in range(1, 7)]
    assert len(reads.calls) > 5
    assert max(items for _, _, items in reads.calls) <= 2
    mine = f"fifo#default#{last_ticket:020d}"
    for operation, params, _ in reads.calls:
        if operation == "Query":
            assert params["ExpressionAttributeValues"][":upper"]["S"] < mine
        else:
            (request,) = params["RequestItems"].values()
            assert all(k["sk"]["S"] < mine for k in request["Keys"])
    # and the first in line backed off: doubling from min_poll, never beyond max_poll
    first = sleeps["w1"]
    assert first[:4] == [0.1, 0.2, 0.4, 0.8]
    assert max(first) <= MAX_POLL


# --- lost responses -------------------------------------------------------------------


def test_given_a_lost_fast_path_response_when_the_sdk_retries_then_the_grant_is_recognised(
    make_lock: MakeLock, ddb: Any, locks: str
) -> None:
    # Given
    fifo = make_lock(FifoLock, "p1")
    chaos = Chaos(fifo.client)
    chaos.arm("lost", at=0)
    # When
    lock = fifo.acquire(R, wait=0)
    # Then
    assert chaos.fired
    assert head(ddb, locks).owner == "p1"
    assert head(ddb, locks).fencing_token == lock.fencing_token
    assert lock.release() is True


def test_given_a_lost_grant_response_when_the_sdk_retries_then_the_grant_is_recognised(
    make_lock: MakeLock, ddb: Any, locks: str
) -> None:
    # Given: a burnt ticket makes the next acquire take the slow path
    # (fast path, ticket, look ahead, grant) while the lock is free
    holder, other, fifo = (make_lock(FifoLock, n) for n in ("p1", "p2", "p3"))
    lock = holder.acquire(R)
    with pytest.raises(LockNotGrantedError):
        other.acquire(R, wait=0)
    lock.release()
    chaos = Chaos(fifo.client)
    chaos.arm("lost", at=3)
    # When
    granted = fifo.acquire(R, wait=0)
    # Then
    assert chaos.fired and chaos.calls == ["UpdateItem", "UpdateItem", "Query", "UpdateItem"]
    assert (head(ddb, locks).owner, head(ddb, locks).fencing_token) == ("p3", 3)
    assert granted.fencing_token == 3
    assert waiting(ddb, locks) == []


@pytest.mark.parametrize(
    ("call", "lost"), [(1, "UpdateItem"), (2, "PutItem")], ids=["ticket", "join"]
)
def test_given_a_lost_waiter_write_response_when_the_sdk_retries_then_it_still_queues_and_wins(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime, log: Log, call: int, lost: str
) -> None:
    # Given: while p1 holds, p2's ticket or queue-row write is applied but its response
    # lost (a retried ticket burns one number; a retried join meets its own row)
    holder, fifo = make_lock(FifoLock, "p1"), make_lock(FifoLock, "p2")
    lock = holder.acquire(R)
    chaos = Chaos(fifo.client)
    chaos.arm("lost", at=call)
    thread = vt.spawn(log.waiter(fifo))
    wait_until(lambda: "p2" in dict(waiting(ddb, locks)), "p2 queued")
    # When
    lock.release()
    with vt.idle():
        thread.join(timeout=30)
    # Then
    assert chaos.fired and chaos.calls[call] == lost
    assert log.errors == []
    assert log.owners == ["p2"]
    assert waiting(ddb, locks) == []


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
