"""Many concurrent transfers: asyncio tasks on one event loop against threads on the sync API.

Each transfer moves 1 between its own two accounts in a transaction (``tm.run``), so
the transfers never contend and the figures show what each driver costs to run many
at once. The same number of transfers runs twice in one process on one emulator: as
asyncio tasks (``ddbtx.aio``, one aiobotocore client, one event loop) and as threads
(``ddbtx``, one boto3 client shared by every thread). Both clients keep as many HTTP
connections as there are transfers.

Printed per driver: transfers per second (wall time of the whole batch; a ratio
within one run, not a target), requests per transfer (counted exactly, by botocore
event hooks), and the peak of memory Python allocated while the batch ran
(``tracemalloc``; a thread's own stack is not a Python allocation, so the threads'
figure leaves their stacks out, 8 MB of address space each by default on Linux).

Usage::

    python -m benchmarks.transfers                      # 200 transfers on dynalite
    python -m benchmarks.transfers --transfers 50 --backend moto
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config

from ddbtx import TransactionManager, aio
from ddbtx._base.dynamo import client_config
from ddbtx.instrumentation import count_requests
from ddbtx.local import KINDS, LOCAL_CREDENTIALS, LocalDynamo

from ._common import DATA_KEY, Tables, create_tables, emulators, render, scan_all, seed


@dataclass(frozen=True)
class Figures:
    driver: str
    transfers: int
    seconds: float
    requests: int
    peak_bytes: int

    @property
    def per_second(self) -> float:
        return self.transfers / self.seconds

    def row(self) -> list[object]:
        return [
            self.driver,
            self.transfers,
            f"{self.per_second:.1f}",
            f"{self.requests / self.transfers:.2f}",
            f"{self.peak_bytes / 2**20:.1f}",
        ]


def accounts(transfers: int, driver: str) -> list[tuple[str, str]]:
    """Each transfer's own (payer, payee)."""
    return [(f"{driver}-{i}-a", f"{driver}-{i}-b") for i in range(transfers)]


def add(table: str, pk: str, amount: int) -> dict[str, Any]:
    return {
        "TableName": table,
        "Key": {DATA_KEY: {"S": pk}},
        "UpdateExpression": "ADD balance :n",
        "ExpressionAttributeValues": {":n": {"N": str(amount)}},
    }


class Measured:
    """The figures of one batch: requests counted while it ran, and the peak of Python's
    allocations (``with Measured(...) as m: ...``, then ``m.figures``)."""

    def __init__(self, driver: str, transfers: int, client: Any) -> None:
        self.driver, self.transfers, self.client = driver, transfers, client
        self.figures: Figures | None = None

    def __enter__(self) -> Measured:
        tracemalloc.start()
        self._counting = count_requests(self.client)
        self._sent = self._counting.__enter__()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        seconds = time.perf_counter() - self._start
        self._counting.__exit__(None, None, None)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        self.figures = Figures(self.driver, self.transfers, seconds, self._sent.total, peak)


def client_settings(transfers: int) -> dict[str, Any]:
    """Both drivers' clients: one HTTP connection per transfer, the library's retries."""
    config = client_config(3).merge(Config(max_pool_connections=transfers))
    return {"config": config, **LOCAL_CREDENTIALS}


def with_threads(db: LocalDynamo, tables: Tables, transfers: int) -> Figures:
    """``transfers`` threads, each running one transfer through the sync API."""
    client = boto3.client("dynamodb", endpoint_url=db.endpoint_url, **client_settings(transfers))
    tm = TransactionManager(client, tables.tx, tables.images, max_workers=transfers)
    tm.key_types(tables.data)
    pairs = accounts(transfers, "threads")
    seed(client, tables.data, [pk for pair in pairs for pk in pair])

    def transfer(payer: str, payee: str) -> None:
        def work(tx: Any) -> None:
            tx.update_item(**add(tables.data, payer, -1))
            tx.update_item(**add(tables.data, payee, 1))

        tm.run(work, attempts=20)

    threads = [threading.Thread(target=transfer, args=pair) for pair in pairs]
    with Measured("threads (sync)", transfers, client) as measured:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    tm.close()
    assert measured.figures is not None
    return measured.figures


def with_tasks(db: LocalDynamo, tables: Tables, transfers: int) -> Figures:
    """``transfers`` asyncio tasks on one event loop, each one transfer."""
    from aiobotocore.session import get_session

    pairs = accounts(transfers, "tasks")
    seed(db.client(), tables.data, [pk for pair in pairs for pk in pair])

    async def main() -> Figures:
        settings = client_settings(transfers)
        async with get_session().create_client(
            "dynamodb", endpoint_url=db.endpoint_url, **settings
        ) as client:
            tm = aio.TransactionManager(client, tables.tx, tables.images)
            await tm.key_types(tables.data)

            async def transfer(payer: str, payee: str) -> None:
                async def work(tx: aio.Transaction) -> None:
                    await tx.update_item(**add(tables.data, payer, -1))
                    await tx.update_item(**add(tables.data, payee, 1))

                await tm.run(work, attempts=20)

            with Measured("asyncio tasks", transfers, client) as measured:
                await asyncio.gather(*(transfer(*pair) for pair in pairs))
        assert measured.figures is not None
        return measured.figures

    return asyncio.run(main())


def check(db: LocalDynamo, tables: Tables) -> int:
    """Every payer lost 1 and every payee gained 1 (each transfer applied once)."""
    items = scan_all(db.client(), tables.data)
    wrong = [
        i[DATA_KEY]["S"]
        for i in items
        if i["balance"]["N"] != ("99" if i[DATA_KEY]["S"].endswith("-a") else "101")
    ]
    if wrong:
        raise AssertionError(f"{len(wrong)} accounts hold a wrong balance: {wrong[:5]}")
    return len(items)


def measure(db: LocalDynamo, transfers: int) -> list[Figures]:
    """Both drivers, one after the other, on fresh tables of ``db``."""
    tables = create_tables(db.client())
    results = [with_tasks(db, tables, transfers), with_threads(db, tables, transfers)]
    check(db, tables)
    return results


def report(kind: str, results: Sequence[Figures]) -> str:
    tasks, threads = results
    table = render(
        f"{tasks.transfers} concurrent transfers on {kind} (each its own two accounts)",
        ["driver", "transfers", "per second", "requests each", "peak MB (Python)"],
        [r.row() for r in results],
    )
    return (
        f"{table}\n"
        f"asyncio/threads: throughput x{tasks.per_second / threads.per_second:.2f}, "
        f"peak memory x{tasks.peak_bytes / threads.peak_bytes:.2f}"
    )


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.transfers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--transfers", type=int, default=200)
    parser.add_argument("--backend", choices=KINDS, default="dynalite")
    args = parser.parse_args(argv)
    if args.transfers < 1:
        parser.error("--transfers >= 1")
    with emulators([args.backend]) as dbs:
        out(report(args.backend, measure(dbs[args.backend], args.transfers)))


if __name__ == "__main__":
    main()
