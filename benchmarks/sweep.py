"""Items one sweep reads: proportional to the stuck work, not to the transactions table.

Issue 7, target 5: with 20,000 young or completed records and 100 stale ones,
one :meth:`Sweeper.run` reads at most 3 items per stale record plus a
constant, and a full-table sweep (:meth:`Sweeper.run_full`), when asked for,
runs in parallel segments.

The transactions table, on each emulator:

*stale records* (``--stale``, 100)
    Transfers made through the real protocol: ``begin``, two updates of
    seeded accounts, then abandoned. Their coordinator's injected clock stands
    an hour before the sweeper's, so they are pending, older than the rollback
    age, and both their items really are locked and written (with the
    pre-write image in the item).
*records that need no work* (``--records``, 20,000)
    A quarter young pending, half committed and a quarter rolled back, the
    decided ones completed but younger than the delete age. Two real
    transactions of each kind are run first (the pending ones left open); the
    rest are clones of their TX record rows, written with BatchWriteItem under
    fresh transaction ids, with ``ts`` spread over the last 50 seconds
    (pending) or 23 hours (completed), ``sw`` = "<P|F>#<shard of the new id>"
    and, for the completed, ``ttl`` as the protocol writes them. Cloned pending
    records name their template's items without locking them; being young,
    no sweep touches them. The bulk load is not counted.

The sweeper is configured as the janitor Lambda is by default
(:class:`ddbtx.sweeper.JanitorSettings`: roll back after 60 s, delete after a
day, page budget 50, cursor row kept), with the data table in
``DATA_TABLES``. After an uncounted warm-up sweep (it writes the cursor row),
each measured sweep is counted exactly with botocore hooks
(:func:`ddbtx.instrumentation.count_requests`): requests by operation, and
items read, as DynamoDB bills them (a Query's or Scan's ``ScannedCount``, a
``GetItem`` that found its item).

*idle*: one sweep before the stale records exist, on the same records and data
table: the constant. It holds the cursor row, the scan pass's read of the images
and data tables (for stray locks; page-budgeted, and proportional to those
tables, not to the transactions table) and the records of the locks that scan
finds (here the young pending templates'); the index pass reads nothing.
*stale*: one sweep with them; afterwards every stale record must be rolled
back and completed, and every account unlocked with its balance restored
(checked, else the benchmark fails). Items read per stale record =
(stale - idle) / stale. The baseline is a plain Scan of the whole
transactions table, what a scan-based sweep reads on every run.

``run_full(segments=k)`` is then counted for k = 1 and 4 on the same table
(nothing left to do: its cost is the scan), with a fixed delay added to every
call (a ``before-send`` sleep, as in :mod:`benchmarks.latency`). Reported:
requests, items read, the Scan segments and threads seen, the round trips on
the critical path (counted from call start and end times), and the wall-time
ratio of segments=1 to segments=4 in the same run.

Usage::

    python -m benchmarks.sweep                      # 20,000 + 100 stale, both emulators
    python -m benchmarks.sweep --records 2000 --stale 20 --backend moto
    python -m benchmarks.sweep --stray-locks        # the data table: see benchmarks.stray_locks
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ddbtx import TransactionManager
from ddbtx import schema as s
from ddbtx._stores.completion import new_tx_id, shard_of
from ddbtx.instrumentation import RequestCounts, count_requests
from ddbtx.local import Kind
from ddbtx.sweeper import JanitorSettings, Sweeper

from . import stray_locks
from ._common import (
    Tables,
    backend_argument,
    chosen_kinds,
    create_tables,
    emulators,
    key,
    render,
    scan_all,
    seed,
    unique_name,
    write_batch,
)
from .latency import delayed

#: The sweeper's clock (2030); every other clock is set relative to it.
NOW = 1_900_000_000.0
#: How long before the sweep the stale transfers were abandoned.
STALE_AGE = 3600.0
#: The bulk's mix: (template kind, share); templates are run for real, the rest cloned.
MIX = (("pending", 1), ("committed", 2), ("rolled_back", 1))
TEMPLATES_PER_KIND = 2
TEMPLATES = len(MIX) * TEMPLATES_PER_KIND
#: Target: items read per stale record, on top of the idle sweep's.
TARGET_PER_STALE = 3
BALANCE = 100
BATCH = 25  # BatchWriteItem's limit
FULL_SEGMENTS = (1, 4)


@dataclass(frozen=True)
class Counted:
    """Requests and items read of one measured call."""

    requests: dict[str, int]
    items: dict[str, int]

    @classmethod
    def of(cls, counts: RequestCounts) -> Counted:
        return cls(dict(counts.by_operation), dict(counts.items_read_by_operation))

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    @property
    def items_read(self) -> int:
        return sum(self.items.values())


@dataclass(frozen=True)
class FullSweep:
    """One counted and timed ``run_full(segments)``."""

    segments: int
    counted: Counted
    scan_segments: frozenset[tuple[int, int]]  # (Segment, TotalSegments) of the TX table scans
    scan_threads: int  # distinct threads those scans ran on
    chain: int  # calls on the critical path
    wall: float  # seconds, with the delay


@dataclass
class SweepResult:
    kind: Kind
    records: int
    stale: int
    idle: Counted
    swept: Counted
    rolled_back: int
    stuck: int
    baseline: Counted  # a plain Scan of the whole transactions table
    table_rows: int
    locks_left: int  # locks held on the stale transfers' accounts after the sweep
    full: list[FullSweep] = field(default_factory=list)
    delay: float = 0.0

    @property
    def constant(self) -> int:
        return self.idle.items_read

    @property
    def per_stale(self) -> float:
        return (self.swept.items_read - self.idle.items_read) / self.stale

    @property
    def meets_target(self) -> bool:
        return self.swept.items_read <= TARGET_PER_STALE * self.stale + self.constant


# -- the table ---------------------------------------------------------------------


def _update(tx: Any, table: str, pk: str, amount: int) -> None:
    tx.update_item(
        TableName=table,
        Key=key(pk),
        UpdateExpression="SET balance = balance + :n",
        ExpressionAttributeValues={":n": {"N": str(amount)}},
    )


def transfer(tm: TransactionManager, table: str, source: str, target: str) -> Any:
    """Two updates in a transaction left pending; returns it."""
    tx = tm.begin()
    _update(tx, table, source, -10)
    _update(tx, table, target, 10)
    return tx


def manager(client: Any, tables: Tables, at: float) -> TransactionManager:
    """A coordinator whose clock stands still at ``at``."""
    return TransactionManager(
        client, tables.tx, tables.images, clock=lambda: at, key_schemas={tables.data: ("pk",)}
    )


def run_templates(client: Any, tables: Tables) -> dict[str, list[str]]:
    """Real transactions of each bulk kind, five seconds before the sweep; their ids."""
    tm = manager(client, tables, NOW - 5)
    ids: dict[str, list[str]] = {kind: [] for kind, _ in MIX}
    for kind, _ in MIX:
        for i in range(TEMPLATES_PER_KIND):
            source, target = f"tpl-{kind}-{i}-a", f"tpl-{kind}-{i}-b"
            seed(client, tables.data, [source, target], BALANCE)
            tx = transfer(tm, tables.data, source, target)
            if kind == "committed":
                tx.commit()
            elif kind == "rolled_back":
                tx.rollback()
            ids[kind].append(tx.id)
    tm.protocol.close()
    return ids


def clone(template: dict[str, Any], kind: str, rng: random.Random) -> dict[str, Any]:
    """A copy of a template's header row under a fresh id, as the protocol would write it."""
    pending = kind == "pending"
    age_ms = rng.randrange(1, 50_000 if pending else 23 * 3_600_000)
    ts_ms = int(NOW * 1000) - age_ms
    tx_id = new_tx_id(lambda: ts_ms * 1_000_000)
    row = dict(template)
    row[s.TX_PK] = {"S": tx_id}
    row[s.TX_UPDATED] = {"N": str(ts_ms)}
    tag = s.STATE_PENDING if pending else s.STATE_COMPLETED_TAG
    row[s.TX_SWEEP_KEY] = {"S": f"{tag}#{shard_of(tx_id)}"}
    if not pending:
        # complete writes ttl (seconds) = its clock + completed_ttl, in the same update as ts.
        row[s.TX_TTL] = {"N": str(ts_ms // 1000 + 86_400)}
    return row


def load_bulk(client: Any, tables: Tables, records: int, seed_value: int = 7) -> None:
    """``records`` TX records that need no work: the templates plus clones of them."""
    ids = run_templates(client, tables)
    templates = {
        kind: [
            client.get_item(
                TableName=tables.tx,
                Key={s.TX_PK: {"S": tx_id}, s.TX_SK: {"S": s.TX_HEADER_SK}},
                ConsistentRead=True,
            )["Item"]
            for tx_id in tx_ids
        ]
        for kind, tx_ids in ids.items()
    }
    rng = random.Random(seed_value)
    kinds = [kind for kind, share in MIX for _ in range(share)]
    clones = max(0, records - TEMPLATES)
    rows = []
    for i in range(clones):
        kind = kinds[i % len(kinds)]
        rows.append(clone(rng.choice(templates[kind]), kind, rng))
    batches = [rows[i : i + BATCH] for i in range(0, len(rows), BATCH)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda batch: write_batch(client, tables.tx, batch), batches))


def abandon_stale(client: Any, tables: Tables, stale: int) -> list[str]:
    """``stale`` transfers abandoned ``STALE_AGE`` before the sweep; their ids."""
    tm = manager(client, tables, NOW - STALE_AGE)
    ids = [transfer(tm, tables.data, f"stale-{i}-a", f"stale-{i}-b").id for i in range(stale)]
    tm.protocol.close()
    return ids


def stale_accounts(stale: int) -> list[str]:
    return [f"stale-{i}-{side}" for i in range(stale) for side in "ab"]


def check_recovered(client: Any, tables: Tables, ids: Sequence[str], stale: int) -> int:
    """Every stale record rolled back and completed, every account restored; locks left."""
    for tx_id in ids:
        row = client.get_item(
            TableName=tables.tx,
            Key={s.TX_PK: {"S": tx_id}, s.TX_SK: {"S": s.TX_HEADER_SK}},
            ConsistentRead=True,
        )["Item"]
        if row[s.TX_STATE]["S"] != s.STATE_ROLLED_BACK or row.get(s.TX_COMPLETED) != {"BOOL": True}:
            raise RuntimeError(f"stale transaction {tx_id} was not rolled back and completed")
    accounts = set(stale_accounts(stale))
    items = [i for i in scan_all(client, tables.data) if i["pk"]["S"] in accounts]
    if len(items) != len(accounts):
        raise RuntimeError("a stale transfer's account is missing")
    restored = [i for i in items if i["balance"] == {"N": str(BALANCE)}]
    if len(restored) != len(items):
        raise RuntimeError(f"{len(items) - len(restored)} accounts were not restored")
    return sum(1 for i in items if any(map(s.is_held_attribute, i)))


# -- measuring ---------------------------------------------------------------------


@contextmanager
def scan_segments(client: Any, table: str) -> Iterator[tuple[set[tuple[int, int]], set[str]]]:
    """The (Segment, TotalSegments) of every Scan of ``table``, and the threads they ran on."""
    segments: set[tuple[int, int]] = set()
    threads: set[str] = set()
    lock = threading.Lock()

    def seen(params: dict[str, Any], **_: Any) -> None:
        if params.get("TableName") == table and "TotalSegments" in params:
            with lock:
                segments.add((params["Segment"], params["TotalSegments"]))
                threads.add(threading.current_thread().name)

    events = client.meta.events
    events.register("before-parameter-build.dynamodb.Scan", seen)
    try:
        yield segments, threads
    finally:
        events.unregister("before-parameter-build.dynamodb.Scan", seen)


def counted_sweep(sweeper: Sweeper, settings: JanitorSettings) -> tuple[Counted, Any]:
    """One ``run()`` as the janitor Lambda calls it, counted."""
    with count_requests(sweeper.client) as counts:
        report = sweeper.run(page_budget=settings.page_budget)
    if not report.exhausted or report.errors:
        raise RuntimeError(f"the sweep did not complete cleanly: {report.to_dict()}")
    return Counted.of(counts), report


def full_sweep(sweeper: Sweeper, table: str, segments: int, delay: float) -> FullSweep:
    """``run_full(segments)`` counted, with ``delay`` added to every call."""
    client = sweeper.client
    with (
        scan_segments(client, table) as (seen, threads),
        delayed(client, delay) as calls,
        count_requests(client) as counts,
    ):
        start = time.perf_counter()
        report = sweeper.run_full(segments=segments)
        wall = time.perf_counter() - start
    if not report.exhausted or report.errors:
        raise RuntimeError(f"the full sweep did not complete cleanly: {report.to_dict()}")
    return FullSweep(
        segments, Counted.of(counts), frozenset(seen), len(threads), calls.chain(), wall
    )


def measure(
    client: Any,
    kind: Kind,
    records: int,
    stale: int,
    delay: float,
    name: Callable[[str], str] = unique_name,
) -> SweepResult:
    """Load the table, then count the idle and the stale sweep, a plain scan and run_full."""
    tables = create_tables(client, name)
    # Every account exists before the idle sweep, so both sweeps scan the same data table.
    seed(client, tables.data, stale_accounts(stale), BALANCE)
    load_bulk(client, tables, records)
    settings = JanitorSettings(tables.tx, tables.images, data_tables=(tables.data,))
    sweeper = settings.sweeper(
        settings.manager(client, clock=lambda: NOW, key_schemas={tables.data: ("pk",)})
    )
    counted_sweep(sweeper, settings)  # warm-up: writes the cursor row both measured sweeps read
    idle, _ = counted_sweep(sweeper, settings)
    ids = abandon_stale(client, tables, stale)
    swept, report = counted_sweep(sweeper, settings)
    locks_left = check_recovered(client, tables, ids, stale)
    with count_requests(client) as counts:
        rows = len(scan_all(client, tables.tx))
    baseline = Counted.of(counts)
    full = [full_sweep(sweeper, tables.tx, k, delay) for k in FULL_SEGMENTS]
    sweeper.tm.protocol.close()
    return SweepResult(
        kind,
        records,
        stale,
        idle,
        swept,
        report.rolled_back,
        report.stuck,
        baseline,
        rows,
        locks_left,
        full,
        delay,
    )


# -- reporting ---------------------------------------------------------------------


def _ops(counts: dict[str, int]) -> str:
    return ", ".join(f"{op} {n}" for op, n in sorted(counts.items())) or "-"


def _per_stale(result: SweepResult) -> str:
    ops = sorted(set(result.swept.items) | set(result.idle.items))
    parts = []
    for op in ops:
        extra = result.swept.items.get(op, 0) - result.idle.items.get(op, 0)
        if extra:
            parts.append(f"{op} {extra / result.stale:g}")
    return ", ".join(parts) or "-"


def report(r: SweepResult) -> str:
    title = (
        f"One Sweeper.run() on {r.records:,} records that need no work + {r.stale} stale ({r.kind})"
    )
    rows = [
        [
            "idle (0 stale)",
            0,
            r.idle.total_requests,
            _ops(r.idle.requests),
            r.idle.items_read,
            _ops(r.idle.items),
        ],
        [
            f"{r.stale} stale",
            r.rolled_back,
            r.swept.total_requests,
            _ops(r.swept.requests),
            r.swept.items_read,
            _ops(r.swept.items),
        ],
        [
            "plain Scan (baseline)",
            "-",
            r.baseline.total_requests,
            _ops(r.baseline.requests),
            r.baseline.items_read,
            _ops(r.baseline.items),
        ],
    ]
    headers = ["sweep", "rolled back", "requests", "by operation", "items read", "by operation"]
    text = render(title, headers, rows)
    target = TARGET_PER_STALE * r.stale + r.constant
    verdict = "ok" if r.meets_target else "MISSED"
    text += (
        f"\nitems read per stale record: ({r.swept.items_read} - {r.idle.items_read}) / {r.stale}"
        f" = {r.per_stale:.2f} ({_per_stale(r)}); target <= {TARGET_PER_STALE}"
        f"\nconstant (idle sweep): {r.constant} items; target total <= {TARGET_PER_STALE} x"
        f" {r.stale} + {r.constant} = {target}: {r.swept.items_read} {verdict}"
        f"\nbaseline: a plain Scan of the transactions table reads {r.baseline.items_read:,} items"
        f" ({r.table_rows:,} rows) on every run: {r.baseline.items_read / r.swept.items_read:.0f}x"
        f" the stale sweep"
        f"\nafter the sweep: {r.rolled_back} of {r.stale} rolled back and completed, every account"
        f" restored, {r.locks_left} locks left"
    )
    if r.full:
        text += "\n\n" + full_report(r)
    return text


def full_report(r: SweepResult) -> str:
    rows = [
        [
            f.segments,
            f.counted.total_requests,
            _ops(f.counted.requests),
            f.counted.items_read,
            len(f.scan_segments),
            f.scan_threads,
            f.chain,
            f"{f.wall * 1000:.0f}",
            f"{f.wall / r.delay:.1f}",
        ]
        for f in r.full
    ]
    title = (
        f"Sweeper.run_full(segments=k) on the same {r.table_rows:,} rows, nothing left to do,"
        f" {r.delay * 1000:.0f} ms added per call ({r.kind})"
    )
    headers = ["k", "requests", "by operation", "items read", "segments", "threads"]
    headers += ["sequential", "ms", "ms/delay"]
    text = render(title, headers, rows)
    one, most = r.full[0], r.full[-1]
    # In the one-segment run calls never overlap, so what the delay does not explain
    # is the emulator's own time per call.
    serving = (one.wall - one.chain * r.delay) / one.counted.total_requests
    text += (
        f"\nwall-time speed-up, segments={most.segments} vs {one.segments}:"
        f" {one.wall / most.wall:.2f}x; calls on the critical path {one.chain} -> {most.chain}"
        f" ({one.chain / most.chain:.2f}x)"
        f"\nthe emulator's own time per call: {serving * 1000:.0f} ms against the"
        f" {r.delay * 1000:.0f} ms added; it serves one request at a time, so only the added"
        " delay can overlap"
        "\n(sequential = calls on the critical path, counted from call start/end times;"
        " segments and threads: distinct Scan segments of the transactions table and the"
        " threads that sent them)"
    )
    return text


def main(
    argv: Sequence[str] | None = None, out: Callable[[str], None] = print
) -> list[SweepResult]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--records", type=int, default=20_000, help="records that need no work (default 20000)"
    )
    parser.add_argument("--stale", type=int, default=100, help="stale records (default 100)")
    parser.add_argument(
        "--delay", type=float, default=0.02, help="seconds added per call in run_full"
    )
    backend_argument(parser)
    args = parser.parse_args(argv)
    if args.records < TEMPLATES or args.stale < 1:
        parser.error(f"--records >= {TEMPLATES} and --stale >= 1 are required")
    if args.delay <= 0:
        parser.error("--delay must be > 0")
    kinds = chosen_kinds(args)
    # The sweeper logs a warning per stuck transaction it finds: here they are the point.
    logging.getLogger("ddbtx.sweeper").setLevel(logging.ERROR)
    results = []
    with emulators(kinds) as dbs:
        for kind in kinds:
            result = measure(dbs[kind].client(), kind, args.records, args.stale, args.delay)
            results.append(result)
            out(report(result) + "\n")
    return results


if __name__ == "__main__":
    # The data-table scenario has its own options (see benchmarks.stray_locks).
    if "--stray-locks" in sys.argv[1:]:
        stray_locks.main([a for a in sys.argv[1:] if a != "--stray-locks"])
    else:
        main()
