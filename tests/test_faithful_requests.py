"""Requests behave as DynamoDB does (issue 11, divergence classes 2, 3, 4 and 5).

2. One item, one key: every spelling of a number (``10``, ``1E+1``, ``10.0``,
   ``010``) and a binary value as ``str`` or ``bytes`` name the same item.
3. A request DynamoDB rejects (an unused or undefined placeholder, placeholders
   with no expression) is refused before anything is written, in every path.
4. A key of the wrong type, or with a missing or extra attribute, is refused
   against the table's key schema before anything is recorded.
5. ``UpdateItem`` with no ``UpdateExpression`` makes sure a key-only item exists.

The differential oracle (tests/oracle) compares all of this with native calls;
these are the focused regression tests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ddbtx import DuplicateRequestError, InvalidRequestError, TransactionManager
from ddbtx.tables import create_table_if_missing
from helpers import Tables, assert_clean, records_left, scan, unfenced


@pytest.fixture
def keyed(ddb: Any, table_name: Callable[[str], str]) -> Callable[[str], str]:
    """Make a data table whose hash key ``k`` has the given type (S, N or B)."""

    def make(kind: str) -> str:
        name = table_name(f"keyed{kind}")
        create_table_if_missing(
            ddb,
            name,
            None,
            KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "k", "AttributeType": kind}],
        )
        return name

    return make


def stored(ddb: Any, table: str) -> list[dict[str, Any]]:
    """The table's items, without the fence a lock leaves on its item."""
    return [unfenced(i) for i in scan(ddb, table)]


# --- class 2: one canonical key ---------------------------------------------------

SPELLINGS = ["10", "1E+1", "10.0", "010", "1e1", "10.000"]


@pytest.mark.parametrize("other", SPELLINGS[1:])
def test_given_a_put_under_one_number_spelling_when_read_under_another_then_it_sees_the_put(
    tm: TransactionManager, ddb: Any, tables: Tables, keyed: Callable[[str], str], other: str
) -> None:
    table = keyed("N")
    # Given a transaction that puts item 10 spelled "10"
    with tm.transaction() as tx:
        tx.put_item(TableName=table, Item={"k": {"N": "10"}, "v": {"S": "put"}})
        # When it reads the item back under another spelling of the same number
        seen = tx.get_item(TableName=table, Key={"k": {"N": other}})
    # Then the read is its own write, and the put is what commits
    assert seen == {"Item": {"k": {"N": "10"}, "v": {"S": "put"}}}
    assert stored(ddb, table) == [{"k": {"N": "10"}, "v": {"S": "put"}}]
    assert_clean(ddb, tables)


def test_given_zero_spelled_minus_zero_then_it_is_the_item_zero(
    tm: TransactionManager, ddb: Any, tables: Tables, keyed: Callable[[str], str]
) -> None:
    table = keyed("N")
    with tm.transaction() as tx:
        tx.put_item(TableName=table, Item={"k": {"N": "-0"}, "v": {"S": "zero"}})
        assert tx.get_item(TableName=table, Key={"k": {"N": "0.00"}})["Item"]["v"] == {"S": "zero"}
    assert stored(ddb, table) == [{"k": {"N": "0"}, "v": {"S": "zero"}}]


def test_given_a_38_digit_key_in_exponent_form_then_it_is_the_same_item_as_its_plain_form(
    tm: TransactionManager, ddb: Any, tables: Tables, keyed: Callable[[str], str]
) -> None:
    table = keyed("N")
    plain = "1234567890123456789012345678901234567800"  # 38 significant digits, then zeros
    with tm.transaction() as tx:
        tx.put_item(
            TableName=table, Item={"k": {"N": "1.2345678901234567890123456789012345678E+39"}}
        )
        assert tx.get_item(TableName=table, Key={"k": {"N": plain}}) == {
            "Item": {"k": {"N": plain}}
        }
    assert stored(ddb, table) == [{"k": {"N": plain}}]


