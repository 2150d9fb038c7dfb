"""The resource API: ``tm.table(...)`` and ``tx.table(...)`` against boto3's own ``Table``.

The same calls, with Python values and ``boto3.dynamodb.conditions`` objects,
go to boto3's ``Table`` on one table and to ddbtx's on its twin; the answers
and the stored items must be the same. Inside a transaction the calls are the
transaction's; outside, each write is one native request on an item no
transaction holds.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import boto3
import pytest
from boto3.dynamodb.conditions import Attr, Key

from ddbtx import (
    ConditionalCheckFailedError,
    InvalidRequestError,
    TransactionConflictError,
    TransactionManager,
)
from ddbtx.instrumentation import count_requests
from ddbtx.local import LOCAL_CREDENTIALS, LocalDynamo
from helpers import create_read_table, leftover, records_left, scan, unfenced

ITEM = {
    "pk": "p",
    "sk": Decimal(1),
    "n": Decimal("10.5"),
    "tags": {"a", "b"},
    "nums": {Decimal(1), Decimal(2)},
    "blob": b"\x00\x01",
    "doc": {"list": [Decimal(1), "two", None, True], "map": {"k": "v"}},
    "g": "a",
}

#: (method, kwargs) sent to both tables, in order; each answer is compared.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("put_item", {"Item": ITEM}),
    ("put_item", {"Item": {**ITEM, "sk": Decimal(2), "n": Decimal(3)}}),
    (
        "put_item",
        {"Item": {"pk": "p", "sk": Decimal(3)}, "ConditionExpression": Attr("pk").not_exists()},
    ),
    ("get_item", {"Key": {"pk": "p", "sk": Decimal(1)}}),
    (
        "get_item",
        {
            "Key": {"pk": "p", "sk": Decimal(1)},
            "ProjectionExpression": "n, doc.#m.k",
            "ExpressionAttributeNames": {"#m": "map"},
        },
    ),
    (
        "update_item",
        {
            "Key": {"pk": "p", "sk": Decimal(1)},
            "UpdateExpression": "SET n = n - :d ADD tags :t",
            "ConditionExpression": Attr("n").gte(Decimal(5)) & Attr("tags").contains("a"),
            "ExpressionAttributeValues": {":d": Decimal("0.5"), ":t": {"c"}},
            "ReturnValues": "ALL_NEW",
        },
    ),
    (
        "update_item",
        {
            "Key": {"pk": "p", "sk": Decimal(2)},
            "UpdateExpression": "REMOVE #b",
            "ExpressionAttributeNames": {"#b": "blob"},
            "ReturnValues": "UPDATED_OLD",
        },
    ),
    (
        "query",
        {
            "KeyConditionExpression": Key("pk").eq("p") & Key("sk").between(1, 2),
            "FilterExpression": Attr("n").lt(Decimal(100)) | Attr("g").begins_with("z"),
        },
    ),
    ("query", {"KeyConditionExpression": Key("pk").eq("p"), "ScanIndexForward": False}),
    ("query", {"IndexName": "by-g", "KeyConditionExpression": Key("g").eq("a")}),
    ("scan", {"FilterExpression": Attr("doc.list[1]").eq("two"), "ProjectionExpression": "sk"}),
    ("scan", SIZE_FILTER := {"Select": "COUNT", "FilterExpression": Attr("tags").size().gt(1)}),
    (
        "delete_item",
        {
            "Key": {"pk": "p", "sk": Decimal(2)},
            "ConditionExpression": Attr("n").eq(Decimal(3)),
            "ReturnValues": "ALL_OLD",
        },
    ),
    ("delete_item", {"Key": {"pk": "p", "sk": Decimal(3)}}),
]


@pytest.fixture
def twins(
    backend: LocalDynamo, ddb: Any, table_name: Callable[[str], str], tm: TransactionManager
) -> tuple[Any, Any, str]:
    """boto3's Table on one table, and ddbtx's on its twin (its name returned too)."""
    native_name, ours_name = table_name("native"), table_name("ours")
    for name in (native_name, ours_name):
        create_read_table(ddb, name)
    resource = boto3.resource("dynamodb", endpoint_url=backend.endpoint_url, **LOCAL_CREDENTIALS)
    return resource.Table(native_name), tm.table(ours_name), ours_name


def _normal(response: dict[str, Any]) -> dict[str, Any]:
    response = dict(response)
    response.pop("ResponseMetadata", None)
    response.pop("ConsumedCapacity", None)
    return response


def test_given_the_same_calls_then_tm_table_answers_as_boto3s_table(
    twins: tuple[Any, Any, str], ddb: Any, backend: LocalDynamo
) -> None:
    native, ours, name = twins
    for method, kwargs in CALLS:
        if backend.kind == "moto" and kwargs is SIZE_FILTER:
            continue  # moto refuses size() in a filter (see test_conditions.MOTO_SIZE)
        # When each call goes to boto3's Table and to ddbtx's
        expected = _normal(getattr(native, method)(**kwargs))
        got = _normal(getattr(ours, method)(**kwargs))
        # Then the answers are the same
        assert got == expected, method
    # And so are the stored items, with nothing of the protocol on them
    # (a set's members come back in any order: compared as sets)
    assert sorted(map(_sets_sorted, scan(ddb, name)), key=repr) == sorted(
        map(_sets_sorted, scan(ddb, native.name)), key=repr
    )


def test_given_the_same_calls_inside_transactions_then_tx_table_answers_as_boto3s_table(
    twins: tuple[Any, Any, str], ddb: Any, backend: LocalDynamo, tm: TransactionManager
) -> None:
    """boto3's condition builders (``Attr & Attr``, ``|``, ``~``) put a pair of parentheses
    around every compound condition; inside a transaction they work as they do natively."""
    native, _, name = twins
    for method, kwargs in CALLS:
        if backend.kind == "moto" and kwargs is SIZE_FILTER:
            continue  # moto refuses size() in a filter (see test_conditions.MOTO_SIZE)
        # When each call goes to boto3's Table, and to ddbtx's in a transaction of its own
        expected = _normal(getattr(native, method)(**kwargs))
        with tm.transaction() as tx:
            got = _normal(getattr(tx.table(name), method)(**kwargs))
        # Then the answers are the same
        assert got == expected, method
    # And so are the stored items, with nothing of the protocol on them but the fence
    kept = [unfenced(item) for item in scan(ddb, name)]
    assert all(not leftover(item) for item in kept)
    assert sorted(map(_sets_sorted, kept), key=repr) == sorted(
        map(_sets_sorted, scan(ddb, native.name)), key=repr
    )


@pytest.mark.parametrize(
    "condition",
    [
        Attr("balance").gte(Decimal(30)) & Attr("owner").eq("alice"),
        Attr("balance").lt(Decimal(0)) | Attr("owner").eq("alice"),
        ~Attr("frozen").exists() & (Attr("owner").eq("alice") | Attr("owner").eq("bob")),
    ],
    ids=["and", "or", "not-and-or"],
)
def test_given_a_compound_builder_condition_when_a_transaction_updates_then_it_applies(
    tm: TransactionManager, twins: tuple[Any, Any, str], condition: Any
) -> None:
    # Given an item whose balance and owner meet the condition
    _, ours, name = twins
    ours.put_item(Item={"pk": "p", "sk": 1, "balance": Decimal(100), "owner": "alice"})
    # When a transaction updates it under boto3's compound condition, and another under
    # the same condition negated
    with tm.transaction() as tx:
        tx.table(name).update_item(
            Key={"pk": "p", "sk": 1},
            UpdateExpression="SET balance = balance - :n",
            ConditionExpression=condition,
            ExpressionAttributeValues={":n": Decimal(30)},
        )
    with pytest.raises(ConditionalCheckFailedError), tm.transaction() as tx:
        tx.table(name).delete_item(Key={"pk": "p", "sk": 1}, ConditionExpression=~condition)
    # Then the first applied and the second changed nothing
    assert ours.get_item(Key={"pk": "p", "sk": 1})["Item"]["balance"] == Decimal(70)


def test_given_an_unlocked_item_then_a_tm_table_write_is_one_native_request(
    tm: TransactionManager, twins: tuple[Any, Any, str]
) -> None:
    _, ours, _ = twins
    ours.put_item(Item=ITEM)
    with count_requests(tm.client) as counts:
        ours.update_item(
            Key={"pk": "p", "sk": 1},
            UpdateExpression="SET n = :n",
            ExpressionAttributeValues={":n": Decimal(1)},
        )
    assert counts.by_operation == {"UpdateItem": 1}


def test_given_a_transaction_when_it_uses_tx_table_then_its_calls_are_the_transactions(
    tm: TransactionManager, twins: tuple[Any, Any, str], ddb: Any
) -> None:
    _, ours, name = twins
    ours.put_item(Item={"pk": "p", "sk": 1, "balance": Decimal(100)})
    ours.put_item(Item={"pk": "p", "sk": 2, "balance": Decimal(0)})
    # When a transaction moves 30 with the resource API, and another tries to move 200
    with tm.transaction() as tx:
        accounts = tx.table(name)
        accounts.update_item(
            Key={"pk": "p", "sk": 1},
            UpdateExpression="SET balance = balance - :n",
            ConditionExpression=Attr("balance").gte(Decimal(30)),
            ExpressionAttributeValues={":n": Decimal(30)},
        )
        accounts.update_item(
            Key={"pk": "p", "sk": 2},
            UpdateExpression="ADD balance :n",
            ExpressionAttributeValues={":n": Decimal(30)},
        )
        seen = accounts.query(KeyConditionExpression=Key("pk").eq("p"))["Items"]
        projected = accounts.get_item(Key={"pk": "p", "sk": 2}, ProjectionExpression="balance")
    with pytest.raises(ConditionalCheckFailedError), tm.transaction() as tx:
        tx.table(name).update_item(
            Key={"pk": "p", "sk": 1},
            UpdateExpression="SET balance = balance - :n",
            ConditionExpression=Attr("balance").gte(Decimal(200)),
            ExpressionAttributeValues={":n": Decimal(200)},
        )
    # Then the first is committed, its reads saw its own writes, the second changed nothing
    assert [i["balance"] for i in seen] == [Decimal(70), Decimal(30)]
    assert projected == {"Item": {"balance": Decimal(30)}}
    assert [i["balance"] for i in ours.scan()["Items"]] in ([70, 30], [30, 70])
    assert all(not leftover(i) for i in scan(ddb, name))


def test_given_an_item_a_transaction_holds_when_tm_table_writes_it_then_it_waits_its_turn(
    make_tm: Callable[..., TransactionManager], twins: tuple[Any, Any, str], ddb: Any
) -> None:
    _, ours, name = twins
    ours.put_item(Item={"pk": "p", "sk": 1, "n": Decimal(1)})
    holder = make_tm().begin()
    holder.update_item(
        TableName=name,
        Key={"pk": {"S": "p"}, "sk": {"N": "1"}},
        UpdateExpression="SET n = :v",
        ExpressionAttributeValues={":v": {"N": "2"}},
    )
    # When a plain resource write meets the older holder, it goes through the protocol
    # and gives up after lock_wait (before the holder would count as stale)
    impatient = make_tm(lock_wait=1.0).table(name)
    with pytest.raises(TransactionConflictError):
        impatient.put_item(Item={"pk": "p", "sk": 1, "n": Decimal(9)})
    # Then the holder's item is untouched, and after it commits the write goes through
    assert ddb.get_item(TableName=name, Key={"pk": {"S": "p"}, "sk": {"N": "1"}})["Item"]["n"] == {
        "N": "2"
    }
    holder.commit()
    impatient.put_item(Item={"pk": "p", "sk": 1, "n": Decimal(9)})
    assert ours.get_item(Key={"pk": "p", "sk": 1})["Item"]["n"] == 9


def test_given_a_false_condition_when_tm_table_writes_then_nothing_is_written(
    twins: tuple[Any, Any, str], ddb: Any, tm: TransactionManager
) -> None:
    _, ours, _ = twins
    ours.put_item(Item={"pk": "p", "sk": 1, "n": Decimal(1)})
    # When a write's condition is false on a free item, or on an absent one
    with count_requests(tm.client) as counts, pytest.raises(ConditionalCheckFailedError):
        ours.delete_item(Key={"pk": "p", "sk": 1}, ConditionExpression=Attr("n").gt(5))
    with pytest.raises(ConditionalCheckFailedError):
        ours.update_item(
            Key={"pk": "p", "sk": 2},
            UpdateExpression="SET n = :n",
            ConditionExpression=Attr("pk").exists(),
            ExpressionAttributeValues={":n": 1},
        )
    # Then nothing is written, for the failed write and one read of the item
    assert counts.by_operation == {"DeleteItem": 1, "GetItem": 1}
    assert [i["n"] for i in ours.scan()["Items"]] == [1]
    assert records_left(ddb, tm.transactions_table) == []


BAD: dict[str, tuple[str, dict[str, Any], str]] = {
    "float-in-item": ("put_item", {"Item": {"pk": "p", "sk": 1, "n": 1.5}}, "Float"),
    "float-in-key": ("get_item", {"Key": {"pk": "p", "sk": 1.0}}, "Float"),
    "float-in-values": (
        "update_item",
        {
            "Key": {"pk": "p", "sk": 1},
            "UpdateExpression": "SET n = :n",
            "ExpressionAttributeValues": {":n": 0.1},
        },
        "Float",
    ),
    "float-in-condition": (
        "delete_item",
        {"Key": {"pk": "p", "sk": 1}, "ConditionExpression": Attr("n").lt(2.5)},
        "Float",
    ),
    "float-in-filter": ("scan", {"FilterExpression": Attr("n").eq(1.5)}, "Float"),
    "attr-as-key-condition": ("query", {"KeyConditionExpression": Attr("pk").eq("p")}, "Key"),
    "placeholder-clash": (
        "update_item",
        {
            "Key": {"pk": "p", "sk": 1},
            "UpdateExpression": "SET #n0 = :x",
            "ConditionExpression": Attr("n").exists(),
            "ExpressionAttributeNames": {"#n0": "other"},
            "ExpressionAttributeValues": {":x": 1},
        },
        "placeholders",
    ),
    "table-name": ("get_item", {"TableName": "Other", "Key": {"pk": "p", "sk": 1}}, "TableName"),
    "reserved-attribute": ("put_item", {"Item": {"pk": "p", "sk": 1, "_tx:id": "x"}}, "reserved"),
}


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("inside", [False, True], ids=["tm.table", "tx.table"])
def test_given_bad_input_then_a_specific_error_and_nothing_written(
    tm: TransactionManager, twins: tuple[Any, Any, str], ddb: Any, case: str, inside: bool
) -> None:
    _, _, name = twins
    method, kwargs, message = BAD[case]
    tm.key_types(name)
    tx = tm.begin()
    table = tx.table(name) if inside else tm.table(name)
    # When the call is made, Then it is refused before any request
    with count_requests(tm.client) as counts, pytest.raises(InvalidRequestError, match=message):
        getattr(table, method)(**kwargs)
    assert counts.total == 0
    # And nothing is written: no item, no TX record; the transaction is still usable
    assert scan(ddb, name) == [] and records_left(ddb, tm.transactions_table) == []
    if inside:
        tx.table(name).put_item(Item={"pk": "p", "sk": 1})
        tx.commit()
        assert len(scan(ddb, name)) == 1


def test_given_isolation_inside_a_transaction_then_it_is_refused(
    tm: TransactionManager, twins: tuple[Any, Any, str]
) -> None:
    from ddbtx import Isolation

    _, _, name = twins
    with pytest.raises(InvalidRequestError, match="isolation"):
        tm.begin().table(name).scan(isolation=Isolation.COMMITTED)


def _sets_sorted(item: dict[str, Any]) -> dict[str, Any]:
    """``item`` with each top-level set's members in one order."""
    return {
        name: {kind: sorted(v) if kind in ("SS", "NS", "BS") else v for kind, v in value.items()}
        for name, value in item.items()
    }
