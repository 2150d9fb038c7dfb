"""``ReturnConsumedCapacity`` inside a transaction (issue 32): the answer reports what the
transaction's own requests for that call consumed (its TX record's, its image's, its item's),
in DynamoDB's shape, so users see the real cost. The reference is DynamoDB's own accounting:
a botocore hook on the client adds up the ``ConsumedCapacity`` of every response the call got."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from botocore.exceptions import ClientError

from ddbtx import TransactionManager
from ddbtx.instrumentation import count_requests
from helpers import Tables, assert_clean


@contextmanager
def consumed_on(client: Any) -> Iterator[list[float]]:
    """Every ``CapacityUnits`` DynamoDB reported to ``client`` meanwhile."""
    seen: list[float] = []

    def on_call(parsed: Any, **_: Any) -> None:
        consumed = parsed.get("ConsumedCapacity") if isinstance(parsed, dict) else None
        for entry in consumed if isinstance(consumed, list) else [consumed] if consumed else []:
            seen.append(float(entry["CapacityUnits"]))

    client.meta.events.register("after-call.dynamodb", on_call)
    try:
        yield seen
    finally:
        client.meta.events.unregister("after-call.dynamodb", on_call)


def update(table: str, **extra: Any) -> dict[str, Any]:
    return {
        "TableName": table,
        "Key": {"pk": {"S": "a"}},
        "UpdateExpression": "ADD n :one",
        "ExpressionAttributeValues": {":one": {"N": "1"}},
        **extra,
    }


@pytest.mark.parametrize("mode", ["TOTAL", "INDEXES"])
def test_given_return_consumed_capacity_then_the_answer_counts_every_request_of_the_call(
    tm: TransactionManager, ddb: Any, tables: Tables, mode: str
) -> None:
    # Given an item, and what DynamoDB itself reports for the same update sent natively
    ddb.put_item(TableName=tables.data, Item={"pk": {"S": "a"}, "n": {"N": "1"}})
    native = ddb.update_item(**update(tables.data, ReturnConsumedCapacity=mode))
    # When a transaction sends it, asking for the capacity consumed
    # (the commit, on leaving the transaction, comes after both counts have closed)
    with (
        tm.transaction() as tx,
        consumed_on(tm.client) as seen,
        count_requests(tm.client) as counts,
    ):
        answer = tx.update_item(**update(tables.data, ReturnConsumedCapacity=mode))
    # Then the answer has DynamoDB's shape, and counts what each of the call's requests
    # consumed, as DynamoDB reported it: more than the one native write
    consumed = answer["ConsumedCapacity"]
    assert set(consumed) <= set(native["ConsumedCapacity"]) | {"Table"}
    assert consumed["TableName"] == tables.data
    assert consumed["CapacityUnits"] == pytest.approx(sum(seen))
    # (every request but DescribeTable, which learns the table's key, reports its units)
    assert len(seen) == counts.total - counts.by_operation.get("DescribeTable", 0) >= 2
    assert consumed["CapacityUnits"] > native["ConsumedCapacity"]["CapacityUnits"]
    if mode == "INDEXES":
        assert 0 < consumed["Table"]["CapacityUnits"] < consumed["CapacityUnits"]
    assert_clean(ddb, tables)


def test_given_none_then_no_capacity_and_the_same_requests(
    tm: TransactionManager, ddb: Any, tables: Tables
) -> None:
    # Given an item, and a manager that has learnt the table's key
    ddb.put_item(TableName=tables.data, Item={"pk": {"S": "a"}, "n": {"N": "1"}})
    tm.run(lambda tx: tx.update_item(**update(tables.data)))
    # When the same update goes without the parameter, and with NONE
    counted = []
    for extra in ({}, {"ReturnConsumedCapacity": "NONE"}):
        with tm.transaction() as tx, count_requests(tm.client) as counts:
            answer = tx.update_item(**update(tables.data, **extra))
        counted.append(counts.by_operation)
        # Then there is no ConsumedCapacity, as natively
        assert "ConsumedCapacity" not in answer
    # And the requests are the same
    assert counted[0] == counted[1]


def test_given_an_unknown_mode_then_dynamodbs_enum_error(
    tm: TransactionManager, ddb: Any, tables: Tables
) -> None:
    with pytest.raises(ClientError) as raised, tm.transaction() as tx:
        tx.update_item(**update(tables.data, ReturnConsumedCapacity="ALL"))
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    assert (
        "Member must satisfy enum value set: [INDEXES, NONE, TOTAL]"
        in (raised.value.response["Error"]["Message"])
    )
    assert_clean(ddb, tables)
