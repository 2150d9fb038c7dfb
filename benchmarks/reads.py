"""Requests an isolated read of many items costs, against the same read sent natively.

Run as ``python -m benchmarks.reads`` (issue 12, "Cost").

A table (hash ``pk``, range ``sk``, a global index projecting ALL and one
projecting KEYS_ONLY) holds ``--items`` items in one partition (default 100).
Each read (Query, Scan, BatchGetItem of every key, and a Query of each
index) is sent natively, then through ``tm.query``/``tm.scan``/
``tm.batch_get_item`` at ``COMMITTED`` and ``UNCOMMITTED``, with the items in
one of these states (``--locked`` of them, default 10, held by a pending
transaction of another coordinator):

*unlocked*
    No transaction holds any item.
*updated*
    Each has an applied update; its image is kept in the item.
*updated, large*
    The same on items over 64 KB, whose images are kept in the images table.
*inserted*
    Each was inserted by the pending transaction (the table has ``--locked`` more).

Then a read-locking ``tx.query`` and a ``SERIALIZABLE`` query of the
unlocked partition. Every request is counted with botocore's event hooks
(:func:`ddbtx.instrumentation.count_requests`); the manager has read the
table's schema before (``DescribeTable`` runs once per table per manager).

Usage::

    python -m benchmarks.reads                       # 100 items, 10 held, both emulators
    python -m benchmarks.reads --items 1000 --locked 50 --backend dynalite
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ddbtx import Isolation, Transaction, TransactionManager
from ddbtx.instrumentation import count_requests
from ddbtx.local import Kind
from ddbtx.tables import create_table_if_missing

from ._common import backend_argument, chosen_kinds, emulators, render, unique_name

GSI_ALL, GSI_KEYS = "by-g", "by-g-keys"
#: Over 64 KB: an item this large keeps its saved image in the images table.
LARGE = "x" * (70 * 1024)
STATES = ("unlocked", "updated", "updated, large", "inserted")


@dataclass(frozen=True)
class Row:
    """One read in one state: its requests natively and at each isolation level."""

    kind: str
    state: str
    read: str
    native: dict[str, int]
    committed: dict[str, int]
    uncommitted: dict[str, int]


def _create(client: Any, name: str) -> None:
    def index(index_name: str, projection: str) -> dict[str, Any]:
        return {
            "IndexName": index_name,
            "KeySchema": [
                {"AttributeName": "g", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": projection},
        }

    create_table_if_missing(
        client,
        name,
        None,
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": a, "AttributeType": t}
            for a, t in (("pk", "S"), ("sk", "N"), ("g", "S"))
        ],
        GlobalSecondaryIndexes=[index(GSI_ALL, "ALL"), index(GSI_KEYS, "KEYS_ONLY")],
    )


def _key(sk: int) -> dict[str, Any]:
    return {"pk": {"S": "p"}, "sk": {"N": str(sk)}}


def _reads(table: str, items: int) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each read by name: (operation, parameters)."""
    partition = {
        "KeyConditionExpression": "pk = :p",
        "ExpressionAttributeValues": {":p": {"S": "p"}},
    }
    by_g = {"KeyConditionExpression": "g = :g", "ExpressionAttributeValues": {":g": {"S": "a"}}}
    return {
        "Query": ("query", {"TableName": table, **partition}),
        "Query, filter": (
            "query",
            {
                "TableName": table,
                "KeyConditionExpression": "pk = :p",
                "FilterExpression": "n >= :z",
                "ExpressionAttributeValues": {":p": {"S": "p"}, ":z": {"N": "0"}},
            },
        ),
        "Scan": ("scan", {"TableName": table}),
        "BatchGetItem": (
            "batch_get_item",
            {"RequestItems": {table: {"Keys": [_key(sk) for sk in range(1, min(items, 100) + 1)]}}},
        ),
        "Query, index ALL": ("query", {"TableName": table, "IndexName": GSI_ALL, **by_g}),
        "Query, index KEYS_ONLY": ("query", {"TableName": table, "IndexName": GSI_KEYS, **by_g}),
    }


@contextmanager
def _state(
    other: TransactionManager, client: Any, table: str, state: str, items: int, locked: int
) -> Iterator[None]:
    """The items in ``state`` for the duration of the block (restored afterwards)."""
    held = range(1, locked + 1)
    if state == "updated, large":
        for sk in held:
            client.put_item(
                TableName=table,
                Item={**_key(sk), "n": {"N": str(sk)}, "g": {"S": "a"}, "big": {"S": LARGE}},
            )
    tx: Transaction | None = None
    if state != "unlocked":
        tx = other.begin()
        requests: list[dict[str, Any]] = []
        for sk in held:
            if state == "inserted":
                item = {**_key(items + sk), "n": {"N": "0"}, "g": {"S": "a"}}
                requests.append({"Put": {"TableName": table, "Item": item}})
            else:
                requests.append(
                    {
                        "Update": {
                            "TableName": table,
                            "Key": _key(sk),
                            "UpdateExpression": "SET n = :v",
                            "ExpressionAttributeValues": {":v": {"N": "-1"}},
                        }
                    }
                )
        tx.write_all(requests)
    try:
        yield
    finally:
        if tx is not None:
            tx.rollback()
            tx.delete()
        if state == "updated, large":
            for sk in held:
                client.put_item(
                    TableName=table, Item={**_key(sk), "n": {"N": str(sk)}, "g": {"S": "a"}}
                )


