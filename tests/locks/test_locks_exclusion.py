"""Mutual exclusion under real threads: clients run acquire/increment/release cycles
on one resource, for each lock, with the losers waiting rather than failing. The
default run is 4 clients x 5 cycles; the stress variant (20 x 50 on dynalite) is
marked slow.
Fairness is not asserted here, where thread scheduling decides it: the FIFO
order is proven in virtual time (test_locks_fifo), and the lease lock's line too
(test_locks_lease_line)."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from ddbtx.local import LocalDynamo
from ddbtx.locks import FifoLock, LeaseLockClient, Mutex, list_locks

from .exclusion import ROUNDS, WORKERS, Counter, Grants, run_lock_clients, run_workers


def run_mutexes(
    backend: LocalDynamo, locks: str, counter: Counter, grants: Grants, workers: int, rounds: int
) -> list[BaseException]:
    def worker(index: int) -> None:
        client = backend.client()
        mutex = Mutex(client, locks, owner=f"worker-{index}")
        rng = random.Random(index)
        for _ in range(rounds):
            delay = 0.01
            while (token := mutex.acquire_token("counter")) is None:  # losers retry, backing off
                time.sleep(rng.uniform(0.5, 1.0) * delay)
                delay = min(0.5, delay * 2)
            with counter.critical():
                grants.entered(index, token)
            counter.increment(client)
            assert mutex.release("counter")

    return run_workers(worker, workers)


def run_kind(
    kind: str, backend: LocalDynamo, locks: str, counter: Counter, workers: int, rounds: int
) -> Grants:
    grants = Grants(workers, rounds)
    if kind == "mutex":
        errors = run_mutexes(backend, locks, counter, grants, workers, rounds)
    else:
        lock_kind = LeaseLockClient if kind == "lease" else FifoLock
        errors = run_lock_clients(lock_kind, backend, locks, counter, grants, workers, rounds)
    assert errors == []
    return grants


def check_run(
    kind: str, ddb: Any, locks: str, counter: Counter, grants: Grants, grants_made: int
) -> None:
    """Exclusion (never two inside, no lost increment), fencing (tokens strictly
    increase in the order holders entered) and what is left: one free row whose
    counter is the last token (for FIFO, tickets; one per grant)."""
    assert counter.most_inside == 1
    assert counter.value() == grants_made
    assert grants.tokens == sorted(set(grants.tokens))
    assert len(grants.tokens) == grants_made
    rows = [(r.kind, r.namespace, r.state, r.fencing_token) for r in list_locks(ddb, locks)]
    namespace = "default" if kind == "fifo" else None
    assert rows == [(kind, namespace, "free", grants.tokens[-1])]
    if kind == "fifo":  # no ticket is burnt when nothing fails: one per grant
        assert grants.tokens[-1] == grants_made


@pytest.mark.parametrize("kind", ["mutex", "lease", "fifo"])
def test_given_4_clients_when_each_runs_5_cycles_then_exclusive_and_fenced(
    backend: LocalDynamo, locks: str, data_table: str, ddb: Any, kind: str
) -> None:
    # Given
    counter = Counter(ddb, data_table)
    # When
    grants = run_kind(kind, backend, locks, counter, workers=4, rounds=5)
    # Then
    check_run(kind, ddb, locks, counter, grants, 20)


# The stress sizes per emulator. moto serves from a thread of the test's own process, so
# its 20 polling clients share one GIL with the server: 20 x 50 took 4 to 12 minutes per
# lock there, against under a minute on dynalite (its own process). moto runs a smaller
# stress; dynalite keeps the full one.
STRESS = {"moto": (10, 20), "dynalite": (WORKERS, ROUNDS)}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mutex", "lease", "fifo"])
def test_given_many_clients_when_each_runs_many_cycles_then_the_counter_is_exact(
    backend: LocalDynamo, locks: str, data_table: str, ddb: Any, kind: str
) -> None:
    # Given
    workers, rounds = STRESS[backend.kind]
    counter = Counter(ddb, data_table)
    # When
    grants = run_kind(kind, backend, locks, counter, workers=workers, rounds=rounds)
    # Then
    check_run(kind, ddb, locks, counter, grants, workers * rounds)
