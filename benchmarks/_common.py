"""Plumbing shared by the benchmark scripts: emulators, tables, tables of figures."""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from ddbtx import TransactionManager
from ddbtx.local import KINDS, Kind, LocalDynamo
from ddbtx.tables import create_data_table

#: The data tables' hash key (string), as in the test suite.
DATA_KEY = "pk"


@dataclass(frozen=True)
class Tables:
    """Table names of one benchmark run (unique, so runs never see each other)."""

    tx: str
    images: str
    data: str


def unique_name(role: str) -> str:
    return f"bench-{role}-{uuid.uuid4().hex[:8]}"


def create_tables(client: Any, name: Callable[[str], str] = unique_name) -> Tables:
    """Create the protocol tables and one data table (hash key ``pk``).

    ``name`` turns a role ("tx", "img", "data") into a table name.
    """
    names = Tables(name("tx"), name("img"), name("data"))
    TransactionManager(client, names.tx, names.images).create_tables()
    create_data_table(client, names.data, partition_key=DATA_KEY)
    return names


def key(pk: str) -> dict[str, Any]:
    return {DATA_KEY: {"S": pk}}


def seed(client: Any, table: str, keys: Sequence[str], balance: int = 100) -> None:
    """Plain items (outside any transaction, not counted)."""
    for pk in keys:
        client.put_item(TableName=table, Item={**key(pk), "balance": {"N": str(balance)}})


def write_batch(client: Any, table: str, rows: list[dict[str, Any]]) -> None:
    """Put ``rows`` (at most 25) with BatchWriteItem, retrying what it leaves unprocessed."""
    requests: list[dict[str, Any]] = [{"PutRequest": {"Item": row}} for row in rows]
    for _ in range(50):
        resp = client.batch_write_item(RequestItems={table: requests})
        requests = resp.get("UnprocessedItems", {}).get(table, [])
        if not requests:
            return
        time.sleep(0.05)  # an emulator under load may defer some; retry them
    raise RuntimeError(f"BatchWriteItem left {len(requests)} items unprocessed")


@contextmanager
def emulators(
    kinds: Sequence[Kind], *, own_process: bool = False
) -> Iterator[dict[Kind, LocalDynamo]]:
    """Start the requested emulators; stop them on exit (``own_process``: see LocalDynamo)."""
    with ExitStack() as stack:
        yield {
            kind: stack.enter_context(LocalDynamo(kind, own_process=own_process)) for kind in kinds
        }


def all_pages(read: Callable[..., dict[str, Any]], **params: Any) -> list[dict[str, Any]]:
    """Every item of a paged Scan or Query (``read``: ``client.scan`` or ``client.query``)."""
    items: list[dict[str, Any]] = []
    while True:
        page = read(**params)
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return items
        params["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def scan_all(client: Any, table: str, **params: Any) -> list[dict[str, Any]]:
    """Every item of ``table`` (consistent, all pages); ``params`` are passed to each Scan."""
    return all_pages(client.scan, TableName=table, ConsistentRead=True, **params)


def backend_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        choices=(*KINDS, "both"),
        default="both",
        help="emulator(s) to run against (default: both)",
    )


def chosen_kinds(args: argparse.Namespace) -> tuple[Kind, ...]:
    return KINDS if args.backend == "both" else (args.backend,)


def render(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table: a title line, a header, a rule, then right-aligned cells."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        first = row[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest]).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([title, line(cells[0]), rule, *(line(r) for r in cells[1:])])
