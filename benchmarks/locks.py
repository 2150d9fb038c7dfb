"""The three ddbtx locks side by side: Mutex, LeaseLockClient and FifoLock.

* Uncontended acquire, heartbeat and release, counted exactly.
* The FIFO handoff: counted (the waiter's sleep is held until the holder has
  released, so the polls after the release are exact) and in real time.
* Contention (issue 13's workload): 8 threads x 50 acquires on one resource,
  each thread its own client; requests per acquisition (by kind), throughput,
  fairness (fewest / most acquisitions per thread when the first thread
  finishes) and the longest wait for one acquisition; medians of ``--rounds``.
* A dead holder (2 s lease, never heartbeats again): seconds until a waiter
  holds the lock. A paused holder: whether its late write is refused by its
  fencing token. Skew: whether a live lock survives its holder's wall clock
  being 60 s off either way while a waiter tries for 4 s.

Usage::

    python -m benchmarks.locks                      # both emulators
    python -m benchmarks.locks --hold 0.5 --backend dynalite --rounds 3
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from ddbtx.instrumentation import RequestCounts, count_requests
from ddbtx.local import Kind, LocalDynamo
from ddbtx.locks import FifoLock, LeaseLockClient, LockNotGrantedError, Mutex, create_lock_table
from ddbtx.locks import fifo as fifo_module
from ddbtx.locks import lease as lease_module
from ddbtx.locks import mutex as mutex_module
from ddbtx.tables import create_data_table

from ._common import DATA_KEY, backend_argument, chosen_kinds, emulators, render, unique_name

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


# --- contention (issue 13) -----------------------------------------------------

#: Issue 13's workload and its best peer's figures (dynalite, 3 rounds, medians).
THREADS = 8
ACQUIRES = 50
PEERS = {
    "requests per acquisition": "3.8 (dynalock)",
    "acquisitions/s vs LeaseLockClient": "1.22 (dynalock)",
    "fairness (fewest/most)": "0.68 (dynamo-dlm)",
    "longest wait (s)": "3.9 (dynamo-dlm)",
    "dead holder taken after (s, 2 s lease)": "2.07 (LeaseLockClient, before)",
    "paused holder's late write refused": "no (peers)",
    "live lock kept under 60 s skew": "no (dynamo-dlm, dynalock, dynamodblock)",
}

_LABELS = {
    ("UpdateItem", lease_module.LEASE_GRANT_FREE): "grant try",
    ("UpdateItem", lease_module.LEASE_GRANT_FIRST): "grant (first in line)",
    ("UpdateItem", lease_module.LEASE_TAKEOVER): "takeover",
    ("UpdateItem", lease_module.LEASE_TAKEOVER_FIRST): "takeover",
    ("UpdateItem", lease_module.LEASE_RELEASE): "release",
    ("UpdateItem", lease_module.LEASE_HANDOFF): "release (hands over)",
    ("UpdateItem", lease_module.LEASE_DATA): "data of a handed grant",
    ("UpdateItem", lease_module.LEASE_RENEW): "heartbeat",
    ("UpdateItem", fifo_module.FIFO_ENTER): "enter line (ticket + entry)",
    ("UpdateItem", lease_module.LEASE_ENTER): "enter line (ticket + entry)",
    ("UpdateItem", fifo_module.FIFO_TRY): "try once",
    ("UpdateItem", fifo_module.FIFO_SKIP): "skip a dead entry",
    ("UpdateItem", mutex_module.MUTEX_ACQUIRE): "grant try",
    ("UpdateItem", mutex_module.MUTEX_RELEASE): "release",
}


def label(operation: str, params: dict[str, Any]) -> str:
    """What one request of a lock is for, from its operation and condition."""
    condition = params.get("ConditionExpression")
    update = params.get("UpdateExpression", "")
    if operation == "UpdateItem" and condition == fifo_module.FIFO_LEAVE:
        # An entry's own write: its heartbeat, or leaving (on a FIFO head, releasing)
        if not update.startswith("REMOVE"):
            return "heartbeat"
        lease_row = params.get("Key", {}).get("sk", {}).get("S") == "lease"
        return "leave line" if lease_row else "release / leave"
    if operation in ("GetItem", "Query", "BatchGetItem"):
        return f"poll ({operation})"
    return _LABELS.get((operation, condition), f"{operation} ({condition})")


class Labelled:
    """Requests of many clients, counted by :func:`label` (thread-safe)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._guard = threading.Lock()

    def attach(self, client: Any) -> None:
        def seen(params: dict[str, Any], model: Any, **_: Any) -> None:
            with self._guard:
                self.counts[label(model.name, params)] += 1

        client.meta.events.register("provide-client-params.dynamodb", seen)