def increment(key: dict[str, Any], table: str) -> dict[str, Any]:
    return {
        "TableName": table,
        "Key": key,
        "UpdateExpression": "SET v = v + :one",
        "ExpressionAttributeValues": {":one": {"N": "1"}},
    }


def test_given_two_spellings_of_one_key_in_one_transaction_then_both_increments_count(
    tm: TransactionManager, ddb: Any, tables: Tables, keyed: Callable[[str], str]
) -> None:
    table = keyed("N")
    ddb.put_item(TableName=table, Item={"k": {"N": "10"}, "v": {"N": "1"}})
    # Given one increment of item 10 spelled "10"
    with tm.transaction() as tx:
        tx.update_item(**increment({"k": {"N": "10"}}, table))
        # When the same item is incremented again spelled "1E+1": a second write to it
        tx.update_item(**increment({"k": {"N": "1E+1"}}, table))
    # Then both count, as two native increments would
    assert stored(ddb, table) == [{"k": {"N": "10"}, "v": {"N": "3"}}]
    assert_clean(ddb, tables)


def test_given_two_spellings_of_one_key_in_a_batch_then_the_batch_is_refused(
    tm: TransactionManager, ddb: Any, tables: Tables, keyed: Callable[[str], str]
) -> None:
    table = keyed("N")
    batch = [{"Update": increment({"k": {"N": n}}, table)} for n in ("10", "010")]
    with pytest.raises(DuplicateRequestError):
        tm.transact_write(batch)
    with pytest.raises(DuplicateRequestError), tm.transaction() as tx:
        tx.write_all(batch)
    assert stored(ddb, table) == []


def test_given_two_spellings_in_two_transactions_then_both_increments_count(
    tm: TransactionManager, ddb: Any, tables: Tables, keyed: Callable[[str], str]
) -> None:
    table = keyed("N")
    ddb.put_item(TableName=table, Item={"k": {"N": "10"}, "v": {"N": "1"}})
    for spelling in ("10.0", "1E+1"):
        with tm.transaction() as tx:
            tx.update_item(**increment({"k": {"N": spelling}}, table))
    assert stored(ddb, table) == [{"k": {"N": "10"}, "v": {"N": "3"}}]
    assert_clean(ddb, tables)


def test_given_a_binary_key_as_str_then_it_is_the_same_item_as_its_bytes(
    tm: TransactionManager, ddb: Any, tables: Tables, keyed: Callable[[str], str]
) -> None:
    table = keyed("B")
    # Given a put of a binary key given as text (botocore sends its UTF-8 bytes)
    with tm.transaction() as tx:
        tx.put_item(TableName=table, Item={"k": {"B": "é-1"}, "v": {"S": "text"}})
        # When the same transaction reads it under its bytes: its own write
        seen = tx.get_item(TableName=table, Key={"k": {"B": "é-1".encode()}})
        assert seen == {"Item": {"k": {"B": "é-1".encode()}, "v": {"S": "text"}}}
        # And a delete of the bytes is a second write on the same item: it deletes it
        old = tx.delete_item(
            TableName=table, Key={"k": {"B": bytearray("é-1".encode())}}, ReturnValues="ALL_OLD"
        )
        assert old == {"Attributes": {"k": {"B": "é-1".encode()}, "v": {"S": "text"}}}
    assert stored(ddb, table) == []
    assert_clean(ddb, tables)


# --- classes 3 and 4: refused before anything is written, in every path ------------


def send_tx(tm: TransactionManager, op: str, params: dict[str, Any]) -> None:
    with tm.transaction() as tx:
        getattr(tx, f"{op}_item")(**params)


def send_write_all(tm: TransactionManager, op: str, params: dict[str, Any]) -> None:
    with tm.transaction() as tx:
        tx.write_all([{op.capitalize(): params}])


def send_transact_write(tm: TransactionManager, op: str, params: dict[str, Any]) -> None:
    tm.transact_write([{op.capitalize(): params}])


