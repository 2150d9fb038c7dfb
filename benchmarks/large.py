"""Transactions past the 400 KB item limit: 1,000 items and over 10 MB of requests.

One transaction puts ``--items`` existing items (``--item-kb`` each), sent
together with ``tx.write_all`` (``--conversational``: one request at a time as
well). Its TX record spreads over several items of the transactions table: the
header (state, version, every request's table, key and lock nonce) and one row
per request body that does not fit in it. Four runs, each on freshly seeded
items, each checked item by item afterwards:

- ``commit``: commit and delete the record; every item carries the new value.
- ``rollback``: roll back and delete; every item is back as it was.
- ``crash, locking``: the coordinator dies half-way through its item writes
  (every call from then on fails, in every thread); a :class:`~ddbtx.sweeper.Sweeper`
  run rolls it back, a second deletes the record.
- ``crash, completing``: the coordinator dies after the commit decision, half-way
  through unlocking; the sweeper rolls it forward and deletes the record.

Counted exactly per run (botocore hooks): requests by table role, and the
capacity units DynamoDB would bill. Capacity is summed from the
``ConsumedCapacity`` each response reports; dynalite computes it by DynamoDB's
rules (item size before or after a write, whichever is larger, per KB), moto
does not (it reports about 1 unit per request), so that column is dynalite's.

Usage::

    python -m benchmarks.large                       # 1,000 items x 10.5 KB, both emulators
    python -m benchmarks.large --items 100 --item-kb 12 --backend dynalite --conversational
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from ddbtx import TransactionManager
from ddbtx import schema as s
from ddbtx.chaos import Crash
from ddbtx.local import Kind
from ddbtx.sweeper import Sweeper

from ._common import (
    Tables,
    all_pages,
    backend_argument,
    chosen_kinds,
    create_tables,
    emulators,
    key,
    render,
    scan_all,
    unique_name,
)

#: Operations whose responses report ``ConsumedCapacity`` when asked to.
CAPACITY_OPERATIONS = frozenset(
    {
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "BatchWriteItem",
        "TransactGetItems",
        "TransactWriteItems",
    }
)
RUNS = ("commit", "rollback", "crash, locking", "crash, completing")
ROLES = ("data", "tx", "images")


@dataclass
class Usage:
    """Requests and capacity units by table role ("data", "tx", "images")."""

    requests: Counter[str] = field(default_factory=Counter)
    capacity: Counter[str] = field(default_factory=Counter)

    def add(self, other: Usage) -> Usage:
        return Usage(self.requests + other.requests, self.capacity + other.capacity)


@contextmanager
def metered(client: Any, tables: Tables) -> Iterator[Usage]:
    """Count requests and the capacity DynamoDB reports, by table role."""
    roles = {tables.data: "data", tables.tx: "tx", tables.images: "images"}
    usage = Usage()
    lock = threading.Lock()
    local = threading.local()

    def ask(params: dict[str, Any], model: Any, **_: Any) -> None:
        # Batch calls name their tables in the request items (one table each here).
        local.table = params.get("TableName") or next(iter(params.get("RequestItems", {})), None)
        if model.name in CAPACITY_OPERATIONS:
            params["ReturnConsumedCapacity"] = "TOTAL"

    def tally(parsed: dict[str, Any], model: Any, **_: Any) -> None:
        reported = parsed.get("ConsumedCapacity") or []
        if isinstance(reported, dict):
            reported = [reported]
        with lock:
            usage.requests[roles.get(getattr(local, "table", None) or "", "other")] += 1
            for part in reported:
                usage.capacity[roles.get(part["TableName"], "other")] += part["CapacityUnits"]

    events = client.meta.events
    events.register("before-parameter-build.dynamodb", ask)
    events.register("after-call.dynamodb", tally)
    try:
        yield usage
    finally:
        events.unregister("before-parameter-build.dynamodb", ask)
        events.unregister("after-call.dynamodb", tally)


class Death:
    """Kill a coordinator at its ``at``-th write to the data table after :meth:`arm`.

    From then on every call of that client fails with :class:`Crash`, in every
    thread: the process is gone, not one request.
    """

    def __init__(self, client: Any, data_table: str) -> None:
        self.client, self.data_table = client, data_table
        self.at: int | None = None
        self.writes = 0
        self.dead = False
        self._lock = threading.Lock()
        client.meta.events.register("before-parameter-build.dynamodb", self._before)

    def arm(self, at: int) -> None:
        with self._lock:
            self.at, self.writes = at, 0

    def close(self) -> None:
        self.client.meta.events.unregister("before-parameter-build.dynamodb", self._before)

    def _before(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        with self._lock:
            counted = model.name in ("PutItem", "UpdateItem", "DeleteItem")
            if counted and self.at is not None and params.get("TableName") == self.data_table:
                self.writes += 1
                self.dead = self.dead or self.writes > self.at
            if self.dead:
                raise Crash(f"coordinator died before {model.name}")


@dataclass(frozen=True)
class Run:
    """One scenario's outcome: exact usage of the coordinator and of the sweeper."""

    name: str
    items: int
    request_bytes: int
    record_rows: int  # rows of the TX record at its largest (header + request rows)
    header_bytes: int
    coordinator: Usage
    sweeper: Usage
    seconds: float
    ok: bool


