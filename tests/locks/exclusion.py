"""The mutual-exclusion workload shared by the three locks' stress tests.

Each worker repeatedly enters a critical section that increments a counter
item with a plain read and an unconditional write, so any overlap between two
holders loses an update (and is also caught in-process).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ddbtx.local import LocalDynamo
from ddbtx.locks import FifoLock, LeaseLockClient

WORKERS = 20
ROUNDS = 50
HANG_GUARD_SECONDS = 3600.0


class Counter:
    """A counter item incremented non-atomically: exact only under mutual exclusion."""

    def __init__(self, client: Any, table: str, name: str = "counter") -> None:
        self._client = client
        self._table = table
        self._key = {"pk": {"S": name}}
        self._guard = threading.Lock()
        self.inside = 0
        self.most_inside = 0

    @contextmanager
    def critical(self) -> Iterator[None]:
        with self._guard:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            yield
        finally:
            with self._guard:
                self.inside -= 1

    def increment(self, client: Any) -> None:
        with self.critical():
            item = client.get_item(TableName=self._table, Key=self._key, ConsistentRead=True)
            value = int(item.get("Item", {}).get("n", {}).get("N", "0"))
            client.put_item(TableName=self._table, Item={**self._key, "n": {"N": str(value + 1)}})

    def value(self) -> int:
        item = self._client.get_item(TableName=self._table, Key=self._key, ConsistentRead=True)
        return int(item.get("Item", {}).get("n", {}).get("N", "0"))


class Grants:
    """Fencing tokens in the order holders entered the critical section."""

    def __init__(self, workers: int, rounds: int) -> None:
        self.tokens: list[int] = []
        self.done = [0] * workers
        self._guard = threading.Lock()

    def entered(self, index: int, token: int) -> None:
        with self._guard:
            self.tokens.append(token)
            self.done[index] += 1


def run_workers(worker: Callable[[int], None], workers: int = WORKERS) -> list[BaseException]:
    """Run ``worker(i)`` in ``workers`` real threads; return what they raised."""
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            worker(index)
        except BaseException as exc:  # collected and asserted on by the test
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(workers)]
    for thread in threads:
        thread.start()
    # One deadline for the whole run, only as a guard against a hang: a worker still
    # running when it passes fails the run by name, rather than the checks reading a
    # counter that a live holder has yet to write (a slow machine once did that).
    deadline = time.monotonic() + HANG_GUARD_SECONDS
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    alive = [thread.name for thread in threads if thread.is_alive()]
    assert not alive, f"workers still running after {HANG_GUARD_SECONDS} s: {alive}"
    return errors


def run_lock_clients(
    kind: type[LeaseLockClient | FifoLock],
    backend: LocalDynamo,
    locks: str,
    counter: Counter,
    grants: Grants,
    workers: int = WORKERS,
    rounds: int = ROUNDS,
) -> list[BaseException]:
    """Each worker: its own client and lock client on real time, ``rounds`` blocking
    acquire/increment/release cycles on one resource."""

    def worker(index: int) -> None:
        client = backend.client()
        with kind(
            client, locks, owner=f"{kind.__name__}-{index}", lease_duration=60.0,
            heartbeat_period=20.0, min_poll=0.01, max_poll=0.5,
            clock=time.monotonic, wall_clock=time.time, sleep=time.sleep,
        ) as lock_client:  # fmt: skip
            for _ in range(rounds):
                with lock_client.acquire("counter", wait=math.inf) as lock:
                    with counter.critical():
                        grants.entered(index, lock.fencing_token)
                    counter.increment(client)

    return run_workers(worker, workers)
