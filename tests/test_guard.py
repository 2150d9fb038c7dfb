"""``ddbtx.guard``: a plain write guarded by it cannot clobber an item a transaction has
locked, while the same write unguarded can; on unlocked items a guarded write does
exactly what the native request does (same result, same error, same Attributes).

Both boto3 shapes, on both emulators: the client's (typed values, string
expressions) and the resource's (Python values, ``boto3.dynamodb.conditions``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import boto3
import pytest
from boto3.dynamodb.conditions import Attr
from botocore.exceptions import ClientError

import ddbtx
from ddbtx import TransactionManager
from ddbtx import schema as s
from ddbtx.local import LOCAL_CREDENTIALS, LocalDynamo
from ddbtx.tables import create_data_table
from helpers import Tables, unfenced

N = lambda v: {"N": str(v)}  # noqa: E731
S = lambda v: {"S": v}  # noqa: E731
SEEDED = {"a": 100, "b": 5, "c": 0}


@pytest.fixture
def resource(backend: LocalDynamo) -> Any:
    """boto3's resource API on the same emulator."""
    return boto3.resource("dynamodb", endpoint_url=backend.endpoint_url, **LOCAL_CREDENTIALS)


@pytest.fixture
def twin(ddb: Any, tables: Tables, table_name: Callable[[str], str]) -> str:
    """A second data table; both it and ``tables.data`` are seeded with the same items."""
    name = table_name("twin")
    create_data_table(ddb, name)
    for table in (tables.data, name):
        for pk, balance in SEEDED.items():
            item = {"pk": S(pk), "balance": N(balance), "tags": {"SS": ["x", "y"]}}
            ddb.put_item(TableName=table, Item=item)
    return name


@pytest.fixture
def locked_a(tm: TransactionManager, tables: Tables, ddb: Any) -> Iterator[Any]:
    """Item "a" (balance 100) debited by a live ddbtx transaction that holds its lock."""
    ddb.put_item(TableName=tables.data, Item={"pk": S("a"), "balance": N(100)})
    tx = tm.begin()
    tx.update_item(
        TableName=tables.data,
        Key={"pk": S("a")},
        UpdateExpression="SET balance = balance - :n",
        ExpressionAttributeValues={":n": N(30)},
    )
    yield tx


def read(ddb: Any, table: str, pk: str) -> dict[str, Any] | None:
    item: dict[str, Any] | None = ddb.get_item(
        TableName=table, Key={"pk": S(pk)}, ConsistentRead=True
    ).get("Item")
    return None if item is None else unfenced(item)  # the fence stays on locked items


def outcome(send: Callable[..., Any], params: dict[str, Any]) -> tuple[str | None, Any]:
    """(error code or None, response without metadata / the error's extra fields).

    The table name in ``ConsumedCapacity`` is dropped: the twin requests go to two tables.
    """
    try:
        response = dict(send(**params))
    except ClientError as exc:
        extra = {k: v for k, v in exc.response.items() if k not in ("ResponseMetadata", "Error")}
        reasons = [r.get("Code") for r in extra.pop("CancellationReasons", [])]
        return exc.response["Error"]["Code"], {**extra, "reasons": reasons}
    response.pop("ResponseMetadata", None)
    capacity = response.pop("ConsumedCapacity", None)
    if isinstance(capacity, dict):
        response["ConsumedCapacity"] = {k: v for k, v in capacity.items() if k != "TableName"}
    return None, response


def skip_transactions_on_dynalite(backend: LocalDynamo, params: dict[str, Any]) -> None:
    if backend.kind == "dynalite" and "TransactItems" in params:
        # TransactWriteItems is part of DynamoDB's API (API_TransactWriteItems); dynalite
        # predates it and answers UnknownOperationException.
        pytest.skip("dynalite does not implement TransactWriteItems")


# --- a locked item ------------------------------------------------------------------


def client_writes(table: str) -> dict[str, dict[str, Any]]:
    key = {"pk": S("a")}
    return {
        "put": {"TableName": table, "Item": {"pk": S("a"), "balance": N(0)}},
        "update": {
            "TableName": table,
            "Key": key,
            "UpdateExpression": "SET balance = :z",
            "ConditionExpression": "balance > :z",
            "ExpressionAttributeValues": {":z": N(0)},
        },
        "delete": {"TableName": table, "Key": key},
        # An OR that holds on the locked item: AND-ed without parentheses, the guard
        # would bind to its first half only and the write would go through.
        "update-or": {
            "TableName": table,
            "Key": key,
            "UpdateExpression": "SET balance = :z",
            "ConditionExpression": "balance > :z OR attribute_exists(pk)",
            "ExpressionAttributeValues": {":z": N(0)},
        },
    }


