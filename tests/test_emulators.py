"""The two backends are real, independent DynamoDB implementations reachable over HTTP."""

from typing import Any


def test_given_a_backend_when_a_table_is_created_then_items_round_trip(
    ddb: Any, table_name: Any
) -> None:
    # Given
    name = table_name("emu")
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 0.1})
    # When
    ddb.put_item(TableName=name, Item={"pk": {"S": "a"}, "n": {"N": "1"}})
    # Then
    item = ddb.get_item(TableName=name, Key={"pk": {"S": "a"}}, ConsistentRead=True)["Item"]
    assert item == {"pk": {"S": "a"}, "n": {"N": "1"}}
