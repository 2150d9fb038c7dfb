"""Contention: a bank workload under wound-wait and under the Java library's policy.

Worker threads (each with its own client and manager, as separate processes
would be) move one unit between two random accounts in a transaction, over and
over, for a fixed time. A transfer that contention aborts (rolled back by
another transaction, or given up after ``lock_wait``) is retried with its first
attempt's priority (``tm.begin(priority=...)``), as wound-wait intends: the same
loop for both policies, and the Java policy ignores priorities. Both policies run
in the same process, alternating in rounds (each round in the other order, after
a short unmeasured warm-up of both) so that machine load hits both alike.
Reported: committed transfers per second, requests per committed transfer
(exact, every request of every attempt), aborted attempts by cause, each
worker's commits (a worker with none starved), and the invariants afterwards
(money conserved, no lock left).

Usage::

    python -m benchmarks.contention                 # 8 workers, 10 accounts, 2 x 4 s per policy
    python -m benchmarks.contention --seconds 10 --rounds 3 --backend moto
"""

from __future__ import annotations

import argparse
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ddbtx import (
    ConditionalCheckFailedError,
    Contention,
    TransactionConflictError,
    TransactionManager,
    TransactionRolledBackError,
)
from ddbtx import schema as s
from ddbtx.instrumentation import count_requests
from ddbtx.local import Kind, LocalDynamo

from ._common import (
    Tables,
    backend_argument,
    chosen_kinds,
    create_tables,
    emulators,
    key,
    render,
    seed,
    unique_name,
)

POLICIES = (Contention.WOUND_WAIT, Contention.ROLLBACK_HOLDER)
BALANCE = 1000
#: Aborted attempts by exception, named by cause.
CAUSES = {
    TransactionRolledBackError: "rolled back by another",
    TransactionConflictError: "gave up waiting",
    ConditionalCheckFailedError: "overdraft refused",
}


@dataclass(frozen=True)
class Workload:
    workers: int = 8
    accounts: int = 10
    seconds: float | None = 4.0  # per round and policy; None: stop after ``attempts``
    attempts: int | None = None  # transfers each worker tries; None: until time is up
    lock_wait: float = 0.5
    stale_after: float = 1.0


@dataclass
class Outcome:
    """What one policy achieved, summed over rounds."""

    policy: Contention
    seconds: float = 0.0
    commits: Counter[int] = field(default_factory=Counter)  # by worker
    aborts: Counter[str] = field(default_factory=Counter)  # attempts, by cause
    requests: int = 0  # every request of every attempt, committed or not

    @property
    def committed(self) -> int:
        return sum(self.commits.values())

    @property
    def rate(self) -> float:
        return self.committed / self.seconds if self.seconds else 0.0

    @property
    def requests_per_commit(self) -> float:
        return self.requests / self.committed if self.committed else float("inf")


