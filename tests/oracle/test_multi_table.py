"""A transaction over every key schema whose last request fails leaves every item as it was.

Byte for byte: the items are compared as DynamoDB returns them, not normalised,
and the index as a query returns it, in every way of sending.
"""

from __future__ import annotations

from typing import Any

import pytest

from ddbtx.local import KINDS
from helpers import unfenced

from .runner import INDEX, PATHS, Twins, leftovers, send_through
from .shapes import BASE, VALUES, Item

#: Starting items by name: (table's schema, item), with keys apart from the single-shape
#: cases'. "last" is the item the failing last request is about.
START: dict[str, tuple[str, Item]] = {
    "S": ("S", {"pk": {"S": "multi"}, **BASE}),
    "N": ("N", {"pk": {"N": "20"}, **BASE}),
    "B": ("B", {"pk": {"B": b"multi"}, **BASE}),
    "SR": ("SR", {"pk": {"S": "multi"}, "sk": {"N": "2"}, **BASE}),
    "G": ("G", {"pk": {"S": "multi"}, "g": {"S": "gm"}, **BASE}),
    "last": ("S", {"pk": {"S": "multi-last"}, **BASE}),
}
#: Made by the transaction (and so absent after it fails).
NEW: tuple[str, Item] = ("G", {"pk": {"S": "multi-new"}})


def key_of(name: str) -> Item:
    return {k: v for k, v in START[name][1].items() if k in ("pk", "sk")}


def writes(twins: Twins, last: Item) -> list[tuple[str, Item]]:
    """A write on each table, then ``last`` (an update of the S item that fails)."""
    t = twins.ours
    return [
        (
            "update",
            {
                "TableName": t["S"],
                "Key": key_of("S"),
                "UpdateExpression": "ADD n :one SET l = list_append(l, :more)",
                "ExpressionAttributeValues": {":one": VALUES[":one"], ":more": VALUES[":more"]},
            },
        ),
        ("put", {"TableName": t["N"], "Item": {"pk": {"N": "2E+1"}, "v": {"S": "new"}}}),
        ("delete", {"TableName": t["B"], "Key": {"pk": {"B": "multi"}}}),
        (
            "update",
            {"TableName": t["SR"], "Key": key_of("SR"), "UpdateExpression": "REMOVE s, m.a"},
        ),
        ("put", {"TableName": t["G"], "Item": {"pk": {"S": "multi"}, "g": {"S": "gm2"}}}),
        ("put", {"TableName": t["G"], "Item": {**NEW[1], "g": {"S": "gm"}}}),
        ("update", {"TableName": t["S"], "Key": key_of("last"), **last}),
    ]


FAILURES: dict[str, tuple[Item, str]] = {
    "condition": (
        {
            "UpdateExpression": "SET v = :v",
            "ConditionExpression": "attribute_not_exists(pk)",
            "ExpressionAttributeValues": {":v": VALUES[":v"]},
        },
        "ConditionalCheckFailedException",
    ),
    "rejected-by-dynamodb": (
        # ADD to a string: only DynamoDB can tell, when the write is applied.
        {"UpdateExpression": "ADD s :one", "ExpressionAttributeValues": {":one": VALUES[":one"]}},
        "ValidationException",
    ),
}


def snapshot(twins: Twins) -> dict[str, Any]:
    """Every item the transaction touches, and the index, as DynamoDB returns them (without
    the fence, which a lock leaves on its item: docs/limits.md)."""
    c, t = twins.client, twins.ours

    def get(table: str, key: Item) -> Item | None:
        found = c.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")
        return None if found is None else unfenced(found)

    items: dict[str, Any] = {
        name: get(t[schema], key_of(name)) for name, (schema, _) in START.items()
    }
    items["new"] = get(t[NEW[0]], NEW[1])
    for g in ("gm", "gm2"):
        items[f"index {g}"] = [
            unfenced(i)
            for i in c.query(
                TableName=t["G"],
                IndexName=INDEX,
                KeyConditionExpression="g = :g",
                ExpressionAttributeValues={":g": {"S": g}},
            )["Items"]
        ]
    return items


@pytest.mark.parametrize("twins", KINDS, indirect=True)
@pytest.mark.parametrize("failure", list(FAILURES))
@pytest.mark.parametrize("path", PATHS)
def test_given_items_in_every_table_when_the_last_request_fails_then_all_are_as_before(
    twins: Twins, path: str, failure: str
) -> None:
    # Given an item in each table (and one in the index)
    for schema, item in START.values():
        twins.client.put_item(TableName=twins.ours[schema], Item=item)
    twins.client.delete_item(TableName=twins.ours[NEW[0]], Key=NEW[1])
    before = snapshot(twins)
    assert before["index gm"], "the index shows the starting item"
    # When one transaction writes to every table and its last request fails
    last, error = FAILURES[failure]
    reads = [(twins.ours[schema], key_of(name)) for name, (schema, _) in START.items()]
    outcomes = send_through(twins, writes(twins, last), path, reads)
    # Then the user gets DynamoDB's error, and every item and the index are byte for byte as before
    assert [o.error for o in outcomes] == [error]
    assert snapshot(twins) == before
    assert leftovers(twins) == []