def body(index: int, tag: str, size: int) -> dict[str, Any]:
    return {**key(f"big-{index:05d}"), "tag": {"S": tag}, "blob": {"S": tag[0] * size}}


def seed_items(client: Any, table: str, items: int, size: int) -> None:
    """The items as they are before every run (batched, unmetered)."""
    rows = [{"PutRequest": {"Item": body(i, "old", size)}} for i in range(items)]
    for start in range(0, len(rows), 25):
        pending: dict[str, Any] = {table: rows[start : start + 25]}
        while pending:
            pending = client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}


def state_of(client: Any, table: str, size: int) -> dict[str, str]:
    """pk -> tag of every item whose value is whole; fails loudly on leftover protocol data."""
    out: dict[str, str] = {}
    for item in scan_all(client, table):
        leftover = [a for a in item if s.is_held_attribute(a)]
        if leftover:
            raise AssertionError(f"{item['pk']['S']} still carries {leftover}")
        tag = item["tag"]["S"]
        out[item["pk"]["S"]] = tag if item["blob"]["S"] == tag[0] * size else "torn"
    return out


def record_shape(client: Any, table: str, tx_id: str) -> tuple[int, int]:
    """(rows, header bytes) of one TX record, read back unmetered."""
    from ddbtx._base.items import item_size

    rows = all_pages(
        client.query,
        TableName=table,
        KeyConditionExpression="#id = :id",
        ExpressionAttributeNames={"#id": s.TX_PK},
        ExpressionAttributeValues={":id": {"S": tx_id}},
        ConsistentRead=True,
    )
    header = [item_size(row) for row in rows if row[s.TX_SK]["S"] == s.TX_HEADER_SK]
    return len(rows), sum(header)


def empty(client: Any, table: str) -> bool:
    return not client.scan(TableName=table, Limit=1, ConsistentRead=True)["Items"]