@dataclass(frozen=True)
class Contended:
    lock: str
    acquisitions: int
    seconds: float
    by_kind: dict[str, int]
    fairness: float
    longest_wait: float

    @property
    def requests(self) -> float:
        return sum(self.by_kind.values()) / self.acquisitions

    @property
    def rate(self) -> float:
        return self.acquisitions / self.seconds


def _mutex_cycle(client: Any, table: str, index: int, resource: str) -> Callable[[], None]:
    mutex = Mutex(client, table, owner=f"mutex-{index}")
    rng = random.Random(index)

    def cycle() -> None:
        delay = 0.01
        while not mutex.acquire(resource):  # the caller's retry loop: backoff with jitter
            time.sleep(rng.uniform(0.5, 1.0) * delay)
            delay = min(0.5, delay * 2)
        mutex.release(resource)

    return cycle


def measure_contention(
    db: LocalDynamo, table: str, lock: str, threads: int = THREADS, acquires: int = ACQUIRES
) -> Contended:
    """``threads`` threads, each with its own client, acquire and release one resource
    ``acquires`` times (nothing in between), with each lock's default settings."""
    resource = f"contended-{uuid.uuid4().hex[:8]}"
    labelled = Labelled()
    done = [0] * threads
    at_first_finish: list[list[int]] = []
    waits: list[float] = []
    guard = threading.Lock()
    start = threading.Barrier(threads + 1)

    def worker(index: int) -> None:
        client = db.client()
        labelled.attach(client)
        lock_client: Any = None
        if lock == "Mutex":
            cycle = _mutex_cycle(client, table, index, resource)
        else:
            cls = LeaseLockClient if lock == "LeaseLockClient" else FifoLock
            lock_client = cls(client, table, owner=f"{lock}-{index}")

            def cycle() -> None:
                lock_client.acquire(resource).release()

        start.wait()
        for _ in range(acquires):
            began = time.monotonic()
            cycle()
            waited = time.monotonic() - began
            with guard:
                waits.append(waited)
                done[index] += 1
                if done[index] == acquires and not at_first_finish:
                    at_first_finish.append(list(done))
        if lock_client is not None:
            lock_client.close()

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in workers:
        thread.start()
    start.wait()
    began = time.monotonic()
    for thread in workers:
        thread.join()
    seconds = time.monotonic() - began
    counts = at_first_finish[0]
    return Contended(
        lock, threads * acquires, seconds, dict(labelled.counts),
        min(counts) / max(counts), max(waits),
    )  # fmt: skip


# --- dead, paused and skewed holders ------------------------------------------------

#: The dead-holder workload's lease, as in issue 13 (2 s, heartbeats every 0.5 s).
SHORT_LEASE = 2.0


def _held_by(cls: type[Any], client: Any, table: str, resource: str, **options: Any) -> Any:
    lock_client = cls(client, table, owner="holder", **options)
    return lock_client, lock_client.acquire(resource, wait=0)


def measure_dead_holder(db: LocalDynamo, table: str, lock: str) -> float:
    """Seconds from a waiter's first try until it holds a lock whose holder died
    (stopped heartbeating) right after acquiring it."""
    resource = f"dead-{uuid.uuid4().hex[:8]}"
    options = {"lease_duration": SHORT_LEASE, "heartbeat_period": SHORT_LEASE / 4}
    if lock == "Mutex":
        Mutex(db.client(), table, owner="holder", expire_after=SHORT_LEASE).acquire(resource)
        waiter = Mutex(db.client(), table, owner="waiter", expire_after=SHORT_LEASE)
        began = time.monotonic()
        while not waiter.acquire(resource):
            time.sleep(0.05)
        return time.monotonic() - began
    cls = LeaseLockClient if lock == "LeaseLockClient" else FifoLock
    dead_client, _ = _held_by(cls, db.client(), table, resource, **options)
    dead_client._heartbeats.close()  # dies: no more heartbeats, nothing released
    with cls(db.client(), table, owner="waiter", **options) as waiter:
        began = time.monotonic()
        waiter.acquire(resource)
        return time.monotonic() - began