@pytest.mark.parametrize(
    "kind", ["put", "update", "update-or", "delete", "transact_put", "transact_update"]
)
def test_given_a_locked_item_then_a_guarded_client_write_fails_and_an_unguarded_one_clobbers(
    kind: str, locked_a: Any, tables: Tables, ddb: Any, backend: LocalDynamo
) -> None:
    # Given item "a" locked (and already debited to 70) by a live transaction
    locked_before = read(ddb, tables.data, "a")
    assert locked_before is not None and ddbtx.is_locked(locked_before)
    op, _, shape = kind.partition("_")
    params = client_writes(tables.data)[shape or op]
    if op == "transact":
        params = {"TransactItems": [{shape.capitalize(): params}]}
    send = (
        ddb.transact_write_items
        if op == "transact"
        else getattr(ddb, f"{op.removesuffix('-or')}_item")
    )
    skip_transactions_on_dynalite(backend, params)

    # When the guarded plain write is sent
    code, _ = outcome(send, ddbtx.guard(params))

    # Then it fails on its condition and the item, lock and saved image included, is untouched
    expected = (
        "TransactionCanceledException" if op == "transact" else "ConditionalCheckFailedException"
    )
    assert code == expected
    assert read(ddb, tables.data, "a") == locked_before

    # When the same write is sent unguarded; Then it succeeds over the transaction's
    # write (a put or delete also drops the lock and the saved image with it)
    assert outcome(send, params)[0] is None
    after = read(ddb, tables.data, "a")
    assert after is None or after["balance"] == N(0)
    if not (shape or op).startswith("update"):
        assert not ddbtx.is_locked(after)


def test_given_guarded_writers_then_the_transaction_holding_the_lock_commits_its_value(
    locked_a: Any, tables: Tables, ddb: Any, resource: Any
) -> None:
    # Given a transaction holding "a" (100 -> 70); When plain writers try, guarded, in
    # both shapes
    table = resource.Table(tables.data)
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        ddb.put_item(**ddbtx.guard(client_writes(tables.data)["put"]))
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        table.put_item(**ddbtx.guard({"Item": {"pk": "a", "balance": 1}}))
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        table.update_item(
            **ddbtx.guard(
                {
                    "Key": {"pk": "a"},
                    "UpdateExpression": "ADD balance :one",
                    "ConditionExpression": Attr("balance").exists(),
                    "ExpressionAttributeValues": {":one": 1},
                }
            )
        )

    # Then the transaction still commits, and its value is the item's
    locked_a.commit()
    assert read(ddb, tables.data, "a") == {"pk": S("a"), "balance": N(70)}


# --- unlocked items: the guarded request is the native request -------------------------


def client_cases(table: str) -> dict[str, dict[str, Any]]:
    key = {"pk": S("a")}
    return {
        "put new": {"TableName": table, "Item": {"pk": S("new"), "balance": N(1)}},
        "put over, ALL_OLD": {
            "TableName": table,
            "Item": {"pk": S("a"), "balance": N(1)},
            "ReturnValues": "ALL_OLD",
        },
        "put, condition false": {
            "TableName": table,
            "Item": {"pk": S("a")},
            "ConditionExpression": "attribute_not_exists(pk)",
        },
        "update, OR condition true, ALL_NEW": {
            "TableName": table,
            "Key": key,
            "UpdateExpression": "SET balance = balance - :n",
            # An OR, so that a guard AND-ed without parentheses would change its meaning
            "ConditionExpression": "balance >= :n OR attribute_not_exists(balance)",
            "ExpressionAttributeValues": {":n": N(10)},
            "ReturnValues": "ALL_NEW",
        },
        "update, OR condition false, ALL_OLD on failure": {
            "TableName": table,
            "Key": {"pk": S("b")},
            "UpdateExpression": "SET balance = balance - :n",
            "ConditionExpression": "balance >= :n OR attribute_not_exists(balance)",
            "ExpressionAttributeValues": {":n": N(10)},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        },
        "update, placeholders named like the guard's": {
            "TableName": table,
            "Key": key,
            "UpdateExpression": "SET #ddbtxLock = :v, #ddbtxLock2 = :v",
            "ConditionExpression": "#ddbtxLock2 <> :v",
            "ExpressionAttributeNames": {"#ddbtxLock": "note", "#ddbtxLock2": "memo"},
            "ExpressionAttributeValues": {":v": S("hi")},
            "ReturnValues": "UPDATED_NEW",
        },
        "update an absent item, UPDATED_OLD": {
            "TableName": table,
            "Key": {"pk": S("zzz")},
            "UpdateExpression": "ADD balance :one",
            "ExpressionAttributeValues": {":one": N(1)},
            "ReturnValues": "UPDATED_OLD",
        },
        "delete, condition false": {
            "TableName": table,
            "Key": {"pk": S("absent")},
            "ConditionExpression": "attribute_exists(pk)",
        },
        "delete, ALL_OLD": {"TableName": table, "Key": {"pk": S("c")}, "ReturnValues": "ALL_OLD"},
        "bad expression": {
            "TableName": table,
            "Key": key,
            "ConditionExpression": "balance >>= :n",
            "ExpressionAttributeValues": {":n": N(1)},
        },
    }


