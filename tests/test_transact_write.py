"""The one-shot fast path: one TransactWriteItems call when uncontended, the protocol otherwise."""

from __future__ import annotations

from typing import Any

import pytest

from ddbtx import (
    ConditionalCheckFailedError,
    DuplicateRequestError,
    InvalidRequestError,
    TransactionManager,
)
from ddbtx.instrumentation import count_requests
from helpers import Tables, assert_clean, data_state


def transfer(tables: Tables, amount: int) -> list[dict[str, Any]]:
    return [
        {
            "Update": {
                "TableName": tables.data,
                "Key": {"pk": {"S": "a"}},
                "UpdateExpression": "SET balance = balance - :n",
                "ConditionExpression": "balance >= :n",
                "ExpressionAttributeValues": {":n": {"N": str(amount)}},
            }
        },
        {"Put": {"TableName": tables.data, "Item": {"pk": {"S": "log"}, "n": {"N": str(amount)}}}},
        {"Delete": {"TableName": tables.data, "Key": {"pk": {"S": "gone"}}}},
    ]


@pytest.fixture
def native(backend: Any) -> bool:
    """dynalite has no TransactWriteItems: the same calls then run the general protocol."""
    if backend.kind == "dynalite":
        print("dynalite lacks TransactWriteItems: transact_write takes the protocol path there")
    return backend.kind == "moto"


def test_given_uncontended_writes_when_transact_write_then_one_native_call_applies_all(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Any, native: bool
) -> None:
    seed(a=100, gone=1)
    tm.key_names(tables.data)
    with count_requests(tm.client) as counts:
        path = tm.transact_write(transfer(tables, 30))
    assert path == ("native" if native else "protocol")
    if native:
        assert counts.by_operation == {"TransactWriteItems": 1}
    assert data_state(ddb, tables.data) == {
        "a": {"pk": {"S": "a"}, "balance": {"N": "70"}},
        "log": {"pk": {"S": "log"}, "n": {"N": "30"}},
    }
    assert_clean(ddb, tables)


def test_given_an_item_locked_by_a_protocol_transaction_when_transact_write_then_it_waits_its_turn(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given an older protocol transaction holding a
    seed(a=100, gone=1)
    holder = make_tm().begin()
    holder.update_item(
        TableName=tables.data,
        Key={"pk": {"S": "a"}},
        UpdateExpression="ADD balance :n",
        ExpressionAttributeValues={":n": {"N": "1"}},
    )
    holder.commit()
    stuck = make_tm().begin()
    stuck.update_item(
        TableName=tables.data,
        Key={"pk": {"S": "gone"}},
        UpdateExpression="SET x = :n",
        ExpressionAttributeValues={":n": {"N": "1"}},
    )
    # When the fast path meets the lock, the general protocol resolves it (stale holder broken)
    path = make_tm(stale_after=0.5).transact_write(transfer(tables, 30))
    # Then the result is the same as without contention
    assert path == "protocol"
    assert data_state(ddb, tables.data)["a"]["balance"] == {"N": "71"}
    assert "gone" not in data_state(ddb, tables.data)
    assert_clean(ddb, tables)


def test_given_a_false_condition_when_transact_write_then_nothing_is_written(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Any
) -> None:
    seed(a=10, gone=1)
    before = data_state(ddb, tables.data)
    with pytest.raises(ConditionalCheckFailedError):
        tm.transact_write(transfer(tables, 30))
    assert data_state(ddb, tables.data) == before
    assert_clean(ddb, tables)


@pytest.mark.parametrize(
    ("requests", "error"),
    [
        ([{"Get": {}}], InvalidRequestError),
        (
            [{"Put": {"TableName": "x", "Item": {"pk": {"S": "a"}}}, "Delete": {}}],
            InvalidRequestError,
        ),
        ("dup", DuplicateRequestError),
    ],
)
def test_given_bad_requests_when_transact_write_then_rejected_before_writing(
    tm: TransactionManager, ddb: Any, tables: Tables, requests: Any, error: type[Exception]
) -> None:
    if requests == "dup":
        put = {"Put": {"TableName": tables.data, "Item": {"pk": {"S": "a"}}}}
        requests = [put, put]
    with count_requests(tm.client) as counts, pytest.raises(error):
        tm.transact_write(requests)
    assert counts.writes == 0
    assert data_state(ddb, tables.data) == {}