def measure_paused_holder(db: LocalDynamo, table: str, lock: str) -> bool:
    """A holder pauses past its lease, a waiter takes over and writes with its
    token; then the paused holder writes with its own. Whether that is refused."""
    resource = f"paused-{uuid.uuid4().hex[:8]}"
    options = {"lease_duration": SHORT_LEASE, "heartbeat_period": SHORT_LEASE / 4}
    data = db.client()
    data_table = unique_name("fenced")
    create_data_table(data, data_table)
    tokens: list[int] = []
    if lock == "Mutex":
        paused = Mutex(db.client(), table, owner="paused", expire_after=SHORT_LEASE)
        taker = Mutex(db.client(), table, owner="taker", expire_after=SHORT_LEASE)
        tokens.append(paused.acquire_token(resource) or 0)
        while (token := taker.acquire_token(resource)) is None:
            time.sleep(0.05)
        tokens.append(token)
    else:
        cls = LeaseLockClient if lock == "LeaseLockClient" else FifoLock
        paused_client, held = _held_by(cls, db.client(), table, resource, **options)
        paused_client._heartbeats.close()  # paused: no heartbeats while it sleeps
        tokens.append(held.fencing_token)
        with cls(db.client(), table, owner="taker", **options) as taker:
            tokens.append(taker.acquire(resource).fencing_token)
    fenced_write(data, data_table, tokens[1])
    try:
        fenced_write(data, data_table, tokens[0])
    except data.exceptions.ConditionalCheckFailedException:
        return True
    return False


def fenced_write(client: Any, table: str, token: int) -> None:
    """The README's fenced write: refused once a larger token has written."""
    client.update_item(
        TableName=table,
        Key={DATA_KEY: {"S": "protected"}},
        UpdateExpression="SET #fence = :token",
        ConditionExpression="attribute_not_exists(#fence) OR #fence <= :token",
        ExpressionAttributeNames={"#fence": "fence"},
        ExpressionAttributeValues={":token": {"N": str(token)}},
    )


def measure_skew(db: LocalDynamo, table: str, lock: str, skew: float) -> bool:
    """A holder (wall clock ``skew`` seconds off) holds and heartbeats for 4 s while
    a waiter with a correct clock tries; whether the holder kept its lock."""
    resource = f"skew-{uuid.uuid4().hex[:8]}"
    options: dict[str, Any] = {"lease_duration": SHORT_LEASE, "heartbeat_period": SHORT_LEASE / 4}
    if lock == "Mutex":
        holder = Mutex(db.client(), table, owner="holder", expire_after=SHORT_LEASE * 2,
                       wall_clock=lambda: time.time() + skew)  # fmt: skip
        waiter = Mutex(db.client(), table, owner="waiter", expire_after=SHORT_LEASE * 2)
        holder.acquire(resource)
        give_up = time.monotonic() + 4 * SHORT_LEASE / 2
        while time.monotonic() < give_up:
            if waiter.acquire(resource):
                return False
            time.sleep(0.1)
        return True
    cls = LeaseLockClient if lock == "LeaseLockClient" else FifoLock
    with cls(db.client(), table, owner="holder", wall_clock=lambda: time.time() + skew,
             **options) as holder_client:  # fmt: skip
        held = holder_client.acquire(resource)
        waiter = cls(db.client(), table, owner="waiter", **options)
        with waiter, suppress(LockNotGrantedError):
            waiter.acquire(resource, wait=2 * SHORT_LEASE).release()
        return held.is_held() and held.heartbeat()


LOCKS = ("LeaseLockClient", "FifoLock", "Mutex")