def transact_cases(table: str) -> dict[str, dict[str, Any]]:
    cases = client_cases(table)
    put, update = cases["put over, ALL_OLD"], cases["update, OR condition true, ALL_NEW"]
    put = {k: v for k, v in put.items() if k != "ReturnValues"}
    update = {k: v for k, v in update.items() if k != "ReturnValues"}
    check = {
        "TableName": table,
        "Key": {"pk": S("b")},
        "ConditionExpression": "balance > :n",
        "ExpressionAttributeValues": {":n": N(1)},
    }
    return {
        "transact: put + update + check": {
            "TransactItems": [{"Put": put}, {"Update": update}, {"ConditionCheck": check}]
        },
        "transact: a false condition": {
            "TransactItems": [
                {"Update": update},
                {"Delete": cases["delete, condition false"]},
            ]
        },
    }


def retarget(params: dict[str, Any], table: str) -> dict[str, Any]:
    """The same request on another table."""
    out = copy.deepcopy(params)
    for part in [out, *(next(iter(i.values())) for i in out.get("TransactItems", []))]:
        if "TableName" in part:
            part["TableName"] = table
    return out


@pytest.mark.parametrize("case", [*client_cases("t"), *transact_cases("t")])
def test_given_unlocked_items_then_a_guarded_client_request_behaves_as_the_native_one(
    case: str, tables: Tables, twin: str, ddb: Any, backend: LocalDynamo
) -> None:
    # Given two tables with the same items, none locked, and one request
    native = {**client_cases(tables.data), **transact_cases(tables.data)}[case]
    skip_transactions_on_dynalite(backend, native)
    guarded = ddbtx.guard(retarget(native, twin))
    op = "transact_write_items" if "TransactItems" in native else _client_op(native)

    # When it is sent natively to one table and guarded to the other; Then the answers
    # (error code, Attributes, Item on failure, cancellation reasons) and the tables
    # afterwards are the same
    assert_same(ddb, (getattr(ddb, op), native, tables.data), (getattr(ddb, op), guarded, twin))


def _client_op(params: dict[str, Any]) -> str:
    if "Item" in params:
        return "put_item"
    return "update_item" if "UpdateExpression" in params else "delete_item"


def _rows(ddb: Any, table: str) -> list[dict[str, Any]]:
    return sorted(ddb.scan(TableName=table, ConsistentRead=True)["Items"], key=str)


Sent = tuple[Callable[..., Any], dict[str, Any], str]  # (send, params, table it writes)


def assert_same(ddb: Any, native: Sent, guarded: Sent) -> None:
    """Send both requests; their outcomes and their tables afterwards must be equal."""
    native_outcome = outcome(native[0], native[1])
    guarded_outcome = outcome(guarded[0], guarded[1])
    assert guarded_outcome == native_outcome
    assert _rows(ddb, guarded[2]) == _rows(ddb, native[2])


