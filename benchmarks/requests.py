"""Exact DynamoDB requests per transaction and per committed read.

Counts come from a botocore ``before-call`` hook
(:func:`ddbtx.instrumentation.count_requests`): one per API call, retries apart.
A transaction is measured end to end: ``begin`` + N requests + ``commit`` (or
``rollback``) + ``tx.delete()``, after a warm-up that cached the data table's key
schema (``DescribeTable`` is once per table per manager and reported apart).

Usage::

    python -m benchmarks.requests                   # N = 1, 5, 25 on both emulators
    python -m benchmarks.requests --sizes 1,5,25,100   # the README figures
    python -m benchmarks.requests --sizes 1,5 --backend moto --chart none
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddbtx import Isolation, Transaction, TransactionManager
from ddbtx.instrumentation import count_requests
from ddbtx.local import Kind

from ._common import (
    DATA_KEY,
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

#: N = 100 as well (``--sizes 1,5,25,100``) takes minutes more on a loaded emulator.
DEFAULT_SIZES = (1, 5, 25)
DEFAULT_CHART = Path(__file__).with_name("requests.png")

#: Request kinds: what each of the N requests of a transaction is.
#: ``insert`` is a put conditioned on ``attribute_not_exists``; ``put-new`` and
#: ``put-over`` are unconditional puts of an absent and of an existing item.
KINDS = ("update", "insert", "put-new", "put-over", "delete", "read", "mix")
#: Kinds ``tx.write_all`` takes (writes only).
BATCH_KINDS = ("update", "insert", "put-new", "put-over", "delete", "mix-writes")
#: The mix cycles through these, in this order.
MIX = ("update", "insert", "delete", "read")
PATHS = ("commit", "rollback")
BATCH = "commit (write_all)"


def java_writes(n: int) -> int:
    """Writes of the Java library (awslabs dynamodb-transactions) for N updates."""
    return 6 * n + 4


def java_reads(n: int) -> int:
    return n + 2


def target_total(n: int) -> int:
    """Issue 7, target 1: at most 4N+4 requests on the general path."""
    return 4 * n + 4


MIX_WRITES = ("update", "insert", "delete")


def request_kind(kind: str, index: int) -> str:
    if kind == "mix":
        return MIX[index % len(MIX)]
    if kind == "mix-writes":
        return MIX_WRITES[index % len(MIX_WRITES)]
    return kind


def needs_item(kind: str) -> bool:
    """Whether the request works on an item that exists before the transaction."""
    return kind in ("update", "put-over", "delete", "read")


def request_params(kind: str, table: str, pk: str) -> tuple[str, dict[str, Any]]:
    """The boto3 operation and parameters of one request of the given kind."""
    item = {**key(pk), "balance": {"N": "1"}}
    if kind == "update":
        return "Update", {
            "TableName": table,
            "Key": key(pk),
            "UpdateExpression": "SET balance = balance + :d",
            "ExpressionAttributeValues": {":d": {"N": "1"}},
        }
    if kind == "insert":
        return "Put", {
            "TableName": table,
            "Item": item,
            "ConditionExpression": "attribute_not_exists(#k)",
            "ExpressionAttributeNames": {"#k": DATA_KEY},
        }
    if kind in ("put-new", "put-over"):
        return "Put", {"TableName": table, "Item": item}
    if kind == "delete":
        return "Delete", {"TableName": table, "Key": key(pk)}
    if kind == "read":
        return "Get", {"TableName": table, "Key": key(pk)}
    raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")


def issue(tx: Transaction, kind: str, table: str, pk: str) -> None:
    """Send one request of the given kind inside ``tx``."""
    operation, params = request_params(kind, table, pk)
    send = {
        "Update": tx.update_item,
        "Put": tx.put_item,
        "Delete": tx.delete_item,
        "Get": tx.get_item,
    }[operation]
    send(**params)


@dataclass(frozen=True)
class TxCount:
    """Requests of one measured transaction."""

    path: str
    kind: str
    n: int
    reads: int
    writes: int
    by_operation: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.reads + self.writes


def fresh_manager(client: Any, tables: Tables) -> TransactionManager:
    """A new manager whose data table key schema is known (no DescribeTable, no history)."""
    return TransactionManager(
        client, tables.tx, tables.images, key_schemas={tables.data: (DATA_KEY,)}
    )


def measure_transaction(
    client: Any, tables: Tables, kind: str, n: int, path: str, *, batch: bool = False
) -> TxCount:
    """begin + N requests of ``kind`` + commit/rollback + delete, counted exactly.

    Each measurement has a fresh manager, so no guess learnt from an earlier
    transaction (puts learn whether they insert or replace) changes the figure.
    With ``batch`` the N requests go in one ``tx.write_all`` call.
    """
    tm = fresh_manager(client, tables)
    run = uuid.uuid4().hex[:8]
    keys = [f"{kind}-{n}-{run}-{i}" for i in range(n)]
    kinds = [request_kind(kind, i) for i in range(n)]
    seed(client, tables.data, [pk for pk, k in zip(keys, kinds, strict=True) if needs_item(k)])
    with count_requests(client) as counts:
        tx = tm.begin()
        if batch:
            tx.write_all(
                [
                    dict([request_params(k, tables.data, pk)])
                    for pk, k in zip(keys, kinds, strict=True)
                ]
            )
        else:
            for pk, k in zip(keys, kinds, strict=True):
                issue(tx, k, tables.data, pk)
        if path == "commit":
            tx.commit()
        else:
            tx.rollback()
        tx.delete()
    tm.protocol.close()
    route = BATCH if batch else path
    return TxCount(route, kind, n, counts.reads, counts.writes, dict(counts.by_operation))


def measure_describe(client: Any, tx_table: str, images_table: str, table: str) -> int:
    """DescribeTable calls of a fresh manager's first one-request transaction."""
    tm = TransactionManager(client, tx_table, images_table)
    run = uuid.uuid4().hex[:8]
    seed(client, table, [f"describe-{run}"])
    with count_requests(client) as counts:
        with tm.transaction() as tx:
            issue(tx, "update", table, f"describe-{run}")
        with tm.transaction() as tx:
            issue(tx, "update", table, f"describe-{run}")
    return counts.by_operation["DescribeTable"]


