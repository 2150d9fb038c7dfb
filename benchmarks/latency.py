"""Round trips of a transaction: serial completion against the bounded pool.

Every DynamoDB call is delayed by a fixed time (a botocore ``before-send``
handler that sleeps), so wall time is dominated by round trips on the critical
path: wall time / delay estimates them. The critical path is also counted
exactly: the longest chain of calls each starting after the previous one ended
(calls that overlap ran concurrently), which does not depend on the emulator's
speed.

The N requests of a conversational transaction are sequential by the API (each
returns its result before the caller sends the next), so only ``commit`` (and
``rollback``), whose per-item steps are independent, can overlap.

Usage::

    python -m benchmarks.latency                     # 25 items, 20 ms, both emulators
    python -m benchmarks.latency --items 10 --delay 0.01 --backend moto
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

from ddbtx import TransactionManager
from ddbtx.instrumentation import count_requests
from ddbtx.local import Kind

from ._common import (
    Tables,
    backend_argument,
    chosen_kinds,
    create_tables,
    emulators,
    render,
    seed,
    unique_name,
)
from .requests import issue, request_params

DEFAULT_WORKERS = 8  # TransactionManager's default max_workers


class Calls:
    """Start and end (perf_counter) of every API call a client makes, from any thread."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        self._local = threading.local()
        self._lock = threading.Lock()

    def start(self, **_: Any) -> None:
        self._local.start = time.perf_counter()

    def end(self, **_: Any) -> None:
        span = (self._local.start, time.perf_counter())
        with self._lock:
            self.spans.append(span)

    def chain(self, since: float = 0.0, until: float = float("inf")) -> int:
        """Longest sequence of calls each starting after the previous ended.

        Calls that overlap in time ran concurrently, so this is the number of
        round trips on the critical path, counted rather than timed.
        """
        spans = sorted((s for s in self.spans if s[0] >= since and s[1] <= until), key=_end)
        depth: list[int] = []
        for i, (start, _) in enumerate(spans):
            before = [depth[j] for j in range(i) if spans[j][1] <= start]
            depth.append(1 + max(before, default=0))
        return max(depth, default=0)


def _end(span: tuple[float, float]) -> float:
    return span[1]


@contextmanager
def delayed(client: Any, seconds: float) -> Iterator[Calls]:
    """Sleep ``seconds`` before every HTTP attempt (a simulated round trip); record calls."""

    def wait(**_: Any) -> None:
        time.sleep(seconds)

    calls = Calls()
    events = client.meta.events
    handlers = [
        ("before-send.dynamodb", wait),
        ("before-call.dynamodb", calls.start),
        ("after-call.dynamodb", calls.end),
    ]
    for event, handler in handlers:
        events.register(event, handler)
    try:
        yield calls
    finally:
        for event, handler in handlers:
            events.unregister(event, handler)


@dataclass(frozen=True)
class Timing:
    """Wall times (seconds), exact requests and critical-path calls of one transaction."""

    workers: int
    batch: bool  # the updates went in one tx.write_all call
    commit: float
    total: float
    commit_requests: int
    total_requests: int
    commit_chain: int
    total_chain: int


def timed_transaction(
    client: Any, tables: Tables, items: int, workers: int, delay: float, *, batch: bool = False
) -> Timing:
    """begin + ``items`` updates (one by one, or in one ``write_all``) + commit + delete,
    with every call delayed."""
    tm = TransactionManager(client, tables.tx, tables.images, max_workers=workers)
    tm.key_names(tables.data)  # warm-up: the key schema is cached per manager
    keys = [f"lat-{uuid.uuid4().hex[:8]}-{i}" for i in range(items)]
    seed(client, tables.data, keys)
    with delayed(client, delay) as calls, count_requests(client) as all_counts:
        start = time.perf_counter()
        tx = tm.begin()
        if batch:
            tx.write_all([dict([request_params("update", tables.data, pk)]) for pk in keys])
        else:
            for pk in keys:
                issue(tx, "update", tables.data, pk)
        commit_start = time.perf_counter()
        with count_requests(client) as commit_counts:
            tx.commit()
        commit_end = time.perf_counter()
        tx.delete()
        end = time.perf_counter()
    tm.protocol.close()
    return Timing(
        workers,
        batch,
        commit_end - commit_start,
        end - start,
        commit_counts.total,
        all_counts.total,
        calls.chain(commit_start, commit_end),
        calls.chain(),
    )


def measure(
    client: Any,
    items: int,
    delay: float,
    worker_settings: Sequence[int],
    name: Callable[[str], str] = unique_name,
) -> list[Timing]:
    """One transaction per worker setting, then one ``write_all`` with the largest,
    in the same run on the same tables."""
    tables = create_tables(client, name)
    timings = [timed_transaction(client, tables, items, w, delay) for w in worker_settings]
    most = max(worker_settings)
    return [*timings, timed_transaction(client, tables, items, most, delay, batch=True)]


def table(kind: Kind, items: int, delay: float, timings: Sequence[Timing]) -> str:
    rows = [
        [
            "write_all" if t.batch else "one by one",
            t.workers,
            t.commit_requests,
            f"{t.commit * 1000:.0f}",
            f"{t.commit / delay:.1f}",
            t.commit_chain,
            t.total_requests,
            f"{t.total * 1000:.0f}",
            f"{t.total / delay:.1f}",
            t.total_chain,
        ]
        for t in timings
    ]
    serial, pooled, batch = timings[0], timings[-2], timings[-1]
    title = (
        f"Round trips, {items}-update transaction, {delay * 1000:.0f} ms added per call ({kind})"
    )
    headers = ["updates sent", "max_workers", "commit reqs", "ms", "ms/delay", "sequential"]
    headers += ["tx reqs", "ms", "ms/delay", "sequential"]
    text = render(title, headers, rows)
    text += (
        f"\ncommit wall-time speed-up, max_workers={pooled.workers} vs {serial.workers}: "
        f"{serial.commit / pooled.commit:.2f}x; whole transaction: "
        f"{serial.total / pooled.total:.2f}x; whole transaction with write_all: "
        f"{serial.total / batch.total:.2f}x"
        "\n(sequential = calls on the critical path, counted from call start/end times;"
        " requests sent one by one are sequential by the API: each returns before the"
        " next is sent; write_all sends them together)"
    )
    return text


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.latency",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--items", type=int, default=25, help="updates per transaction")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds added per call")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="pool size")
    backend_argument(parser)
    args = parser.parse_args(argv)
    if args.items < 1 or args.delay <= 0 or args.workers < 2:
        parser.error("--items >= 1, --delay > 0 and --workers >= 2 are required")
    kinds = chosen_kinds(args)
    with emulators(kinds) as dbs:
        for kind in kinds:
            timings = measure(dbs[kind].client(), args.items, args.delay, (1, args.workers))
            out(table(kind, args.items, args.delay, timings) + "\n")


if __name__ == "__main__":
    main()
