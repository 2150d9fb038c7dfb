"""Bad input: each case raises an error naming the problem and ends with nothing changed.

Every transaction runs in ``tm.transaction()``, as an application would: on the
error it rolls back and deletes its TX record. Afterwards the data table is
exactly as before and no lock attribute, image or TX record is left.
Malformed recovery events are covered with the recovery handler
(tests/janitors/test_recovery_handler.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ParamValidationError

from ddbtx import (
    InvalidRequestError,
    TransactionManager,
)
from ddbtx import schema as s
from ddbtx.errors import TableNotFound
from helpers import Tables, assert_clean, boto3_refusal, data_state, records_left, scan

LIMIT = 400 * 1024


@pytest.fixture
def unchanged(ddb: Any, tables: Tables, seed: Callable[..., None]) -> Iterator[dict[str, Any]]:
    """Seed two accounts; after the test, assert the data and images are untouched and the
    TX table holds only completed records, each with its TTL (kept as a fence against late
    copies until the janitors delete it: docs/protocol.md)."""
    seed(a=100, b=5)
    before = data_state(ddb, tables.data)
    yield before
    assert data_state(ddb, tables.data) == before
    assert_clean(ddb, tables)
    left = [r for r in scan(ddb, tables.tx) if not (r.get(s.TX_COMPLETED) and s.TX_TTL in r)]
    assert left == [], "a TX record was left behind not completed"


def key(pk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}}


def add(tx: Any, table: str, pk: str, amount: int = 1) -> None:
    tx.update_item(
        TableName=table,
        Key=key(pk),
        UpdateExpression="ADD balance :n",
        ExpressionAttributeValues={":n": {"N": str(amount)}},
    )


def fill_to_limit(ddb: Any, table: str, pk: str) -> None:
    """Store the largest item the backend accepts (emulators size items slightly differently)."""
    fits, too_big = 0, LIMIT
    while too_big - fits > 1:
        middle = (fits + too_big) // 2
        try:
            ddb.put_item(TableName=table, Item={**key(pk), "blob": {"S": "x" * middle}})
            fits = middle
        except ddb.exceptions.ClientError as exc:
            assert "size" in str(exc)
            too_big = middle
    ddb.put_item(TableName=table, Item={**key(pk), "blob": {"S": "x" * fits}})


def test_given_a_reserved_attribute_name_in_an_item_then_the_put_is_refused_by_name(
    tm: TransactionManager, tables: Tables, unchanged: dict[str, Any]
) -> None:
    with pytest.raises(InvalidRequestError, match="_tx:id"), tm.transaction() as tx:
        add(tx, tables.data, "a")
        tx.put_item(TableName=tables.data, Item={**key("b"), s.ATTR_LOCK: {"S": "x/y"}})


@pytest.mark.parametrize("expression", ["update", "condition"])
def test_given_a_reserved_name_behind_expression_attribute_names_then_it_is_refused_by_name(
    tm: TransactionManager, tables: Tables, unchanged: dict[str, Any], expression: str
) -> None:
    params: dict[str, Any] = {
        "TableName": tables.data,
        "Key": key("b"),
        "UpdateExpression": "SET #x = :v",
        "ExpressionAttributeNames": {"#x": "note", "#r": s.ATTR_IMAGE},
        "ExpressionAttributeValues": {":v": {"S": "hi"}},
    }
    if expression == "update":
        params["UpdateExpression"] = "SET #r = :v"
        del params["ExpressionAttributeNames"]["#x"]
    else:
        params["ConditionExpression"] = "attribute_not_exists(#r)"
    refused = pytest.raises(InvalidRequestError, match=f"{s.ATTR_IMAGE}.*behind #r")
    with refused, tm.transaction() as tx:
        add(tx, tables.data, "a")
        tx.update_item(**params)


@pytest.mark.parametrize(
    "update", ["SET = :n", "SET balance = :n ADD", "REMOVE :n", "SET balance = balance + :n +"]
)
def test_given_an_invalid_update_expression_then_dynamodb_rejects_it_and_all_is_undone(
    tm: TransactionManager, tables: Tables, unchanged: dict[str, Any], update: str
) -> None:
    with pytest.raises(InvalidRequestError, match="rejected"), tm.transaction() as tx:
        add(tx, tables.data, "a")
        tx.update_item(
            TableName=tables.data,
            Key=key("b"),
            UpdateExpression=update,
            ExpressionAttributeValues={":n": {"N": "1"}},
        )


def test_given_a_type_error_only_the_apply_can_find_then_the_whole_transaction_is_undone(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Callable[..., None]
) -> None:
    # Given an account whose balance is a string: adding a number fails only when applied
    ddb.put_item(TableName=tables.data, Item={**key("s"), "balance": {"S": "lots"}})
    seed(a=100)
    before = data_state(ddb, tables.data)
    # When a transaction credits a, then adds to s
    with pytest.raises(InvalidRequestError, match="rejected"), tm.transaction() as tx:
        add(tx, tables.data, "a", 10)
        add(tx, tables.data, "s", 10)
    # Then a's credit is rolled back too, and nothing is left
    assert data_state(ddb, tables.data) == before
    assert_clean(ddb, tables)
    assert records_left(ddb, tables.tx) == []


def test_given_an_empty_transaction_then_commit_writes_nothing(
    tm: TransactionManager, ddb: Any, tables: Tables, unchanged: dict[str, Any]
) -> None:
    tx = tm.begin()
    tx.commit()
    tx.delete()
    assert tx.state == s.STATE_COMMITTED


@pytest.mark.parametrize(
    "bad_key",
    [{}, None, {"pk": {"S": ""}}, {"pk": {"S": "a"}, "extra": {"S": "x"}}, {"pk": "a"}],
    ids=["empty", "missing", "empty-string", "extra-attribute", "not-an-attribute-value"],
)
def test_given_an_empty_missing_or_malformed_key_then_the_request_is_refused(
    tm: TransactionManager, tables: Tables, unchanged: dict[str, Any], bad_key: Any
) -> None:
    params: dict[str, Any] = {"TableName": tables.data, "UpdateExpression": "ADD balance :n"}
    params["ExpressionAttributeValues"] = {":n": {"N": "1"}}
    if bad_key is not None:
        params["Key"] = bad_key
    # boto3 refuses some itself (ParamValidationError): inside a transaction, so does ddbtx
    native = boto3_refusal(tm.client, "update_item", params)
    refused = (ParamValidationError, InvalidRequestError)[native is None]
    expected = pytest.raises(refused, match=re.escape(native) if native else r"[Kk]ey")
    with expected, tm.transaction() as tx:
        add(tx, tables.data, "a")
        tx.update_item(**params)


def test_given_a_missing_table_then_the_request_names_it(
    tm: TransactionManager, tables: Tables, unchanged: dict[str, Any]
) -> None:
    # DynamoDB's own ResourceNotFoundException (as natively), naming the table
    with pytest.raises(TableNotFound, match="no-such-table"), tm.transaction() as tx:
        add(tx, tables.data, "a")
        tx.update_item(
            TableName="no-such-table",
            Key=key("a"),
            UpdateExpression="ADD balance :n",
            ExpressionAttributeValues={":n": {"N": "1"}},
        )


def test_given_an_item_over_400_kb_with_protocol_attributes_then_the_put_is_refused(
    tm: TransactionManager, tables: Tables, unchanged: dict[str, Any]
) -> None:
    # Given an item under DynamoDB's limit on its own, but not with the lock attributes
    big = {**key("big"), "blob": {"S": "x" * (LIMIT - 60)}}
    # When / Then
    with pytest.raises(InvalidRequestError, match=r"byte DynamoDB limit"), tm.transaction() as tx:
        add(tx, tables.data, "a")
        tx.put_item(TableName=tables.data, Item=big)


def test_given_an_item_over_400_kb_then_the_put_is_refused(
    tm: TransactionManager, tables: Tables, unchanged: dict[str, Any]
) -> None:
    with pytest.raises(InvalidRequestError, match="limit"), tm.transaction() as tx:
        tx.put_item(TableName=tables.data, Item={**key("big"), "blob": {"S": "x" * LIMIT}})


@pytest.mark.parametrize("request_kind", ["read", "update"])
def test_given_a_stored_item_at_the_limit_when_the_lock_would_push_it_over_then_it_is_refused(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Callable[..., None], request_kind: str
) -> None:
    # Given an item written directly, so close to the limit that no lock attribute fits
    fill_to_limit(ddb, tables.data, "full")
    seed(a=100)
    before = data_state(ddb, tables.data)
    # When a transaction credits a, then reads or updates the full item
    with pytest.raises(InvalidRequestError), tm.transaction() as tx:
        add(tx, tables.data, "a", 10)
        if request_kind == "read":
            tx.get_item(TableName=tables.data, Key=key("full"))
        else:
            add(tx, tables.data, "full")
    # Then the request is refused, a's credit is rolled back and nothing is left
    assert data_state(ddb, tables.data) == before
    assert_clean(ddb, tables)
    assert records_left(ddb, tables.tx) == []


def test_given_a_forged_lock_pointing_to_a_missing_record_then_a_transaction_clears_it(
    tm: TransactionManager, ddb: Any, tables: Tables
) -> None:
    # Given a user write that forged a lock attribute naming a transaction that never existed
    forged = {**key("f"), "balance": {"N": "3"}, s.ATTR_LOCK: {"S": "0000000000000000-ffff/nonce"}}
    ddb.put_item(TableName=tables.data, Item=forged)
    # When a committed read, then a transaction, use the item
    seen = tm.get_item(TableName=tables.data, Key=key("f"))
    with tm.transaction() as tx:
        add(tx, tables.data, "f", 4)
    # Then the read saw the item as written, the transaction applied, and the lock is gone
    assert seen == {"Item": {**key("f"), "balance": {"N": "3"}}}
    assert data_state(ddb, tables.data) == {"f": {**key("f"), "balance": {"N": "7"}}}
    assert_clean(ddb, tables)
    assert records_left(ddb, tables.tx) == []