@dataclass(frozen=True)
class NativeCount:
    n: int
    route: str  # what transact_write reported: "native" or "protocol"
    total: int
    by_operation: dict[str, int]


def measure_native(tm: TransactionManager, table: str, n: int) -> NativeCount:
    """``tm.transact_write`` of N uncontended updates (TransactWriteItems where it exists)."""
    run = uuid.uuid4().hex[:8]
    keys = [f"native-{n}-{run}-{i}" for i in range(n)]
    seed(tm.client, table, keys)
    updates = [
        {
            "Update": {
                "TableName": table,
                "Key": key(pk),
                "UpdateExpression": "SET balance = balance + :d",
                "ExpressionAttributeValues": {":d": {"N": "1"}},
            }
        }
        for pk in keys
    ]
    with count_requests(tm.client) as counts:
        route = tm.transact_write(updates)
    return NativeCount(n, route, counts.total, dict(counts.by_operation))


@dataclass(frozen=True)
class ReadCount:
    case: str
    reads: int
    writes: int


def measure_committed_reads(tm: TransactionManager, table: str) -> list[ReadCount]:
    """Requests of one ``tm.get_item(isolation=COMMITTED)`` on items in various states.

    The locked cases are held by an open transaction of another manager on the
    same tables, which is rolled back afterwards.
    """
    run = uuid.uuid4().hex[:8]
    names = ("unlocked", "absent", "applied", "read-locked", "inserted", "applied-big")
    pks = {case: f"read-{case}-{run}" for case in names}
    seed(tm.client, table, [pks["unlocked"], pks["applied"], pks["read-locked"]])
    # An item past the in-item image limit keeps its image in the images table.
    big = {**key(pks["applied-big"]), "balance": {"N": "1"}, "blob": {"S": "x" * 70_000}}
    tm.client.put_item(TableName=table, Item=big)
    holder = TransactionManager(tm.client, tm.transactions_table, tm.images_table)
    tx = holder.begin()
    issue(tx, "update", table, pks["applied"])
    issue(tx, "read", table, pks["read-locked"])
    issue(tx, "insert", table, pks["inserted"])
    issue(tx, "update", table, pks["applied-big"])
    labels = {
        "unlocked": "unlocked item",
        "absent": "absent item",
        "applied": "locked, update applied (in-item image)",
        "read-locked": "locked by a read",
        "inserted": "locked, pending insert",
        "applied-big": "locked, update applied (image in images table)",
    }
    out = []
    try:
        for case in names:
            with count_requests(tm.client) as counts:
                tm.get_item(TableName=table, Key=key(pks[case]), isolation=Isolation.COMMITTED)
            out.append(ReadCount(labels[case], counts.reads, counts.writes))
    finally:
        tx.rollback()
        tx.delete()
    return out