SENDERS = {"tx": send_tx, "write_all": send_write_all, "transact_write": send_transact_write}

PUT = {"Item": {"pk": {"S": "a"}, "v": {"N": "1"}}}
KEY = {"Key": {"pk": {"S": "a"}}}
REJECTED: dict[str, tuple[str, dict[str, Any]]] = {
    "value-on-put-without-condition": (
        "put",
        {**PUT, "ExpressionAttributeValues": {":x": {"N": "1"}}},
    ),
    "name-on-put-without-condition": ("put", {**PUT, "ExpressionAttributeNames": {"#x": "v"}}),
    "value-on-delete-without-condition": (
        "delete",
        {**KEY, "ExpressionAttributeValues": {":x": {"N": "1"}}},
    ),
    "unused-value-in-condition": (
        "put",
        {
            **PUT,
            "ConditionExpression": "attribute_not_exists(v)",
            "ExpressionAttributeValues": {":x": {"N": "1"}},
        },
    ),
    "unused-name-in-condition": (
        "delete",
        {
            **KEY,
            "ConditionExpression": "attribute_exists(v)",
            "ExpressionAttributeNames": {"#x": "v"},
        },
    ),
    "unused-value-in-update": (
        "update",
        {
            **KEY,
            "UpdateExpression": "SET v = :a",
            "ExpressionAttributeValues": {":a": {"N": "1"}, ":b": {"N": "2"}},
        },
    ),
    "unused-name-beside-update-and-condition": (
        "update",
        {
            **KEY,
            "UpdateExpression": "SET #v = :a",
            "ConditionExpression": "attribute_exists(#w)",
            "ExpressionAttributeNames": {"#v": "v", "#w": "w", "#z": "z"},
            "ExpressionAttributeValues": {":a": {"N": "1"}},
        },
    ),
    "value-on-update-without-expression": (
        "update",
        {**KEY, "ExpressionAttributeValues": {":a": {"N": "1"}}},
    ),
    "empty-values": (
        "put",
        {**PUT, "ConditionExpression": "attribute_not_exists(v)", "ExpressionAttributeValues": {}},
    ),
    "empty-names": (
        "put",
        {**PUT, "ConditionExpression": "attribute_not_exists(v)", "ExpressionAttributeNames": {}},
    ),
    "undefined-value": ("update", {**KEY, "UpdateExpression": "SET v = :nowhere"}),
    "undefined-name": ("delete", {**KEY, "ConditionExpression": "attribute_exists(#nowhere)"}),
    # The protocol's own placeholders must never stand in for a user's undefined one.
    "protocol-name-undefined": ("put", {**PUT, "ConditionExpression": "attribute_exists(#ddbtxl)"}),
    "protocol-value-undefined": (
        "update",
        {
            **KEY,
            "UpdateExpression": "SET v = :ddbtxt",
            "ExpressionAttributeValues": {":a": {"N": "1"}},
        },
    ),
    "bad-placeholder-syntax": (
        "put",
        {
            **PUT,
            "ConditionExpression": "attribute_not_exists(#a)",
            "ExpressionAttributeNames": {"#a": "v", "#b-c": "w"},
        },
    ),
    # class 4: the key against the table's key schema (pk is a string)
    "key-of-wrong-type": (
        "update",
        {
            "Key": {"pk": {"N": "1"}},
            "UpdateExpression": "SET v = :a",
            "ExpressionAttributeValues": {":a": {"N": "1"}},
        },
    ),
    "item-key-of-wrong-type": ("put", {"Item": {"pk": {"B": b"a"}}}),
    "key-with-extra-attribute": ("delete", {"Key": {"pk": {"S": "a"}, "sk": {"S": "b"}}}),
    "key-missing-its-attribute": ("delete", {"Key": {"other": {"S": "a"}}}),
    "number-key-too-precise": ("delete", {"Key": {"pk": {"N": "1" * 39}}}),
}


