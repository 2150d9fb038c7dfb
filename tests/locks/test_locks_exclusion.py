"""Mutual exclusion under real threads: 20 clients x 50 acquire/increment/release
cycles on one resource, for each lock, with the losers waiting rather than failing."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from ddbtx.local import LocalDynamo
from ddbtx.locks import FifoLock, LeaseLockClient, Mutex, list_locks

from .exclusion import ROUNDS, WORKERS, Counter, run_lock_clients, run_workers


def run_mutexes(backend: LocalDynamo, locks: str, counter: Counter) -> list[BaseException]:
    def worker(index: int) -> None:
        client = backend.client()
        mutex = Mutex(client, locks, owner=f"worker-{index}")
        rng = random.Random(index)
        for _ in range(ROUNDS):
            delay = 0.01
            while not mutex.acquire("counter"):  # losers wait and retry, backing off
                time.sleep(rng.uniform(0.5, 1.0) * delay)
                delay = min(0.5, delay * 2)
            counter.increment(client)
            assert mutex.release("counter")

    return run_workers(worker)


#: What each lock leaves in its table after 1000 grants: nothing, or a free row with the
#: last fencing token. A FIFO ticket passed over before its queue row was written (another
#: ticket found the lock free first) queues again under a new ticket, so how many tickets
#: 1000 grants take depends on thread scheduling: at least 1000 (1013 once on a busy CI).
LEFT = {
    "mutex": [],
    "lease": [("lease", None, "free", 1000)],
    "fifo": [("fifo", "default", "free", 1000)],
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mutex", "lease", "fifo"])
def test_given_20_clients_when_each_runs_50_cycles_then_the_counter_is_exactly_1000(
    backend: LocalDynamo, locks: str, data_table: str, ddb: Any, kind: str
) -> None:
    # Given
    counter = Counter(ddb, data_table)
    # When
    if kind == "mutex":
        errors = run_mutexes(backend, locks, counter)
    else:
        errors = run_lock_clients(
            LeaseLockClient if kind == "lease" else FifoLock, backend, locks, counter
        )
    # Then
    assert errors == []
    assert counter.most_inside == 1
    assert counter.value() == WORKERS * ROUNDS
    rows = [(r.kind, r.namespace, r.state, r.fencing_token) for r in list_locks(ddb, locks)]
    if kind == "fifo" and len(rows) == 1 and rows[0][3] > WORKERS * ROUNDS:
        rows = [(*rows[0][:3], WORKERS * ROUNDS)]  # requeued tickets, see LEFT
    assert rows == LEFT[kind]