@dataclass
class BackendResult:
    kind: Kind
    counts: list[TxCount]
    describe: int
    reads: list[ReadCount]
    native: list[NativeCount]


def run_backend(
    client: Any, sizes: Sequence[int], kind: Kind, name: Callable[[str], str] = unique_name
) -> BackendResult:
    """Every kind, size and path, DescribeTable and committed reads on one emulator."""
    tables = create_tables(client, name)
    counts = [
        measure_transaction(client, tables, k, n, path)
        for path in PATHS
        for k in KINDS
        for n in sizes
    ]
    counts += [
        measure_transaction(client, tables, k, n, "commit", batch=True)
        for k in BATCH_KINDS
        for n in sizes
    ]
    describe = measure_describe(client, tables.tx, tables.images, tables.data)
    tm = fresh_manager(client, tables)
    reads = measure_committed_reads(tm, tables.data)
    native = [measure_native(tm, tables.data, n) for n in sizes if n <= 100]
    return BackendResult(kind, counts, describe, reads, native)


# -- reporting ----------------------------------------------------------------


def linear(points: Sequence[tuple[int, int]]) -> str:
    """``aN+b`` when the points lie on one integer line, else the values joined by ``/``."""
    listed = "/".join(str(v) for _, v in points)
    if len(points) < 2:
        return listed
    (n0, v0), (n1, v1) = points[0], points[1]
    a, rem = divmod(v1 - v0, n1 - n0)
    b = v0 - a * n0
    if rem or any(v != a * n + b for n, v in points):
        return listed
    if a == 0:
        return str(b)
    slope = "N" if a == 1 else f"{a}N"
    return slope if b == 0 else f"{slope}{b:+d}"


def verdict(c: TxCount, update_total: int | None) -> str:
    ok = c.total <= target_total(c.n)
    cheaper = ""
    if c.kind in ("insert", "delete", "read") and update_total is not None:
        cheaper = "; < update" if c.total < update_total else "; NOT < update"
    return ("ok" if ok else "MISSED") + cheaper


def transaction_table(path: str, results: Sequence[BackendResult]) -> str:
    """One row per kind and N from the first backend; the others' totals where they differ."""
    first, others = results[0], results[1:]
    counts = [c for c in first.counts if c.path == path]
    updates = {c.n: c.total for c in counts if c.kind == "update"}
    rows = []
    for c in counts:
        java = f"{java_writes(c.n)}W+{java_reads(c.n)}R={java_writes(c.n) + java_reads(c.n)}"
        differ = [
            f"{r.kind} {o.total}"
            for r in others
            for o in r.counts
            if (o.path, o.kind, o.n) == (c.path, c.kind, c.n) and o != c
        ]
        rows.append(
            [
                c.kind,
                c.n,
                c.reads,
                c.writes,
                c.total,
                ", ".join(differ) or "same",
                target_total(c.n),
                java,
                verdict(c, updates.get(c.n)),
            ]
        )
    headers = ["kind", "N", "reads", "writes", "total", "other backends"]
    headers += ["<=4N+4", "Java (6N+4)W+(N+2)R", "target"]
    body = "tx.write_all(N requests) + commit" if path == BATCH else f"N requests + {path}"
    title = f"Requests per transaction, {path} path: begin + {body} + delete ({first.kind})"
    return render(title, headers, rows)


def formula_table(counts: Sequence[TxCount]) -> str:
    """Per kind and path: each operation's count as a function of N."""
    rows = []
    groups: dict[tuple[str, str], list[TxCount]] = {}
    for c in counts:
        groups.setdefault((c.path, c.kind), []).append(c)
    for (path, kind), group in groups.items():
        ops = sorted({op for c in group for op in c.by_operation})
        parts = [f"{op} {linear([(c.n, c.by_operation.get(op, 0)) for c in group])}" for op in ops]
        rows.append(
            [
                path,
                kind,
                linear([(c.n, c.reads) for c in group]),
                linear([(c.n, c.writes) for c in group]),
                linear([(c.n, c.total) for c in group]),
                ", ".join(parts),
            ]
        )
    sizes = "/".join(str(n) for n in sorted({c.n for c in counts}))
    return render(
        f"Requests as a function of N, by operation (a/b/...: the values at N = {sizes})",
        ["path", "kind", "reads", "writes", "total", "by operation"],
        rows,
    )


def reads_table(reads: Sequence[ReadCount], backends: str) -> str:
    rows = [[r.case, r.reads, r.writes, r.reads + r.writes] for r in reads]
    return render(
        f"Requests per tm.get_item(isolation=COMMITTED) ({backends})",
        ["item state", "reads", "writes", "total"],
        rows,
    )


