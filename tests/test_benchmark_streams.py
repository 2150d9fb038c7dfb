"""``python -m benchmarks.streams`` on a tiny size: the stream records per item of each
transaction shape, what the filter patterns deliver, and one committed change per item."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # benchmarks/ is a top-level package, not installed

from benchmarks import streams  # noqa: E402

from ddbtx.local import LocalDynamo  # noqa: E402

NO_STREAMS = "dynalite has no DynamoDB Streams (no StreamSpecification, no dynamodbstreams API)"


def test_given_each_transaction_shape_then_records_deliveries_and_changes_per_item(
    ddb: Any, backend: LocalDynamo, table_name: Callable[[str], str]
) -> None:
    if backend.kind == "dynalite":
        pytest.skip(
            "dynalite has no DynamoDB Streams (no StreamSpecification, no dynamodbstreams API)"
        )
    # Given transactions of 3 items; When each runs on a streamed table
    results = {r.scenario: r for r in streams.measure(ddb, 3, table_name)}
    # Then (records, past the filters, committed changes) are, per shape:
    as_counts = {name: (r.records, r.delivered, r.changes) for name, r in results.items()}
    assert as_counts == {
        # lock, apply, release: only the release is delivered, and it is the change
        "updates, committed": (9, 3, 3),
        # lock, apply, restore: the restore is delivered (no pattern tells it from a
        # release) and the adapter drops it
        "updates, rolled back": (9, 3, 0),
        # lock, apply, second apply, release
        "two updates per item, committed": (12, 3, 3),
        # locked insert with the write, release
        "inserts, committed": (6, 3, 3),
        # locked insert, delete: the delete is delivered and dropped by the adapter
        "inserts, rolled back": (6, 3, 0),
        # lock marking the delete, delete at commit
        "deletes, committed": (6, 3, 3),
        # two read locks coming and going, the update's lock, apply and release
        "reads (read locks) + 1 update, committed": (2 * 2 + 3, 1, 1),
    }


def test_given_the_script_then_it_prints_its_table() -> None:
    lines: list[str] = []
    streams.main(["--items", "2"], lines.append)
    text = "\n".join(lines)
    assert "One transaction of 2 items on a NEW_AND_OLD_IMAGES stream (moto)" in text
    assert "updates, committed" in text and "dynalite has no DynamoDB Streams" in text