def contention_table(kind: Kind, rounds: list[list[Contended]], takeover: dict[str, float],
                     paused: dict[str, bool], skew: dict[str, bool]) -> str:  # fmt: skip
    """Issue 13's table: medians over the rounds, each lock's throughput relative to
    LeaseLockClient's in the same round."""

    def median_of(lock: str, pick: Callable[[Contended, Contended], float]) -> float:
        values = []
        for one in rounds:
            by_lock = {c.lock: c for c in one}
            values.append(pick(by_lock[lock], by_lock["LeaseLockClient"]))
        return statistics.median(values)

    rows = []
    metrics: list[tuple[str, Callable[[Contended, Contended], float], str]] = [
        ("requests per acquisition", lambda c, _: c.requests, "{:.1f}"),
        ("acquisitions/s vs LeaseLockClient", lambda c, lease: c.rate / lease.rate, "{:.2f}"),
        ("fairness (fewest/most)", lambda c, _: c.fairness, "{:.2f}"),
        ("longest wait (s)", lambda c, _: c.longest_wait, "{:.2f}"),
    ]
    for name, pick, fmt in metrics:
        rows.append([name, *(fmt.format(median_of(lock, pick)) for lock in LOCKS), PEERS[name]])
    lease_rate = median_of("LeaseLockClient", lambda c, _: c.rate)
    rows.append(["acquisitions/s (LeaseLockClient)", f"{lease_rate:.1f}", "", "", ""])
    name = "dead holder taken after (s, 2 s lease)"
    rows.append([name, *(f"{takeover[lock]:.2f}" for lock in LOCKS), PEERS[name]])
    name = "paused holder's late write refused"
    rows.append([name, *("yes" if paused[lock] else "no" for lock in LOCKS), PEERS[name]])
    name = "live lock kept under 60 s skew"
    rows.append([name, *("yes" if skew[lock] else "no" for lock in LOCKS), PEERS[name]])
    text = render(
        f"Contention: {THREADS} threads x {ACQUIRES} acquires, medians of {len(rounds)} "
        f"round(s) ({kind})",
        ["measured", *LOCKS, "best peer (issue 13, dynalite)"],
        rows,
    )
    kinds = sorted({k for one in rounds for c in one for k in c.by_kind})
    per_kind = [
        [k, *(f"{median_of(lock, lambda c, _, k=k: c.by_kind.get(k, 0) / c.acquisitions):.2f}"
              for lock in LOCKS)]
        for k in kinds
    ]  # fmt: skip
    return (
        text
        + "\n\n"
        + render(
            f"Requests per acquisition by kind, medians ({kind})", ["request", *LOCKS], per_kind
        )
    )


def run_contention(db: LocalDynamo, table: str, rounds: int, threads: int = THREADS,
                   acquires: int = ACQUIRES) -> str:  # fmt: skip
    measured = [
        [measure_contention(db, table, lock, threads, acquires) for lock in LOCKS]
        for _ in range(rounds)
    ]
    takeover = {lock: measure_dead_holder(db, table, lock) for lock in LOCKS}
    paused = {lock: measure_paused_holder(db, table, lock) for lock in LOCKS}
    skew = {lock: all(measure_skew(db, table, lock, s) for s in (-60.0, 60.0)) for lock in LOCKS}
    return contention_table(db.kind, measured, takeover, paused, skew)


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


def run_backend(
    db: LocalDynamo, hold: float, rounds: int = 0, name: Callable[[str], str] = unique_name
) -> str:
    client = db.client()
    table = name("locks")
    create_lock_table(client, table)
    ops = measure_uncontended(client, table)
    handoff = measure_fifo_handoff(db, table)
    real = measure_fifo_real(db, table, hold) if hold > 0 else None
    text = report(db.kind, ops, handoff, real)
    if rounds > 0:
        text += "\n\n" + run_contention(db, table, rounds)
    return text


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.locks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--hold", type=float, default=2.0, help="seconds the real-time holder keeps it (0: skip)"
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="contention rounds, medians reported (0: skip)"
    )
    backend_argument(parser)
    args = parser.parse_args(argv)
    if args.hold < 0:
        parser.error("--hold must be >= 0")
    if args.rounds < 0:
        parser.error("--rounds must be >= 0")
    kinds = chosen_kinds(args)
    with emulators(kinds, own_process=True) as dbs:
        for kind in kinds:
            out(run_backend(dbs[kind], args.hold, args.rounds) + "\n")


if __name__ == "__main__":
    main()
