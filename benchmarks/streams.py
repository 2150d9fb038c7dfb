"""Stream records a transaction makes, and the committed changes the adapter emits from them.

Run as ``python -m benchmarks.streams`` (issue 23). For one transaction of
``--items`` items (25) on a data table with a NEW_AND_OLD_IMAGES stream, each
scenario counts, from the table's stream (read with GetRecords):

*stream records*
    Every record the table's stream holds for the transaction.
*past the filters*
    Those :data:`ddbtx.streams.PROTOCOL_FILTER_PATTERNS` let through, i.e. what a
    Lambda event source mapping with the CDK option's filter criteria delivers
    (matched as moto's EventBridge pattern matcher matches them).
*committed changes*
    What :func:`ddbtx.streams.committed_changes` emits from all the records.

The items are seeded with plain writes first (their records are not counted).
Only moto has streams (dynalite has none), so this runs on moto alone. Every
figure is a count; each run checks that the changes are exactly what committed.

Usage::

    python -m benchmarks.streams              # 25 items
    python -m benchmarks.streams --items 100
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ddbtx import TransactionManager
from ddbtx.local import LocalDynamo
from ddbtx.stream_reader import StreamReader
from ddbtx.streams import PROTOCOL_FILTER_PATTERNS, committed_changes
from ddbtx.tables import create_data_table

from ._common import key, render, seed, unique_name


@dataclass(frozen=True)
class Scenario:
    """One transaction shape: what it does to each item, whether it commits, and how many
    committed changes it must yield."""

    name: str
    work: Callable[[Any, str, list[str]], None]
    commit: bool
    changes_per_item: int


@dataclass(frozen=True)
class Counts:
    scenario: str
    records: int
    delivered: int
    changes: int


def _add(tx: Any, table: str, pk: str, amount: int) -> None:
    tx.update_item(
        TableName=table,
        Key=key(pk),
        UpdateExpression="ADD balance :n",
        ExpressionAttributeValues={":n": {"N": str(amount)}},
    )


def _updates(tx: Any, table: str, keys: list[str]) -> None:
    for pk in keys:
        _add(tx, table, pk, 1)


def _twice(tx: Any, table: str, keys: list[str]) -> None:
    for pk in keys:
        _add(tx, table, pk, 1)
        _add(tx, table, pk, 2)


def _inserts(tx: Any, table: str, keys: list[str]) -> None:
    for pk in keys:
        tx.put_item(TableName=table, Item={**key("new-" + pk), "balance": {"N": "1"}})


def _deletes(tx: Any, table: str, keys: list[str]) -> None:
    for pk in keys:
        tx.delete_item(TableName=table, Key=key(pk))


def _reads_and_one_write(tx: Any, table: str, keys: list[str]) -> None:
    for pk in keys[1:]:
        tx.get_item(TableName=table, Key=key(pk))
    _add(tx, table, keys[0], 1)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("updates, committed", _updates, True, 1),
    Scenario("updates, rolled back", _updates, False, 0),
    Scenario("two updates per item, committed", _twice, True, 1),
    Scenario("inserts, committed", _inserts, True, 1),
    Scenario("inserts, rolled back", _inserts, False, 0),
    Scenario("deletes, committed", _deletes, True, 1),
    Scenario("reads (read locks) + 1 update, committed", _reads_and_one_write, True, 0),
)


def measure(client: Any, items: int, name: Callable[[str], str] = unique_name) -> list[Counts]:
    """Run every scenario on its own tables; count its records, deliveries and changes.

    Raises
    ------
    AssertionError
        The changes are not exactly one per item the transaction committed (each
        scenario's ``changes_per_item``; the read-lock scenario: its one update).
    """
    from moto.events.models import EventPattern

    patterns = [EventPattern(None, p) for p in PROTOCOL_FILTER_PATTERNS]
    results = []
    for index, scenario in enumerate(SCENARIOS):
        tx_table, images, data = (name(f"{role}{index}") for role in ("tx", "img", "data"))
        tm = TransactionManager(client, tx_table, images)
        tm.create_tables()
        create_data_table(client, data, stream=True)
        keys = [f"item-{i:04d}" for i in range(items)]
        seed(client, data, keys)
        reader = StreamReader(client, data)
        reader.read()  # the seeding's plain writes: not counted
        tx = tm.begin()
        scenario.work(tx, data, keys)
        tx.commit() if scenario.commit else tx.rollback()
        records = reader.read()
        changes = committed_changes(records)
        expected = items * scenario.changes_per_item
        if scenario.work is _reads_and_one_write:
            expected = 1
        assert len(changes) == expected, (scenario.name, len(changes), expected)
        assert all(c.tx_id == tx.id for c in changes), scenario.name
        delivered = [r for r in records if any(p.matches_event(r) for p in patterns)]
        results.append(Counts(scenario.name, len(records), len(delivered), len(changes)))
    return results


def report(items: int, results: Sequence[Counts]) -> str:
    rows = [
        (
            r.scenario,
            r.records,
            f"{r.records / items:.1f}",
            r.delivered,
            r.changes,
        )
        for r in results
    ]
    return render(
        f"One transaction of {items} items on a NEW_AND_OLD_IMAGES stream (moto)",
        ("transaction", "stream records", "per item", "past the filters", "committed changes"),
        rows,
    )


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> list[Counts]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.streams",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--items", type=int, default=25, help="items per transaction (25)")
    args = parser.parse_args(argv)
    with LocalDynamo("moto") as db:
        results = measure(db.client(), args.items)
    out(report(args.items, results))
    out("(dynalite has no DynamoDB Streams: moto only)")
    return results


if __name__ == "__main__":
    main()
