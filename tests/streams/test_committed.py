"""The adapter on a real stream (moto): exactly the committed values, item by item.

Every step of :func:`workload.run_everything` completes before the next, and the
ledger snapshots the table after each, so each item's list of committed values
is known. The changes the adapter emits from the table's stream must take each
item through exactly that list: no value that never committed, none missing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ddbtx import TransactionManager
from ddbtx import schema as s
from ddbtx.stream_reader import StreamReader
from ddbtx.streams import committed_change, committed_changes
from helpers import Tables

from .support import Ledger, decoded, passes_filters, replay
from .workload import Workload, run_everything

#: Changes of the large items whose image the images table keeps: update, delete.
LARGE_ITEM_CHANGES = 2


@pytest.fixture
def workload(
    ddb: Any, tables: Tables, make_tm: Callable[..., TransactionManager], ledger: Ledger
) -> Workload:
    return Workload(ddb, tables.data, make_tm, ledger.snapshot)


def test_given_every_kind_of_transaction_when_the_stream_is_read_then_only_committed_values(
    workload: Workload, reader: StreamReader, ledger: Ledger
) -> None:
    # Given commits, roll backs, failed conditions, a wound, several writes per item,
    # large items, read locks and plain writes, each completed before the next
    run_everything(workload)
    # When the adapter reads the table's whole stream
    records = reader.read()
    changes = committed_changes(records)
    # Then each item goes through exactly its committed values, each change starting
    # from the value before it (where the record holds it)
    values, unknown = replay(changes)
    assert values == decoded(ledger.values)
    assert unknown == LARGE_ITEM_CHANGES
    # And every transactional change belongs to a transaction that committed, and every
    # committed transaction shows, but for one whose write changed nothing
    assert {c.tx_id for c in changes if c.tx_id} == workload.committed - workload.unchanging
    assert workload.unchanging <= workload.committed
    assert not workload.committed & workload.rolled_back
    # And the stream held the protocol at work, which the adapter left out
    assert len(records) > 3 * len(changes)
    # And Lambda's filter patterns deliver every record that carries a change, and drop
    # every lock, apply and later write (a new image with the lock) before any invocation
    delivered = [r for r in records if passes_filters(r)]
    assert all(passes_filters(r) for r in records if committed_change(r) is not None)
    assert not [r for r in delivered if s.ATTR_LOCK in r["dynamodb"].get("NewImage", {})]
    assert len(delivered) < len(records) / 2


def test_given_a_batch_split_anywhere_when_each_part_is_judged_then_the_same_changes(
    workload: Workload, reader: StreamReader
) -> None:
    # Given the stream of a workload
    run_everything(workload)
    records = reader.read()
    whole = committed_changes(records)
    # When the records arrive in batches split at any point (Lambda's batch size, a
    # bisected batch, a retry from a failed record)
    for cut in range(1, len(records)):
        parts = committed_changes(records[:cut]) + committed_changes(records[cut:])
        # Then the changes are the same
        assert parts == whole, f"split at {cut}"
    # And record by record too
    one_by_one = [c for r in records if (c := committed_change(r)) is not None]
    assert one_by_one == whole
