"""Requests per lock operation: Mutex, LeaseLockClient and FifoLock.

Uncontended acquire, heartbeat and release are counted exactly. The FIFO
handoff is measured twice: counted, with the waiter's sleeps replaced by a hook
that holds the waiter until the holder has released (so the polls after the
release are exact), and in real time with the default poll backoff (polls
while waiting and the delay between release and grant).

Usage::

    python -m benchmarks.locks                      # both emulators
    python -m benchmarks.locks --hold 0.5 --backend dynalite
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ddbtx.instrumentation import RequestCounts, count_requests
from ddbtx.local import Kind, LocalDynamo
from ddbtx.locks import FifoLock, LeaseLockClient, Mutex, create_lock_table

from ._common import backend_argument, chosen_kinds, emulators, render, unique_name

#: Long enough that no background heartbeat fires during a measurement.
LEASE = 600.0
HEARTBEAT = 300.0


@dataclass(frozen=True)
class OpCount:
    lock: str
    operation: str
    requests: int
    by_operation: str


def _ops(counts: RequestCounts) -> str:
    return ", ".join(f"{op} {n}" for op, n in sorted(counts.by_operation.items()))


@contextmanager
def counted(out: list[OpCount], client: Any, lock: str, operation: str) -> Iterator[None]:
    with count_requests(client) as counts:
        yield
    out.append(OpCount(lock, operation, counts.total, _ops(counts)))


def measure_uncontended(client: Any, table: str) -> list[OpCount]:
    """acquire / heartbeat / release of each lock kind on a fresh resource."""
    out: list[OpCount] = []
    resource = f"bench-{uuid.uuid4().hex[:8]}"
    mutex = Mutex(client, table, owner="bench")
    with counted(out, client, "Mutex", "acquire"):
        assert mutex.acquire(resource)
    with counted(out, client, "Mutex", "release"):
        assert mutex.release(resource)
    for name, cls in (("LeaseLockClient", LeaseLockClient), ("FifoLock", FifoLock)):
        locks: Any = cls(
            client, table, owner="bench", lease_duration=LEASE, heartbeat_period=HEARTBEAT
        )
        with locks:
            with counted(out, client, name, "acquire"):
                held = locks.acquire(resource, wait=0)
            with counted(out, client, name, "heartbeat"):
                assert held.heartbeat()
            with counted(out, client, name, "release"):
                assert held.release()
    return out


@dataclass(frozen=True)
class Handoff:
    waiting: str  # the waiter's requests before the holder released
    after: str  # its requests from the release to the grant
    after_total: int
    polls_after: int  # reads (looks at the queue) after the release


def measure_fifo_handoff(db: LocalDynamo, table: str) -> Handoff:
    """Counted handoff: the waiter blocks in its first sleep until the holder released."""
    resource = f"handoff-{uuid.uuid4().hex[:8]}"
    waiting = threading.Event()
    released = threading.Event()
    granted: list[Any] = []

    def hold_until_released(_: float) -> None:
        waiting.set()
        released.wait(30)

    holder_client, waiter_client = db.client(), db.client()
    holder = FifoLock(
        holder_client, table, owner="holder", lease_duration=LEASE, heartbeat_period=HEARTBEAT
    )
    waiter = FifoLock(
        waiter_client,
        table,
        owner="waiter",
        lease_duration=LEASE,
        heartbeat_period=HEARTBEAT,
        sleep=hold_until_released,
    )
    with holder, waiter:
        held = holder.acquire(resource, wait=0)
        with count_requests(waiter_client) as counts:
            thread = threading.Thread(target=lambda: granted.append(waiter.acquire(resource)))
            thread.start()
            if not waiting.wait(30):
                raise RuntimeError("the FIFO waiter never slept")
            before = _ops(counts)
            counts.reset()
            held.release()
            released.set()
            thread.join(30)
        if not granted:
            raise RuntimeError("the FIFO waiter was not granted the lock")
        granted[0].release()
    return Handoff(before, _ops(counts), counts.total, counts.reads)


@dataclass(frozen=True)
class RealHandoff:
    hold: float
    polls_while_held: int
    handoff_ms: float


def measure_fifo_real(db: LocalDynamo, table: str, hold: float) -> RealHandoff:
    """Real time, default polls: the holder keeps the lock ``hold`` seconds."""
    resource = f"real-{uuid.uuid4().hex[:8]}"
    holder_client, waiter_client = db.client(), db.client()
    holder = FifoLock(holder_client, table, owner="holder")
    waiter = FifoLock(waiter_client, table, owner="waiter")
    granted_at: list[float] = []

    def wait_for_it() -> None:
        with waiter.acquire(resource, wait=30):
            granted_at.append(time.perf_counter())

    with holder, waiter:
        held = holder.acquire(resource, wait=0)
        with count_requests(waiter_client) as counts:
            thread = threading.Thread(target=wait_for_it)
            thread.start()
            time.sleep(hold)
            polls = counts.reads
            held.release()
            released_at = time.perf_counter()
            thread.join(60)
    if not granted_at:
        raise RuntimeError("the FIFO waiter was not granted the lock")
    return RealHandoff(hold, polls, (granted_at[0] - released_at) * 1000)


def report(kind: Kind, ops: Sequence[OpCount], handoff: Handoff, real: RealHandoff | None) -> str:
    rows = [[o.lock, o.operation, o.requests, o.by_operation] for o in ops]
    text = render(
        f"Requests per uncontended lock operation ({kind})",
        ["lock", "operation", "requests", "by operation"],
        rows,
    )
    text += "\n\n" + render(
        f"FIFO handoff, counted ({kind})",
        ["phase", "waiter requests"],
        [
            ["queueing behind the holder", handoff.waiting],
            ["release -> grant", f"{handoff.after} ({handoff.after_total} total)"],
            ["polls after the release", handoff.polls_after],
        ],
    )
    if real is not None:
        text += "\n\n" + render(
            f"FIFO handoff, real time with the default poll backoff ({kind})",
            ["holder keeps it", "waiter polls meanwhile", "release -> grant"],
            [[f"{real.hold:.1f} s", real.polls_while_held, f"{real.handoff_ms:.0f} ms"]],
        )
    return text


def run_backend(db: LocalDynamo, hold: float, name: Callable[[str], str] = unique_name) -> str:
    client = db.client()
    table = name("locks")
    create_lock_table(client, table)
    ops = measure_uncontended(client, table)
    handoff = measure_fifo_handoff(db, table)
    real = measure_fifo_real(db, table, hold) if hold > 0 else None
    return report(db.kind, ops, handoff, real)


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.locks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--hold", type=float, default=2.0, help="seconds the real-time holder keeps it (0: skip)"
    )
    backend_argument(parser)
    args = parser.parse_args(argv)
    if args.hold < 0:
        parser.error("--hold must be >= 0")
    kinds = chosen_kinds(args)
    with emulators(kinds) as dbs:
        for kind in kinds:
            out(run_backend(dbs[kind], args.hold) + "\n")


if __name__ == "__main__":
    main()