def transfer(
    tm: TransactionManager, table: str, source: str, target: str, priority: str | None = None
) -> str:
    """One attempt; returns its transaction id (the priority of a retry)."""
    with tm.transaction(priority=priority) as tx:
        tx.update_item(
            TableName=table,
            Key=key(source),
            UpdateExpression="SET balance = balance - :one",
            # Guards the account: no transfer may overdraw it.
            ConditionExpression="balance >= :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
        tx.update_item(
            TableName=table,
            Key=key(target),
            UpdateExpression="SET balance = balance + :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
    return tx.id


def run_round(
    db: LocalDynamo, tables: Tables, accounts: Sequence[str], work: Workload, into: Outcome
) -> None:
    """All workers on one policy until the time is up (or each made its attempts)."""
    stop = threading.Event()
    lock = threading.Lock()

    def worker(index: int) -> None:
        rng = random.Random(index)
        tm = TransactionManager(
            db.client(),
            tables.tx,
            tables.images,
            lock_wait=work.lock_wait,
            stale_after=work.stale_after,
            contention=into.policy,
            rng=rng,
        )
        made = 0
        retry: tuple[str, str, str] | None = None  # a transfer contention aborted
        with count_requests(tm.client) as counts:
            while not stop.is_set() and (work.attempts is None or made < work.attempts):
                made += 1
                source, target, priority = retry or (*rng.sample(accounts, 2), None)
                retry = None
                first = priority
                try:
                    transfer(tm, tables.data, source, target, priority)
                except Exception as exc:  # every abort is a figure here, not a failure
                    outcome = CAUSES.get(type(exc), type(exc).__name__)
                    if isinstance(exc, (TransactionRolledBackError, TransactionConflictError)):
                        first = first or getattr(exc, "tx_id", None)
                        retry = (source, target, first) if first else None
                else:
                    outcome = "committed"
                with lock:
                    if outcome == "committed":
                        into.commits[index] += 1
                    else:
                        into.aborts[outcome] += 1
        with lock:
            into.requests += counts.total
        tm.protocol.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(work.workers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    if work.seconds is not None:
        time.sleep(work.seconds)
        stop.set()
    for t in threads:
        t.join()
    into.seconds += time.perf_counter() - start
    for i in range(work.workers):
        into.commits[i] += 0  # a worker that never committed still shows up


@dataclass(frozen=True)
class Invariants:
    total: int  # committed balances (Isolation.COMMITTED reads)
    expected: int
    locks: Counter[str]  # locks still on accounts, by their holder's state


def check(db: LocalDynamo, tables: Tables, accounts: Sequence[str]) -> Invariants:
    """Money (committed view) and the locks left on accounts once every worker stopped."""
    client = db.client()
    tm = TransactionManager(client, tables.tx, tables.images)
    total = 0
    locks: Counter[str] = Counter()
    for account in accounts:
        committed = tm.get_item(TableName=tables.data, Key=key(account))["Item"]
        total += int(committed["balance"]["N"])
        raw = client.get_item(TableName=tables.data, Key=key(account), ConsistentRead=True)
        lock = raw["Item"].get(s.ATTR_LOCK, {}).get("S")
        if lock is None:
            continue
        header = tm.protocol.run(tm.protocol.records.read_header(lock.rsplit("/", 1)[0]))
        if header is None:
            locks["holder record gone"] += 1
        else:
            locks[f"holder {header.state}{', completed' if header.completed else ''}"] += 1
    return Invariants(total, BALANCE * len(accounts), locks)


def measure(
    db: LocalDynamo, work: Workload, rounds: int, name: Callable[[str], str] = unique_name
) -> tuple[list[Outcome], Invariants]:
    """Both policies, alternating for ``rounds`` rounds, on the same accounts."""
    client = db.client()
    tables = create_tables(client, name)
    accounts = [f"acct-{uuid.uuid4().hex[:6]}-{i}" for i in range(work.accounts)]
    seed(client, tables.data, accounts, BALANCE)
    outcomes = [Outcome(policy) for policy in POLICIES]
    if work.seconds is not None:
        # Unmeasured: the emulator's first requests (JIT, caches) would count against
        # whichever policy happened to go first.
        warm = replace(work, seconds=min(1.0, work.seconds))
        for policy in POLICIES:
            run_round(db, tables, accounts, warm, Outcome(policy))
    for r in range(rounds):
        for outcome in outcomes if r % 2 == 0 else outcomes[::-1]:
            run_round(db, tables, accounts, work, outcome)
    return outcomes, check(db, tables, accounts)


def report(kind: Kind, work: Workload, outcomes: Sequence[Outcome], inv: Invariants) -> str:
    rows = []
    for o in outcomes:
        per_worker = [o.commits[i] for i in range(work.workers)]
        starved = sum(1 for n in per_worker if n == 0)
        aborts = ", ".join(f"{k} {n}" for k, n in sorted(o.aborts.items())) or "-"
        rows.append(
            [
                o.policy.value,
                o.committed,
                f"{o.seconds:.1f}",
                f"{o.rate:.1f}",
                f"{o.requests_per_commit:.1f}",
                f"{min(per_worker)}..{max(per_worker)}",
                starved,
                aborts,
            ]
        )
    wound, java = outcomes
    ratio = f"{wound.rate / java.rate:.2f}x" if java.rate else "inf (Java policy made none)"
    cost = (
        f"{java.requests_per_commit / wound.requests_per_commit:.2f}x"
        if wound.committed and java.committed
        else "n/a"
    )
    title = (
        f"Bank workload: {work.workers} workers, {work.accounts} accounts, "
        f"lock_wait={work.lock_wait}s, stale_after={work.stale_after}s ({kind})"
    )
    headers = ["policy", "commits", "s", "commits/s", "req/commit", "per worker", "starved"]
    headers.append("aborted attempts")
    text = render(title, headers, rows)
    locked = ", ".join(f"{n} ({k})" for k, n in sorted(inv.locks.items())) or "none"
    text += (
        f"\nwound-wait / rollback-holder throughput: {ratio}; "
        f"rollback-holder / wound-wait requests per commit: {cost}"
        f"\nafter the run: committed money {inv.total} of {inv.expected} "
        f"({'conserved' if inv.total == inv.expected else 'NOT CONSERVED'}), "
        f"locks left on accounts: {locked}"
    )
    return text


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.contention",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--accounts", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=4.0, help="per round and policy")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--lock-wait", type=float, default=Workload.lock_wait, help="seconds")
    parser.add_argument("--stale-after", type=float, default=Workload.stale_after, help="seconds")
    backend_argument(parser)
    args = parser.parse_args(argv)
    if args.workers < 1 or args.accounts < 2 or args.seconds <= 0 or args.rounds < 1:
        parser.error("--workers >= 1, --accounts >= 2, --seconds > 0, --rounds >= 1")
    if args.lock_wait < 0 or args.stale_after <= 0:
        parser.error("--lock-wait >= 0 and --stale-after > 0")
    work = Workload(
        workers=args.workers,
        accounts=args.accounts,
        seconds=args.seconds,
        lock_wait=args.lock_wait,
        stale_after=args.stale_after,
    )
    kinds = chosen_kinds(args)
    # moto runs in its own interpreter: in a thread of this one it would share
    # the GIL with the eight workers and measure that instead of the policies.
    with emulators(kinds, own_process=True) as dbs:
        for kind in kinds:
            outcomes, inv = measure(dbs[kind], work, args.rounds)
            out(report(kind, work, outcomes, inv) + "\n")


if __name__ == "__main__":
    main()
