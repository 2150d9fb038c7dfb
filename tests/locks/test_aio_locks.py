"""The asyncio locks (``ddbtx.aio.locks``): the same steps as ``ddbtx.locks`` on an
aiobotocore client, with coroutines, ``async with``, and heartbeats as a task.

The mutex runs every test of ``test_locks_mutex.py`` through both drivers; here are
the lease and FIFO locks' asyncio surface, their costs, waits and takeovers, and sync
and async clients sharing one lock. Each scenario is a coroutine run on the session's
event-loop thread; time that must pass (a lease) is virtual, never waited for.
"""

from __future__ import annotations

import asyncio
import gc
import math
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from ddbtx.aio import locks as aio
from ddbtx.aio._held import HeartbeatTask
from ddbtx.instrumentation import count_requests
from ddbtx.local import LocalDynamo
from ddbtx.locks import FifoLock, LeaseLockClient, LockLostError, LockNotGrantedError, list_locks
from drivers import EventLoopThread, Scenario

from .conftest import LEASE, WALL_START


class AsyncClock:
    """Virtual time for asyncio clients: a sleep moves the clock at once, then yields."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


@pytest.fixture
def make_aio(
    backend: LocalDynamo, locks: str, event_loop_thread: EventLoopThread
) -> Callable[..., Any]:
    """``make_aio(aio.LeaseLockClient | aio.FifoLock, owner, **options)``: its own
    aiobotocore client; a 20 s lease with 9 s heartbeats, 10 ms to 50 ms polls."""

    def make(kind: type[Any], owner: str, **options: Any) -> Any:
        settings: dict[str, Any] = {
            "lease_duration": LEASE,
            "heartbeat_period": 9.0,
            "min_poll": 0.01,
            "max_poll": 0.05,
            "wall_clock": lambda: WALL_START,
            **options,
        }
        return kind(event_loop_thread.client(backend), locks, owner=owner, **settings)

    return make


async def until_waiting(ddb: Any, locks: str, count: int = 1) -> None:
    """Yield to the loop until ``count`` waiters are in line (their entries written)."""
    while len([r for r in list_locks(ddb, locks) if r.state == "waiting"]) < count:
        await asyncio.sleep(0.01)


def lease_rows(ddb: Any, locks: str) -> list[tuple[str, str | None, int | None]]:
    return [
        (r.state, r.owner, r.fencing_token) for r in list_locks(ddb, locks) if r.kind == "lease"
    ]


def test_given_a_free_lease_when_entered_with_async_with_then_one_request_each_way(
    make_aio: Callable[..., Any], run: Callable[[Scenario], Any], ddb: Any, locks: str
) -> None:
    # Given
    lc = make_aio(aio.LeaseLockClient, "host-a")
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        with count_requests(lc.client) as acquiring:
            async with lc.acquire("Moe", data=b"record") as lock:
                seen["acquire"] = dict(acquiring.by_operation)
                seen["held"] = (lock.is_held(), lock.fencing_token, lock.data)
                seen["row"] = lease_rows(ddb, locks)
        seen["all"] = dict(acquiring.by_operation)
        seen["after"] = (lock.is_held(), lock.released)
        await lc.close()

    # When
    run(scenario)
    # Then: one UpdateItem to take it, one to release it on exit
    assert seen["acquire"] == {"UpdateItem": 1}
    assert seen["all"] == {"UpdateItem": 2}
    assert seen["held"] == (True, 1, b"record")
    assert seen["row"] == [("held", "host-a", 1)]
    assert seen["after"] == (False, True)
    assert lease_rows(ddb, locks) == [("free", None, 1)]


def test_given_an_awaited_acquire_then_the_lock_is_released_by_hand_once(
    make_aio: Callable[..., Any], run: Callable[[Scenario], Any], ddb: Any, locks: str
) -> None:
    # Given
    lc = make_aio(aio.LeaseLockClient, "host-a")

    async def scenario() -> tuple[bool, bool, bool, list[Any]]:
        lock = await lc.acquire("Moe")
        renewed = await lock.heartbeat()
        held = lc.held()
        first, second = await lock.release(), await lock.release()
        await lc.close()
        return renewed, first, second, held

    # When
    renewed, first, second, held = run(scenario)
    # Then
    assert (renewed, first, second) == (True, True, False)
    assert [type(h).__name__ for h in held] == ["LeaseLock"]
    assert lease_rows(ddb, locks) == [("free", None, 1)]


def test_given_bad_arguments_then_acquire_refuses_them_before_any_request(
    make_aio: Callable[..., Any], ddb: Any, locks: str
) -> None:
    # Given
    lc = make_aio(aio.LeaseLockClient, "host-a")
    fifo = make_aio(aio.FifoLock, "p1")
    # When / Then: raised by the call itself, not when awaited; nothing written
    with count_requests(lc.client) as sent:
        with pytest.raises(ValueError, match="resource"):
            lc.acquire("")
        with pytest.raises(ValueError, match="data"):
            lc.acquire("Moe", data="not bytes")
        with pytest.raises(ValueError, match="wait"):
            fifo.acquire("Moe", wait=-1.0)
    assert dict(sent.by_operation) == {}
    assert list_locks(ddb, locks) == []


def test_given_a_held_lease_when_another_task_waits_then_the_release_hands_it_over(
    make_aio: Callable[..., Any], run: Callable[[Scenario], Any], ddb: Any, locks: str
) -> None:
    # Given: a holder, and a second client's acquire waiting in line on the same loop
    holder, waiter = make_aio(aio.LeaseLockClient, "host-a"), make_aio(aio.LeaseLockClient, "b")

    async def scenario() -> tuple[int, int, list[Any]]:
        lock = await holder.acquire("Moe")
        waiting = asyncio.ensure_future(waiter.acquire("Moe", wait=30.0))
        await until_waiting(ddb, locks)
        in_line = lease_rows(ddb, locks)
        # When
        await lock.release()
        handed = await waiting
        token = handed.fencing_token
        await handed.release()
        await holder.close()
        await waiter.close()
        return lock.fencing_token, token, in_line

    first, second, in_line = run(scenario)
    # Then: the waiter was in line behind the holder and got the next token
    assert (first, second) == (1, 2)
    assert ("held", "host-a", 1) in in_line


def test_given_a_dead_holder_when_an_async_waiter_waits_a_lease_then_it_takes_over(
    make_aio: Callable[..., Any], run: Callable[[Scenario], Any], ddb: Any, locks: str
) -> None:
    # Given: a holder whose heartbeats stopped (it died), a waiter on virtual time
    clock = AsyncClock()
    dead = make_aio(aio.LeaseLockClient, "dead")
    waiter = make_aio(aio.LeaseLockClient, "b", clock=clock, sleep=clock.sleep)

    async def scenario() -> tuple[int, float, bool]:
        lock = await dead.acquire("Moe")
        dead._heartbeats.close()
        started = clock.now
        # When
        taken = await waiter.acquire("Moe", wait=math.inf)
        waited = clock.now - started
        # Then the dead holder's late release changes nothing
        released = await lock.release()
        await taken.release()
        await waiter.close()
        return taken.fencing_token, waited, released

    token, waited, released = run(scenario)
    assert token == 2
    assert waited >= LEASE
    assert released is False


def test_given_a_lock_taken_over_when_its_async_with_ends_then_lock_lost_error(
    make_aio: Callable[..., Any], run: Callable[[Scenario], Any]
) -> None:
    # Given: a holder that stops heartbeating inside its block while a waiter takes over
    clock = AsyncClock()
    holder = make_aio(aio.LeaseLockClient, "host-a", clock=clock, sleep=clock.sleep)
    waiter = make_aio(aio.LeaseLockClient, "b", clock=clock, sleep=clock.sleep)

    async def scenario() -> None:
        async with holder.acquire("Moe") as lock:
            holder._heartbeats.close()
            taken = await waiter.acquire("Moe")
            assert not await lock.heartbeat()
            await taken.release()
        await waiter.close()

    # When / Then
    with pytest.raises(LockLostError, match="taken over"):
        run(scenario)


def test_given_a_short_heartbeat_period_then_the_heartbeat_task_renews_the_lease(
    make_aio: Callable[..., Any], run: Callable[[Scenario], Any], ddb: Any, locks: str
) -> None:
    # Given: heartbeats every 10 ms of real time
    lc = make_aio(aio.LeaseLockClient, "host-a", heartbeat_period=0.01)

    async def scenario() -> tuple[bool, bool]:
        lock = await lc.acquire("Moe")
        first = next(r.record_version for r in list_locks(ddb, locks))
        # When: the task runs (waiting for its write, not for a time)
        for _ in range(2_000):
            await asyncio.sleep(0.01)
            if next(r.record_version for r in list_locks(ddb, locks)) != first:
                break
        renewed = next(r.record_version for r in list_locks(ddb, locks)) != first
        await lc.close()
        return renewed, lock.released

    renewed, released = run(scenario)
    # Then: the rvn moved without any call of ours, and close released the lock
    assert (renewed, released) == (True, True)
    assert lease_rows(ddb, locks) == [("free", None, 1)]


def test_given_async_fifo_waiters_then_they_are_granted_in_ticket_order(
    make_aio: Callable[..., Any], run: Callable[[Scenario], Any], ddb: Any, locks: str
) -> None:
    # Given: a holder and two waiters queued after it, in that order
    p1, p2, p3 = (make_aio(aio.FifoLock, name) for name in ("p1", "p2", "p3"))
    order: list[tuple[str, int]] = []

    async def take(fifo: Any) -> None:
        async with fifo.acquire("order-history") as lock:
            order.append((fifo.owner, lock.fencing_token))

    async def scenario() -> None:
        lock = await p1.acquire("order-history")
        second = asyncio.ensure_future(take(p2))
        await until_waiting(ddb, locks, 1)
        third = asyncio.ensure_future(take(p3))
        await until_waiting(ddb, locks, 2)
        # When
        await lock.release()
        await asyncio.gather(second, third)
        for fifo in (p1, p2, p3):
            await fifo.close()

    run(scenario)
    # Then
    assert order == [("p2", 2), ("p3", 3)]


def test_given_a_fifo_lock_held_when_an_async_try_once_then_not_granted_and_no_entry(
    make_aio: Callable[..., Any], run: Callable[[Scenario], Any], ddb: Any, locks: str
) -> None:
    # Given
    holder, other = make_aio(aio.FifoLock, "p1"), make_aio(aio.FifoLock, "p2")

    async def scenario() -> None:
        lock = await holder.acquire("order-history")
        # When / Then
        with pytest.raises(LockNotGrantedError):
            await other.acquire("order-history", wait=0)
        with pytest.raises(LockNotGrantedError):
            await other.acquire("order-history", wait=0.05)
        assert [r.state for r in list_locks(ddb, locks)] == ["held"]
        await lock.release()
        await holder.close()
        await other.close()

    run(scenario)


def test_given_sync_and_async_clients_on_one_lease_then_they_queue_in_one_line(
    backend: LocalDynamo,
    make_aio: Callable[..., Any],
    run: Callable[[Scenario], Any],
    ddb: Any,
    locks: str,
) -> None:
    # Given: a sync holder (boto3), an async waiter (aiobotocore) in line behind it
    sync = LeaseLockClient(backend.client(), locks, owner="sync", heartbeat_period=9.0)
    waiter = make_aio(aio.LeaseLockClient, "async")
    held = sync.acquire("Moe")

    async def scenario() -> int:
        waiting = asyncio.ensure_future(waiter.acquire("Moe", wait=30.0))
        await until_waiting(ddb, locks)
        # When: the sync holder releases from another thread
        await asyncio.get_running_loop().run_in_executor(None, held.release)
        lock = await waiting
        token: int = lock.fencing_token
        # Then the sync client waits behind the async holder in turn
        await lock.release()
        await waiter.close()
        return token

    try:
        token = run(scenario)
        again = sync.acquire("Moe", wait=5.0)
        assert (held.fencing_token, token, again.fencing_token) == (1, 2, 3)
        again.release()
    finally:
        sync.close()


def test_given_sync_and_async_fifo_clients_then_one_ticket_line(
    backend: LocalDynamo,
    make_aio: Callable[..., Any],
    run: Callable[[Scenario], Any],
    ddb: Any,
    locks: str,
) -> None:
    # Given: an async holder; a sync waiter on a thread of its own
    fifo = make_aio(aio.FifoLock, "async")
    sync = FifoLock(backend.client(), locks, owner="sync", min_poll=0.01, max_poll=0.05)
    got: list[int] = []

    def sync_waiter() -> None:
        with sync.acquire("order-history", wait=30.0) as lock:
            got.append(lock.fencing_token)

    async def scenario() -> int:
        lock = await fifo.acquire("order-history")
        thread = threading.Thread(target=sync_waiter)
        thread.start()
        await until_waiting(ddb, locks)
        # When
        await lock.release()
        await asyncio.get_running_loop().run_in_executor(None, thread.join)
        await fifo.close()
        token: int = lock.fencing_token
        return token

    try:
        first = run(scenario)
    finally:
        sync.close()
    # Then
    assert (first, got) == (1, [2])


def test_given_a_heartbeat_task_left_pending_when_its_loop_is_dropped_then_nothing_is_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a heartbeat task started on a loop of its own, waiting for its next beat
    reported: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    loop = asyncio.new_event_loop()
    keeper = HeartbeatTask(period=60.0, name="beats")

    async def start(beats: HeartbeatTask) -> bool:
        beats.add(object(), lambda: None)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        task = beats._task  # started, and waiting for its next beat
        return task is not None and not task.done()

    assert loop.run_until_complete(start(keeper))

    # When the program drops the loop without closing the client, and the task is collected
    loop.close()
    del keeper, loop
    gc.collect()

    # Then closing its coroutine outside any loop raises nothing (asyncio alone says the
    # task was destroyed while pending)
    assert [str(r.exc_value) for r in reported] == []