def resource_cases() -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        "put, condition object true, ALL_OLD": (
            "put_item",
            {
                "Item": {"pk": "a", "balance": 1},
                "ConditionExpression": Attr("balance").gte(50) & Attr("tags").contains("x"),
                "ReturnValues": "ALL_OLD",
            },
        ),
        "put, condition object false": (
            "put_item",
            {"Item": {"pk": "b"}, "ConditionExpression": Attr("balance").gt(Decimal(5))},
        ),
        "update, condition object and the request's own names and values": (
            "update_item",
            {
                "Key": {"pk": "a"},
                "UpdateExpression": "SET #note = :hello",
                "ConditionExpression": Attr("balance").lt(1000) | Attr("x").exists(),
                "ExpressionAttributeNames": {"#note": "note"},
                "ExpressionAttributeValues": {":hello": "hello"},
                "ReturnValues": "ALL_NEW",
            },
        ),
        "update, string condition, python values": (
            "update_item",
            {
                "Key": {"pk": "c"},
                "UpdateExpression": "SET balance = balance + :n",
                "ConditionExpression": "balance = :zero",
                "ExpressionAttributeValues": {":n": 5, ":zero": 0},
                "ReturnValues": "UPDATED_NEW",
            },
        ),
        "delete, no condition, ALL_OLD": (
            "delete_item",
            {"Key": {"pk": "a"}, "ReturnValues": "ALL_OLD"},
        ),
    }


@pytest.mark.parametrize("case", list(resource_cases()))
def test_given_unlocked_items_then_a_guarded_resource_request_behaves_as_the_native_one(
    case: str, tables: Tables, twin: str, ddb: Any, resource: Any
) -> None:
    # Given two tables with the same items and one resource-shaped request
    op, native = resource_cases()[case]
    guarded = ddbtx.guard(native)

    # When it is sent natively to one table and guarded to the other; Then the answers
    # and the tables afterwards are the same
    assert_same(
        ddb,
        (getattr(resource.Table(tables.data), op), native, tables.data),
        (getattr(resource.Table(twin), op), guarded, twin),
    )


def test_given_a_request_using_boto3s_own_placeholder_names_then_the_guarded_one_keeps_them(
    tables: Tables, twin: str, resource: Any
) -> None:
    # Given a resource request whose update uses #n0/:v0, the names boto3 gives the
    # placeholders of a condition object (natively they collide: boto3 overwrites them)
    request = {
        "Key": {"pk": "a"},
        "UpdateExpression": "SET #n0 = :v0",
        "ConditionExpression": Attr("balance").lt(1000),
        "ExpressionAttributeNames": {"#n0": "note"},
        "ExpressionAttributeValues": {":v0": "hello"},
        "ReturnValues": "ALL_NEW",
    }

    # When it is sent guarded
    response = resource.Table(twin).update_item(**ddbtx.guard(request))

    # Then it did what it says: note set, balance untouched
    assert response["Attributes"] == {
        "pk": "a",
        "balance": 100,
        "tags": {"x", "y"},
        "note": "hello",
    }


# --- what cannot be guarded -----------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"RequestItems": {"t": [{"PutRequest": {"Item": {}}}]}}, "BatchWriteItem"),
        ({"TableName": "t", "Key": {}, "Expected": {}}, "Expected"),
        ({"TableName": "t", "Key": {}, "AttributeUpdates": {}}, "AttributeUpdates"),
        ({"TransactItems": [{"Put": {}, "Delete": {}}]}, r"TransactItems\[0\]"),
        ({"TransactItems": [{"Get": {}}]}, r"TransactItems\[0\]"),
        ({"TableName": "t", "Key": {}, "ConditionExpression": 3}, "ConditionExpression"),
    ],
)
def test_given_a_request_that_cannot_be_guarded_then_the_error_names_the_parameter(
    params: dict[str, Any], named: str
) -> None:
    with pytest.raises(ddbtx.GuardError, match=named):
        ddbtx.guard(params)


def test_guard_leaves_the_request_it_was_given_unchanged() -> None:
    # Given a request with names, values and a condition object
    params = {
        "TableName": "t",
        "Key": {"pk": "a"},
        "UpdateExpression": "SET #b = :b",
        "ConditionExpression": Attr("b").eq(1),
        "ExpressionAttributeNames": {"#b": "b"},
        "ExpressionAttributeValues": {":b": 2},
    }
    before = copy.deepcopy({k: v for k, v in params.items() if k != "ConditionExpression"})
    # When it is guarded; Then the original is as it was, and the guard names the lock
    guarded = ddbtx.guard(params)
    assert {k: v for k, v in params.items() if k != "ConditionExpression"} == before
    assert guarded["ExpressionAttributeNames"]["#ddbtxLock"] == s.ATTR_LOCK
