"""Items the stray-lock pass reads: proportional to the locked items, not to the data table.

Run as ``python -m benchmarks.sweep --stray-locks`` (issue 14, "Scale").

Two data tables with the same content, one with the sparse lock index
(:data:`ddbtx.schema.LOCK_INDEX`, what :func:`ddbtx.tables.create_data_table`
and the CDK stack create) and one without (a table brought through
``dataTables`` before ``ddbtx add-lock-index`` ran on it):

*items* (``--items``, 100,000)
    Plain accounts, loaded with BatchWriteItem (not counted).
*stray locks* (``--stray``, 10)
    Transfers made through the real protocol (each updates one account, so the
    item holds the lock and its pre-write image), whose TX records are then
    deleted, as a lost record leaves them.

The sweeper is configured as the janitor Lambda is by default
(:class:`ddbtx.sweeper.JanitorSettings`: page budget 50 pages of 100 items per
run, cursor row kept) with that one data table. It runs until a run completes
(its cursor back at the start); every run is counted with botocore hooks
(:func:`ddbtx.instrumentation.count_requests`): requests, and items read as
DynamoDB bills them (a Scan's ``ScannedCount``, a GetItem that found its item).
Afterwards every account must be unlocked with its balance restored (checked,
else the benchmark fails).

The default backend is dynalite: moto's Scan walks the whole table again for
every page, so one pass over 100,000 items costs it ~1,000 full walks (tens of
minutes); ``--backend moto`` with ``--items`` in the thousands works.

Usage::

    python -m benchmarks.sweep --stray-locks                  # 100,000 items, 10 stray, dynalite
    python -m benchmarks.sweep --stray-locks --items 2000 --backend both
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from ddbtx import TransactionManager
from ddbtx import schema as s
from ddbtx.instrumentation import count_requests
from ddbtx.local import KINDS, Kind
from ddbtx.sweeper import JanitorSettings
from ddbtx.tables import create_data_table

from ._common import DATA_KEY, emulators, key, render, scan_all, unique_name, write_batch

BALANCE = 100
BATCH = 25  # BatchWriteItem's limit
#: The coordinators' and the sweeper's clock; stray records are gone, so age plays no part.
NOW = 1_900_000_000.0
MAX_RUNS = 1_000


@dataclass(frozen=True)
class Pass:
    """Sweeper runs until one completed, on one data table."""

    indexed: bool
    items_read: list[int]  # per run
    requests: list[int]  # per run
    released: int
    wall: float  # seconds, all runs

    @property
    def runs(self) -> int:
        return len(self.items_read)

    @property
    def total_read(self) -> int:
        return sum(self.items_read)


@dataclass(frozen=True)
class StrayLockResult:
    kind: Kind
    items: int
    stray: int
    page_budget: int
    page_size: int
    indexed: Pass
    scanned: Pass
    load_seconds: float
    total_seconds: float


def account(i: int) -> str:
    return f"acct-{i:07d}"


def stray_accounts(items: int, stray: int) -> list[str]:
    """Accounts spread evenly over the table, so the scan meets them all along its pass."""
    step = items // stray
    return [account(i * step) for i in range(stray)]


def load(client: Any, table: str, items: int) -> None:
    rows = [{**key(account(i)), "balance": {"N": str(BALANCE)}} for i in range(items)]
    batches = [rows[i : i + BATCH] for i in range(0, len(rows), BATCH)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda batch: write_batch(client, table, batch), batches))


def leave_stray_locks(tm: TransactionManager, table: str, accounts: Sequence[str]) -> None:
    """One transaction per account updates it, then loses its TX record."""
    for pk in accounts:
        tx = tm.begin()
        tx.update_item(
            TableName=table,
            Key=key(pk),
            UpdateExpression="SET balance = balance - :n",
            ExpressionAttributeValues={":n": {"N": "10"}},
        )
        tm.client.delete_item(
            TableName=tm.transactions_table, Key=tm.protocol.records.header_key(tx.id)
        )


def check_restored(client: Any, table: str, accounts: Sequence[str]) -> None:
    wanted = set(accounts)
    items = [i for i in scan_all(client, table) if i[DATA_KEY]["S"] in wanted]
    bad = [
        i[DATA_KEY]["S"]
        for i in items
        if i["balance"] != {"N": str(BALANCE)} or any(map(s.is_held_attribute, i))
    ]
    if len(items) != len(wanted) or bad:
        raise RuntimeError(f"stray-locked accounts not restored and unlocked: {bad}")


def sweep_pass(settings: JanitorSettings, client: Any, table: str, indexed: bool) -> Pass:
    """Run the sweeper as the janitor Lambda would until a run completes."""
    tm = settings.manager(client, clock=lambda: NOW, key_schemas={table: (DATA_KEY,)})
    sweeper = settings.sweeper(tm)
    read: list[int] = []
    requests: list[int] = []
    released = 0
    start = time.perf_counter()
    while True:
        if len(read) >= MAX_RUNS:
            raise RuntimeError("the sweep made no progress")
        with count_requests(client) as counts:
            report = sweeper.run(page_budget=settings.page_budget)
        if report.errors:
            raise RuntimeError(f"the sweep reported errors: {report.to_dict()}")
        read.append(counts.items_read)
        requests.append(counts.total)
        released += report.locks_released
        if report.exhausted:
            break
    wall = time.perf_counter() - start
    tm.protocol.close()
    return Pass(indexed, read, requests, released, wall)


def measure(
    client: Any,
    kind: Kind,
    items: int,
    stray: int,
    name: Callable[[str], str] = unique_name,
    *,
    page_budget: int | None = None,
    page_size: int | None = None,
) -> StrayLockResult:
    """Load both tables, leave the stray locks, then count a sweep pass over each.

    ``page_budget`` and ``page_size``: instead of the janitor's defaults.
    """
    started = time.perf_counter()
    accounts = stray_accounts(items, stray)
    passes: dict[bool, Pass] = {}
    load_seconds = 0.0
    for indexed in (True, False):
        tag = "idx" if indexed else "scan"
        tx, images, data = name(f"tx-{tag}"), name(f"img-{tag}"), name(f"data-{tag}")
        TransactionManager(client, tx, images).create_tables()
        create_data_table(client, data, partition_key=DATA_KEY, lock_index=indexed)
        loading = time.perf_counter()
        load(client, data, items)
        load_seconds += time.perf_counter() - loading
        tm = TransactionManager(client, tx, images, clock=lambda: NOW)
        leave_stray_locks(tm, data, accounts)
        settings = JanitorSettings(tx, images, data_tables=(data,))
        settings = replace(
            settings,
            page_budget=page_budget or settings.page_budget,
            page_size=page_size or settings.page_size,
        )
        passes[indexed] = sweep_pass(settings, client, data, indexed)
        check_restored(client, data, accounts)
        if passes[indexed].released != stray:
            raise RuntimeError(f"released {passes[indexed].released} locks, not {stray}")
    return StrayLockResult(
        kind,
        items,
        stray,
        settings.page_budget,
        settings.page_size,
        passes[True],
        passes[False],
        load_seconds,
        time.perf_counter() - started,
    )


def report(r: StrayLockResult) -> str:
    title = (
        f"Stray-lock pass on a data table of {r.items:,} items with {r.stray} stray locks"
        f" ({r.kind}; janitor: {r.page_budget} pages of {r.page_size} per run)"
    )
    rows = [
        [
            "with the lock index" if p.indexed else "without (table scan)",
            p.runs,
            f"{p.items_read[0]:,}",
            f"{p.total_read:,}",
            f"{p.total_read / r.stray:,.1f}",
            f"{sum(p.requests):,}",
            p.released,
            f"{p.wall:.1f}",
        ]
        for p in (r.indexed, r.scanned)
    ]
    headers = ["data table", "runs", "items read, 1st run", "items read, all runs"]
    headers += ["per stray lock", "requests", "released", "s"]
    text = render(title, headers, rows)
    ratio = r.scanned.total_read / r.indexed.total_read
    text += (
        f"\nitems read to release every stray lock: {r.indexed.total_read:,} with the index vs"
        f" {r.scanned.total_read:,} without ({ratio:,.0f}x), in {r.indexed.runs} run(s) vs"
        f" {r.scanned.runs}"
        f"\nafter each pass: all {r.stray} accounts unlocked with their balance restored"
        f"\ntook {r.total_seconds:.0f} s in all, {r.load_seconds:.0f} s of it loading"
        f" 2 x {r.items:,} items with BatchWriteItem"
    )
    return text


def main(
    argv: Sequence[str] | None = None, out: Callable[[str], None] = print
) -> list[StrayLockResult]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.sweep --stray-locks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--items", type=int, default=100_000, help="items (default 100000)")
    parser.add_argument("--stray", type=int, default=10, help="stray locks (default 10)")
    parser.add_argument(
        "--backend",
        choices=(*KINDS, "both"),
        default="dynalite",
        help="emulator(s) (default: dynalite; see above for moto)",
    )
    args = parser.parse_args(argv)
    if args.stray < 1 or args.items < args.stray:
        parser.error("--stray >= 1 and --items >= --stray are required")
    kinds: tuple[Kind, ...] = KINDS if args.backend == "both" else (args.backend,)
    logging.getLogger("ddbtx.sweeper").setLevel(logging.ERROR)  # the fallback warns per run
    results = []
    with emulators(kinds) as dbs:
        for kind in kinds:
            result = measure(dbs[kind].client(), kind, args.items, args.stray)
            results.append(result)
            out(report(result) + "\n")
    return results
