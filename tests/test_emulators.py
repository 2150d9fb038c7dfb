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


def test_given_moto_in_its_own_process_when_writers_race_then_one_conditional_put_wins() -> None:
    import threading

    from ddbtx.local import LocalDynamo
    from ddbtx.tables import create_data_table

    # Given moto served from a child interpreter (as the contention benchmark runs it)
    with LocalDynamo("moto", own_process=True) as db:
        client = db.client()
        create_data_table(client, "race")
        wins: list[int] = []

        def put(round_: int, writer: int, barrier: threading.Barrier) -> None:
            barrier.wait()
            try:
                client.put_item(
                    TableName="race",
                    Item={"pk": {"S": f"r{round_}"}, "w": {"N": str(writer)}},
                    ConditionExpression="attribute_not_exists(pk)",
                )
                wins.append(round_)
            except client.exceptions.ConditionalCheckFailedException:
                pass

        # When four writers race on each of 20 fresh keys
        for round_ in range(20):
            barrier = threading.Barrier(4)
            threads = [threading.Thread(target=put, args=(round_, w, barrier)) for w in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        # Then exactly one writer won each key, as DynamoDB's per-item atomicity allows
        assert sorted(wins) == list(range(20))
    # And the child is gone with the context
    assert db._proc is None