def _count(client: Any, read: Callable[[], Any]) -> dict[str, int]:
    with count_requests(client) as counts:
        read()
    return dict(counts.by_operation)


def measure(
    client: Any,
    kind: str,
    items: int,
    locked: int,
    name: Callable[[str], str] = unique_name,
) -> tuple[list[Row], dict[str, dict[str, int]]]:
    """Rows for every state and read, and the requests of ``tx.query`` and a SERIALIZABLE
    query of the unlocked partition. ``name`` makes the tables' names (the caller drops them)."""
    tm = TransactionManager(client, name("tx"), name("img"))
    tm.create_tables()
    other = TransactionManager(client, tm.transactions_table, tm.images_table)
    table = name("reads")
    _create(client, table)
    for start in range(1, items + 1, 25):
        batch = [
            {"PutRequest": {"Item": {**_key(sk), "n": {"N": str(sk)}, "g": {"S": "a"}}}}
            for sk in range(start, min(start + 25, items + 1))
        ]
        client.batch_write_item(RequestItems={table: batch})
    tm.key_types(table)
    tm.protocol.run(tm.reads.index(table, GSI_ALL))
    rows: list[Row] = []
    for state in STATES:
        with _state(other, client, table, state, items, locked):
            for read, (op, params) in _reads(table, items).items():
                native = _count(client, lambda op=op, params=params: getattr(client, op)(**params))
                at = {
                    level: _count(
                        client,
                        lambda level=level, op=op, params=params: getattr(tm, op)(
                            isolation=level, **params
                        ),
                    )
                    for level in (Isolation.COMMITTED, Isolation.UNCOMMITTED)
                }
                rows.append(
                    Row(
                        kind,
                        state,
                        read,
                        native,
                        at[Isolation.COMMITTED],
                        at[Isolation.UNCOMMITTED],
                    )
                )
    query = _reads(table, items)["Query"][1]

    def in_transaction() -> None:
        tx = tm.begin()
        tx.query(**query)
        tx.rollback()
        tx.delete()

    locking = {
        "tx.query + rollback + delete": _count(client, in_transaction),
        "SERIALIZABLE": _count(client, lambda: tm.query(isolation=Isolation.SERIALIZABLE, **query)),
    }
    return rows, locking


def spelled(counts: dict[str, int]) -> str:
    """``{"Query": 1, "BatchGetItem": 1}`` as ``1 Query + 1 BatchGetItem``."""
    return (
        " + ".join(
            f"{n} {op}"
            for op, n in sorted(counts.items(), key=lambda kv: kv[0] != "Query" and kv[0] != "Scan")
        )
        or "0"
    )


def report(rows: list[Row], locking: dict[str, dict[str, int]], items: int, locked: int) -> str:
    title = (
        f"requests per read of {items} items ({locked} held by a pending transaction unless "
        f"unlocked), {rows[0].kind}"
    )
    table = render(
        title,
        ("state", "read", "native", "COMMITTED", "UNCOMMITTED"),
        [
            (r.state, r.read, spelled(r.native), spelled(r.committed), spelled(r.uncommitted))
            for r in rows
        ],
    )
    lines = [f"{what}: {spelled(counts)}" for what, counts in locking.items()]
    return "\n".join([table, "", *lines])


def _naming(made: list[str]) -> Callable[[str], str]:
    """Unique table names, each noted in ``made``."""

    def name(role: str) -> str:
        made.append(unique_name(role))
        return made[-1]

    return name


def main(
    argv: Sequence[str] | None = None, out: Callable[[str], None] = print
) -> list[tuple[list[Row], dict[str, dict[str, int]]]]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.reads",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--items", type=int, default=100, help="items in the partition (default 100)"
    )
    parser.add_argument("--locked", type=int, default=10, help="items held (default 10)")
    backend_argument(parser)
    args = parser.parse_args(argv)
    if not 1 <= args.locked <= args.items:
        parser.error("--locked must be between 1 and --items")
    results = []
    kinds: tuple[Kind, ...] = chosen_kinds(args)
    with emulators(kinds) as started:
        for kind in kinds:
            client = started[kind].client()
            made: list[str] = []
            rows, locking = measure(client, kind, args.items, args.locked, _naming(made))
            for table in made:
                client.delete_table(TableName=table)
            out(report(rows, locking, args.items, args.locked))
            out("")
            results.append((rows, locking))
    return results


if __name__ == "__main__":
    main()
