"""Fixtures of the lock tests: a fresh locks table per test on each backend, lock
clients with their own boto3 client each (so faults hit one participant), and
virtual time."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ddbtx.aio import locks as aio_locks
from ddbtx.chaos import Crash
from ddbtx.local import LocalDynamo
from ddbtx.locks import LockClient, Mutex, create_lock_table
from drivers import DRIVERS, EventLoopThread, Synced

from .support import Log, Stall, VirtualTime

#: Wall clock of every lock client made by the fixtures unless a test skews it.
WALL_START = 1_800_000_000.0
#: Default lease of the fixtures' lock clients, in virtual seconds.
LEASE = 20.0
#: Their longest poll.
MAX_POLL = 1.0
#: The resource the waiters of :class:`Log` queue for.
R = "order-history"


@pytest.fixture
def locks(ddb: Any, table_name: Callable[[str], str]) -> str:
    """An empty locks table."""
    name = table_name("locks")
    create_lock_table(ddb, name)
    return name


@pytest.fixture
def vt() -> Iterator[VirtualTime]:
    """Virtual time with the test's own thread as a participant."""
    clock = VirtualTime()
    clock.join()
    yield clock
    clock.close()


@pytest.fixture
def log(vt: VirtualTime) -> Log:
    """Grants of the participants queueing for :data:`R`."""
    return Log(vt, R)


class Wall:
    """The wall clock of the lock clients: fixed unless a test moves it."""

    def __init__(self) -> None:
        self.now = WALL_START

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def wall() -> Wall:
    return Wall()


@pytest.fixture
def make_lock(
    backend: LocalDynamo, locks: str, vt: VirtualTime, wall: Wall
) -> Iterator[Callable[..., Any]]:
    """``make_lock(LeaseLockClient | FifoLock, owner, **options)`` on virtual time.

    Defaults: a 20 s lease; heartbeats every 9 s, which for a holder's thread
    means 9 s of *real* time, so within a test a holder heartbeats only when
    the test calls ``heartbeat()`` (waiters heartbeat on virtual time); polls
    from 0.1 s doubling to 1 s. Each client has its
    own boto3 client (``lock_client._client``) and is closed after the test.
    """
    made: list[LockClient] = []

    def make(kind: type[LockClient], owner: str, **options: Any) -> Any:
        settings: dict[str, Any] = {
            "lease_duration": LEASE,
            "heartbeat_period": 9.0,
            "min_poll": 0.1,
            "max_poll": MAX_POLL,
            "clock": vt.now,
            "wall_clock": wall,
            "sleep": vt.sleep,
        }
        settings.update(options)
        lock_client = kind(backend.client(), locks, owner=owner, **settings)
        made.append(lock_client)
        return lock_client

    yield make
    for lock_client in made:
        lock_client.close()


class Monotonic:
    """A monotonic clock for mutexes (which never sleep): moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def mono() -> Monotonic:
    return Monotonic()


@pytest.fixture(params=DRIVERS)
def driver(request: pytest.FixtureRequest) -> str:
    """``sync`` (``ddbtx.locks``, boto3) or ``aio`` (``ddbtx.aio.locks``, aiobotocore)."""
    name: str = request.param
    return name


@pytest.fixture
def make_mutex(
    backend: LocalDynamo,
    locks: str,
    wall: Wall,
    mono: Monotonic,
    driver: str,
    event_loop_thread: EventLoopThread,
) -> Callable[..., Mutex]:
    """``make_mutex(owner, **options)``: its own client, the test's clocks, on the test's
    driver: a ``ddbtx.locks.Mutex``, or a ``ddbtx.aio.locks.Mutex`` behind sync calls."""

    def make(owner: str, **options: Any) -> Mutex:
        settings: dict[str, Any] = {"wall_clock": wall, "clock": mono, **options}
        if driver == "sync":
            return Mutex(backend.client(), locks, owner=owner, **settings)
        client = event_loop_thread.client(backend)
        made: Mutex = Synced(
            aio_locks.Mutex(client, locks, owner=owner, **settings), event_loop_thread
        )  # type: ignore[assignment]
        return made

    return make


@pytest.fixture
def freeze() -> Iterator[Callable[[LockClient, str], None]]:
    """``freeze(lock_client, resource)``: while someone holds ``resource``, that client
    (FIFO or lease) queues for it and then stops for good before its first look at
    the row, like a process that died waiting. Its entry stays, never renewed. Ended
    after the test."""
    frozen: list[tuple[Stall, threading.Thread]] = []

    def make(lock_client: LockClient, resource: str) -> None:
        stall = Stall(lock_client.client, "GetItem")

        def wait() -> None:
            with contextlib.suppress(Crash):
                lock_client.acquire(resource)  # type: ignore[attr-defined]

        thread = threading.Thread(target=wait, daemon=True)
        thread.start()
        assert stall.reached.wait(30), "the frozen waiter never queued"
        frozen.append((stall, thread))

    yield make
    for stall, thread in frozen:
        stall.go(fail=Crash("frozen for good"))
        thread.join(timeout=30)
