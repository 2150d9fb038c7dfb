"""The janitor in the window between a commit decision and its completion (issue 34, item 4).

A coordinator that dies right after deciding commit leaves a committed, not completed
record, its items still locked and holding the committed writes (their images beside
them). The sweeper's stray-lock pass must leave those locks alone, whether it reads the
lock index or scans the table: undoing them would restore the images over committed data.
Completion is the record pass's, once ``decided_grace`` has passed. Both emulators.

Planted check: a stray-lock pass that also undoes the locks of a decided record (the
condition in ``_janitors/scan.py`` widened to ``found.state != PENDING``) fails all four
cases here, restoring a and b to 10; no other test of the suite noticed it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from ddbtx import TransactionManager
from ddbtx import schema as s
from ddbtx.chaos import Chaos, Crash
from ddbtx.sweeper import Sweeper
from ddbtx.tables import create_data_table
from helpers import FakeClock, Tables, assert_clean, data_state


def add(table: str, pk: str, amount: int) -> dict[str, Any]:
    return {
        "TableName": table,
        "Key": {"pk": {"S": pk}},
        "UpdateExpression": "ADD balance :n",
        "ExpressionAttributeValues": {":n": {"N": str(amount)}},
    }


def decided_then_dead(tm: TransactionManager, table: str) -> str:
    """A transfer of 5 from a to b whose coordinator dies just after the commit decision,
    before it completes anything. Returns its id."""
    tx = tm.begin()
    tx.update_item(**add(table, "a", -5))
    tx.update_item(**add(table, "b", 5))
    chaos = Chaos(tm.client)
    chaos.arm("before", at=1)  # the decision is the commit's first call; the next one dies
    with pytest.raises(Crash):
        tx.commit()
    chaos.close()
    header = tm.protocol.run(tm.protocol.records.read_header(tx.id))
    assert header is not None and header.state == s.STATE_COMMITTED and not header.completed
    return tx.id


@pytest.mark.parametrize("indexed", [True, False], ids=["lock-index", "table-scan"])
def test_given_a_commit_decided_but_not_completed_when_data_tables_are_swept_then_it_stands(
    make_tm: Callable[..., TransactionManager],
    ddb: Any,
    tables: Tables,
    table_name: Callable[[str], str],
    clock: FakeClock,
    indexed: bool,
) -> None:
    # Given a and b (10 each), and a transfer decided committed whose coordinator then died
    data = table_name("accounts")
    create_data_table(ddb, data, lock_index=indexed)
    for pk in ("a", "b"):
        ddb.put_item(TableName=data, Item={"pk": {"S": pk}, "balance": {"N": "10"}})
    tm = make_tm(max_workers=1)
    tx_id = decided_then_dead(tm, data)
    sweeper = Sweeper(
        make_tm(),
        rollback_after=timedelta(minutes=1),
        delete_after=timedelta(days=1),
        decided_grace=timedelta(seconds=30),
        data_tables=[data],
        persist_cursor=False,
    )

    # When the sweeper runs within the grace (the record is younger than decided_grace)
    sweeper.run()

    # Then the committed writes stand on the items (still locked, their completion pending)
    items = data_state(ddb, data)
    assert [items[pk]["balance"]["N"] for pk in ("a", "b")] == ["5", "15"]
    assert all(items[pk][s.ATTR_LOCK]["S"].startswith(tx_id) for pk in ("a", "b"))

    # And once the grace has passed, a sweep completes the transaction
    clock.advance(31)
    sweeper.run()
    items = data_state(ddb, data)
    assert [items[pk]["balance"]["N"] for pk in ("a", "b")] == ["5", "15"]
    assert_clean(ddb, Tables(tables.tx, tables.images, data))