def run_one(
    client: Any,
    tables: Tables,
    name: str,
    items: int,
    size: int,
    *,
    conversational: bool = False,
    clock: Callable[[], float] = time.time,
) -> Run:
    """Seed, run one scenario, recover if it crashed, then check every item."""
    seed_items(client, tables.data, items, size)
    tm = TransactionManager(client, tables.tx, tables.images, clock=clock)
    tm.key_names(tables.data)
    puts = [{"Put": {"TableName": tables.data, "Item": body(i, "new", size)}} for i in range(items)]
    request_bytes = sum(len(p["Put"]["Item"]["blob"]["S"]) for p in puts)
    death = Death(client, tables.data)
    if name == "crash, locking":
        death.arm(items // 2)
    started = time.perf_counter()
    shape = (0, 0)
    tx = tm.begin()
    try:
        with metered(client, tables) as coordinator:
            try:
                if conversational:
                    for put in puts:
                        tx.put_item(**put["Put"])
                else:
                    tx.write_all(puts)
                shape = record_shape(client, tables.tx, tx.id)
                if name == "crash, completing":
                    death.arm(items // 2)
                if name == "rollback":
                    tx.rollback()
                else:
                    tx.commit()
                tx.delete()
            except Crash:
                pass
    finally:
        death.close()
        tm.protocol.close()
    if shape == (0, 0):  # died before the record was read back
        shape = record_shape(client, tables.tx, tx.id)
    rescuer = TransactionManager(client, tables.tx, tables.images, clock=lambda: clock() + 3600)
    sweeper = Sweeper(
        rescuer,
        rollback_after=timedelta(minutes=5),
        delete_after=timedelta(0),
        data_tables=[tables.data],
        persist_cursor=False,
    )
    with metered(client, tables) as swept:
        if name.startswith("crash"):
            sweeper.run()  # complete the record (its state moves on in the index)...
        sweeper.run()  # ...and delete it (completed records are deleted at once here)
    rescuer.protocol.close()
    seconds = time.perf_counter() - started
    expected = "old" if name in ("rollback", "crash, locking") else "new"
    final = state_of(client, tables.data, size)
    ok = (
        len(final) == items
        and set(final.values()) == {expected}
        and empty(client, tables.tx)
        and empty(client, tables.images)
    )
    return Run(name, items, request_bytes, shape[0], shape[1], coordinator, swept, seconds, ok)


def measure(
    client: Any,
    items: int,
    size: int,
    *,
    conversational: bool = False,
    runs: Sequence[str] = RUNS,
    name: Callable[[str], str] = unique_name,
) -> list[Run]:
    """Every scenario in turn, each on its own tables."""
    out = []
    for run in runs:
        tables = create_tables(client, name)
        out.append(run_one(client, tables, run, items, size))
        if conversational and run == "commit":
            tables = create_tables(client, name)
            one = run_one(client, tables, run, items, size, conversational=True)
            out.append(replace(one, name="commit, one by one"))
    return out


def _capacity(usage: Usage, role: str) -> str:
    return f"{usage.capacity[role]:.0f}"


def table(kind: Kind, runs: Sequence[Run]) -> str:
    first = runs[0]
    mb = first.request_bytes / 1e6
    title = (
        f"{first.items}-item transaction, {mb:.1f} MB of requests, TX record over "
        f"{first.record_rows} items (header {first.header_bytes / 1024:.0f} KB) ({kind})"
    )
    headers = ["run", "ok", "coord reqs", "data/tx/img", "sweeper reqs", "data/tx/img"]
    headers += ["WCU+RCU data", "tx", "img", "s"]
    rows = []
    for run in runs:
        c, w = run.coordinator, run.sweeper
        both = c.add(w)
        rows.append(
            [
                run.name,
                "yes" if run.ok else "NO",
                sum(c.requests.values()),
                "/".join(str(c.requests[r]) for r in ROLES),
                sum(w.requests.values()),
                "/".join(str(w.requests[r]) for r in ROLES),
                *(_capacity(both, r) for r in ROLES),
                f"{run.seconds:.0f}",
            ]
        )
    note = (
        "\n(ok = every item holds the committed or the original value, no protocol"
        " attribute is left on any item, the transactions and images tables are empty;"
        " capacity units as reported by the emulator"
        + (
            ": dynalite applies DynamoDB's size rules)"
            if kind == "dynalite"
            else ", moto's are not DynamoDB's)"
        )
    )
    return render(title, headers, rows) + note


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.large",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--items", type=int, default=1000, help="items in the transaction")
    parser.add_argument("--item-kb", type=float, default=10.5, help="KB written to each item")
    parser.add_argument(
        "--conversational", action="store_true", help="also commit one request at a time"
    )
    backend_argument(parser)
    args = parser.parse_args(argv)
    if args.items < 2 or args.item_kb <= 0:
        parser.error("--items >= 2 and --item-kb > 0 are required")
    size = int(args.item_kb * 1024)
    kinds = chosen_kinds(args)
    with emulators(kinds) as dbs:
        for kind in kinds:
            runs = measure(dbs[kind].client(), args.items, size, conversational=args.conversational)
            out(table(kind, runs) + "\n")
            if not all(run.ok for run in runs):
                raise SystemExit(f"a run left the data wrong on {kind}")


if __name__ == "__main__":
    main()
