"""Read isolation: UNCOMMITTED, COMMITTED (from saved images) and SERIALIZABLE (read lock)."""

from __future__ import annotations

from typing import Any

import pytest

from ddbtx import Isolation, TransactionManager
from ddbtx.instrumentation import count_requests
from helpers import Tables, assert_clean, records_left

COMMITTED, UNCOMMITTED = Isolation.COMMITTED, Isolation.UNCOMMITTED


def read(tm: TransactionManager, tables: Tables, pk: str, isolation: Isolation) -> Any:
    item = tm.get_item(TableName=tables.data, Key={"pk": {"S": pk}}, isolation=isolation)
    return item.get("Item", {}).get("balance", {}).get("N")


@pytest.fixture
def in_flight(tm: TransactionManager, tables: Tables, seed: Any) -> Any:
    """A pending transaction that updated u, inserted n, deleted d and read-locked a missing m."""
    seed(u=1, d=1)
    tx = tm.begin()
    tx.update_item(
        TableName=tables.data,
        Key={"pk": {"S": "u"}},
        UpdateExpression="SET balance = :v",
        ExpressionAttributeValues={":v": {"N": "2"}},
    )
    tx.put_item(TableName=tables.data, Item={"pk": {"S": "n"}, "balance": {"N": "3"}})
    tx.delete_item(TableName=tables.data, Key={"pk": {"S": "d"}})
    tx.get_item(TableName=tables.data, Key={"pk": {"S": "m"}})
    return tx


@pytest.mark.parametrize(
    ("pk", "committed", "uncommitted"),
    [("u", "1", "2"), ("n", None, "3"), ("d", "1", None), ("m", None, None)],
)
def test_given_a_pending_transaction_when_read_then_each_level_sees_what_it_promises(
    tm: TransactionManager,
    tables: Tables,
    in_flight: Any,
    pk: str,
    committed: Any,
    uncommitted: Any,
) -> None:
    # When / Then: COMMITTED never sees uncommitted data; UNCOMMITTED never sees a bare lock holder
    assert read(tm, tables, pk, COMMITTED) == committed
    assert read(tm, tables, pk, UNCOMMITTED) == uncommitted
    in_flight.rollback()


def test_given_a_committed_transaction_when_read_then_both_levels_see_the_new_state(
    tm: TransactionManager, ddb: Any, tables: Tables, in_flight: Any
) -> None:
    in_flight.commit()
    for isolation in (COMMITTED, UNCOMMITTED):
        assert [read(tm, tables, pk, isolation) for pk in "undm"] == ["2", "3", None, None]
    assert_clean(ddb, tables)


def test_given_an_applied_write_when_read_committed_then_it_costs_one_request(
    tm: TransactionManager, tables: Tables, in_flight: Any
) -> None:
    with count_requests(tm.client) as counts:
        assert read(tm, tables, "u", COMMITTED) == "1"
    assert counts.by_operation == {"GetItem": 1}
    in_flight.rollback()


def test_given_an_unlocked_item_when_read_serializable_then_it_is_read_under_a_lock_and_released(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Any
) -> None:
    seed(a=5)
    assert read(tm, tables, "a", Isolation.SERIALIZABLE) == "5"
    assert records_left(ddb, tables.tx) == []
    assert_clean(ddb, tables)