def native_table(native: Sequence[NativeCount], backend: str) -> str:
    rows = [
        [c.n, c.route, c.total, ", ".join(f"{op} {k}" for op, k in sorted(c.by_operation.items()))]
        for c in native
    ]
    return render(
        f"Requests per tm.transact_write of N uncontended updates ({backend})",
        ["N", "route", "total", "by operation"],
        rows,
    )


def draw_chart(counts: Sequence[TxCount], path: Path) -> None:
    """Grouped bars of the totals per kind and N, with the target and the Java figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    sizes = sorted({c.n for c in counts})
    routes = (*PATHS, BATCH)
    every = list(dict.fromkeys([*KINDS, *BATCH_KINDS]))
    colour = {kind: plt.get_cmap("tab10")(i) for i, kind in enumerate(every)}
    fig, axes = plt.subplots(1, len(routes), figsize=(18, 5.2), sharey=True)
    for ax, route in zip(axes, routes, strict=True):
        totals = {(c.kind, c.n): c.total for c in counts if c.path == route}
        kinds = BATCH_KINDS if route == BATCH else KINDS
        width = 0.8 / len(kinds)
        for k, kind in enumerate(kinds):
            xs = [g + (k - (len(kinds) - 1) / 2) * width for g in range(len(sizes))]
            heights = [totals[kind, n] for n in sizes]
            bars = ax.bar(xs, heights, width, label=kind, color=colour[kind])
            ax.bar_label(bars, fontsize=6, padding=1, rotation=90)
        for g, n in enumerate(sizes):
            span = (g - 0.45, g + 0.45)
            target = "target 4N+4" if g == 0 else None
            java = "Java 7N+6" if g == 0 else None
            ax.hlines(target_total(n), *span, colors="k", linestyles="--", label=target)
            ax.hlines(java_writes(n) + java_reads(n), *span, colors="r", linestyles=":", label=java)
        ax.set_title(route)
        ax.set_xticks(range(len(sizes)), [f"N={n}" for n in sizes])
        ax.set_yscale("log")
        ax.margins(y=0.12)  # room for the rotated labels
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.grid(True, axis="y", which="both", alpha=0.3)
    axes[0].set_ylabel("DynamoDB requests per transaction (log)")
    handles = {
        label: handle
        for ax in axes
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True)
    }
    fig.legend(handles.values(), handles.keys(), loc="center right", fontsize=8)
    fig.suptitle(
        "ddbtx requests per transaction: begin + N requests (one by one, or one write_all)"
        " + commit/rollback + delete"
    )
    fig.tight_layout(rect=(0, 0, 0.92, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report(results: Sequence[BackendResult], chart: Path | None) -> str:
    """The tables and the chart, from the first backend; the others where they differ."""
    first = results[0]
    out = [transaction_table(p, results) for p in (*PATHS, BATCH)]
    out.append(formula_table(first.counts) + f"\n({first.kind})")
    describe = ", ".join(f"{r.kind} {r.describe}" for r in results)
    out.append(
        f"DescribeTable per data table per manager: {describe} "
        "(first request on the table only; not in the figures above)"
    )
    if all(r.reads == first.reads for r in results):
        out.append(
            reads_table(first.reads, "identical on " + " and ".join(r.kind for r in results))
        )
    else:
        out += [reads_table(r.reads, r.kind) for r in results]
    # The native route depends on the emulator (dynalite lacks TransactWriteItems).
    out += [native_table(r.native, r.kind) for r in results]
    if chart is not None:
        draw_chart(first.counts, chart)
        out.append(f"chart: {chart}")
    return "\n\n".join(out)


def parse_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--sizes must be integers like 1,5,25: {text!r}"
        ) from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"--sizes must be positive: {text!r}")
    return sizes


def main(
    argv: Sequence[str] | None = None, out: Callable[[str], None] = print
) -> list[BackendResult]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.requests",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sizes", type=parse_sizes, default=DEFAULT_SIZES, help="N values")
    parser.add_argument(
        "--chart",
        default=str(DEFAULT_CHART),
        help="PNG to draw ('none': no chart; default benchmarks/requests.png)",
    )
    backend_argument(parser)
    args = parser.parse_args(argv)
    kinds = chosen_kinds(args)
    with emulators(kinds) as dbs:
        results = [run_backend(dbs[k].client(), args.sizes, k) for k in kinds]
    chart = None if args.chart == "none" else Path(args.chart)
    out(report(results, chart))
    return results


if __name__ == "__main__":
    main()