@pytest.mark.parametrize("path", list(SENDERS))
@pytest.mark.parametrize("case", list(REJECTED))
def test_given_a_request_dynamodb_rejects_then_it_is_refused_before_anything_is_written(
    tm: TransactionManager, ddb: Any, tables: Tables, case: str, path: str
) -> None:
    # Given an item
    ddb.put_item(TableName=tables.data, Item={"pk": {"S": "a"}, "v": {"N": "0"}})
    op, params = REJECTED[case]
    # When it is sent through this path: InvalidRequestError (natively a ValidationException)
    with pytest.raises(InvalidRequestError):
        SENDERS[path](tm, op, {"TableName": tables.data, **params})
    # Then nothing was written: not the item, not a TX record, not an image
    assert stored(ddb, tables.data) == [{"pk": {"S": "a"}, "v": {"N": "0"}}]
    assert records_left(ddb, tables.tx) == []
    assert_clean(ddb, tables)


def test_given_a_rejected_request_then_the_transaction_goes_on_and_commits_the_rest(
    tm: TransactionManager, ddb: Any, tables: Tables
) -> None:
    with tm.transaction() as tx:
        tx.put_item(TableName=tables.data, Item={"pk": {"S": "b"}})
        for op, params in REJECTED.values():
            with pytest.raises(InvalidRequestError):
                getattr(tx, f"{op}_item")(TableName=tables.data, **params)
        tx.put_item(TableName=tables.data, Item={"pk": {"S": "c"}})
    assert sorted(i["pk"]["S"] for i in scan(ddb, tables.data)) == ["b", "c"]
    assert_clean(ddb, tables)


def test_given_key_types_in_key_schemas_then_they_are_checked_without_describe_table(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables
) -> None:
    tm = make_tm(key_schemas={tables.data: {"pk": "S"}})
    # (DynamoDB's own words for a Key of the wrong type, before anything is sent)
    not_the_schema = "The provided key element does not match the schema"
    with pytest.raises(InvalidRequestError, match=not_the_schema), tm.transaction() as tx:
        tx.delete_item(TableName=tables.data, Key={"pk": {"N": "1"}})
    assert records_left(ddb, tables.tx) == []


# --- class 5: UpdateItem without an UpdateExpression -------------------------------


@pytest.mark.parametrize("path", ["tx", "write_all", "transact_write"])
def test_given_no_update_expression_on_a_missing_item_then_a_key_only_item_is_made(
    tm: TransactionManager, ddb: Any, tables: Tables, path: str
) -> None:
    SENDERS[path](tm, "update", {"TableName": tables.data, "Key": {"pk": {"S": "new"}}})
    assert stored(ddb, tables.data) == [{"pk": {"S": "new"}}]
    assert_clean(ddb, tables)


@pytest.mark.parametrize("exists", [False, True])
def test_given_no_update_expression_then_return_values_are_dynamodbs(
    tm: TransactionManager, ddb: Any, tables: Tables, exists: bool
) -> None:
    item = {"pk": {"S": "a"}, "v": {"N": "7"}}
    if exists:
        ddb.put_item(TableName=tables.data, Item=item)
    expected = item if exists else {"pk": {"S": "a"}}
    with tm.transaction() as tx:
        new = tx.update_item(TableName=tables.data, Key={"pk": {"S": "a"}}, ReturnValues="ALL_NEW")
    assert new == {"Attributes": expected}
    with tm.transaction() as tx:
        updated = tx.update_item(
            TableName=tables.data,
            Key={"pk": {"S": "a"}},
            ConditionExpression="attribute_exists(pk)",
            ReturnValues="UPDATED_NEW",
        )
        old = tx.update_item(TableName=tables.data, Key={"pk": {"S": "b"}}, ReturnValues="ALL_OLD")
    assert (updated, old) == ({}, {})
    assert sorted(stored(ddb, tables.data), key=lambda i: i["pk"]["S"]) == [
        expected,
        {"pk": {"S": "b"}},
    ]
    assert_clean(ddb, tables)
