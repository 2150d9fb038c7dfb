"""Errors existing boto3 code already catches (issue 32): inside a transaction, a failed
condition, a request DynamoDB refuses and a missing table are botocore ``ClientError``s
with DynamoDB's ``response``, and the client's own ``client.exceptions.<Code>``, while
staying the ddbtx classes they always were. Native DynamoDB is the reference: each test
sends the same request natively first, on both emulators."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError, ParamValidationError

from ddbtx import (
    ConditionalCheckFailedError,
    InvalidRequestError,
    TransactionManager,
    TransactionRolledBackError,
    aio,
)
from ddbtx.errors import DdbtxError, DynamoDBError, TableNotFound
from ddbtx.instrumentation import count_requests
from drivers import EventLoopThread
from helpers import Tables, assert_clean, boto3_refusal


def native_error(call: Callable[[], Any]) -> ClientError:
    """What boto3 raises for the request sent natively."""
    with pytest.raises(ClientError) as raised:
        call()
    return raised.value


def false_condition(table: str, pk: str) -> dict[str, Any]:
    return {
        "TableName": table,
        "Key": {"pk": {"S": pk}},
        "UpdateExpression": "SET balance = balance - :n",
        "ConditionExpression": "balance >= :n",
        "ExpressionAttributeValues": {":n": {"N": "50"}},
    }


@pytest.fixture
def accounts(ddb: Any, tables: Tables) -> Tables:
    """Given two items of balance 5 each: "a" for ddbtx, "n" for the native reference."""
    for pk in ("a", "n"):
        ddb.put_item(TableName=tables.data, Item={"pk": {"S": pk}, "balance": {"N": "5"}})
    return tables


def test_given_a_false_condition_in_a_transaction_then_except_client_error_catches_it(
    tm: TransactionManager, ddb: Any, accounts: Tables
) -> None:
    native = native_error(lambda: ddb.update_item(**false_condition(accounts.data, "n")))

    # When a transaction sends the same request, and code written for boto3 catches it
    with pytest.raises(ClientError) as raised, tm.transaction() as tx:
        tx.update_item(**false_condition(accounts.data, "a"))

    # Then it is caught as boto3's, with DynamoDB's code, message and operation
    error = raised.value
    assert error.response["Error"] == native.response["Error"]
    assert error.operation_name == native.operation_name == "UpdateItem"
    # And it is still the ddbtx error it always was, and nothing changed
    assert isinstance(error, ConditionalCheckFailedError)
    assert isinstance(error, DdbtxError)
    assert type(error).__name__ == "ConditionalCheckFailedError"
    assert_clean(ddb, accounts)


def test_given_a_false_condition_then_the_clients_own_exception_class_catches_it(
    tm: TransactionManager, ddb: Any, accounts: Tables
) -> None:
    # When code catches the manager's client's modeled class, as boto3 code does
    client = tm.client
    modeled = client.exceptions.ConditionalCheckFailedException
    with pytest.raises(modeled) as raised, tm.transaction() as tx:
        tx.update_item(**false_condition(accounts.data, "a"))

    # Then that is what it caught, and so does a try/except written against the class
    assert isinstance(raised.value, ConditionalCheckFailedError)
    try:
        tm.run(lambda tx: tx.update_item(**false_condition(accounts.data, "a")))
    except client.exceptions.ConditionalCheckFailedException as exc:
        assert exc.response["Error"]["Code"] == "ConditionalCheckFailedException"
    else:
        pytest.fail("the false condition was not raised")


def test_given_a_false_condition_through_tx_table_then_boto3_code_catches_it(
    tm: TransactionManager, accounts: Tables
) -> None:
    # When the resource shape's update fails its condition inside a transaction
    with pytest.raises(ClientError) as raised, tm.transaction() as tx:
        tx.table(accounts.data).delete_item(
            Key={"pk": "a"},
            ConditionExpression="balance > :n",
            ExpressionAttributeValues={":n": 50},
        )
    # Then the error is DynamoDB's, naming the operation the user called
    assert raised.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert raised.value.operation_name == "DeleteItem"
    assert isinstance(raised.value, tm.client.exceptions.ConditionalCheckFailedException)


def test_given_a_request_dynamodb_refuses_then_it_is_a_validation_client_error(
    tm: TransactionManager, ddb: Any, accounts: Tables
) -> None:
    # Given an update expression DynamoDB refuses (the attribute is set twice)
    bad = {
        "Key": {"pk": {"S": "a"}},
        "UpdateExpression": "SET balance = :n, balance = :n",
        "ExpressionAttributeValues": {":n": {"N": "1"}},
    }
    native = native_error(lambda: ddb.update_item(TableName=accounts.data, **bad))

    # When a transaction sends it
    with pytest.raises(ClientError) as raised, tm.transaction() as tx:
        tx.update_item(TableName=accounts.data, **bad)

    # Then it is the ValidationException existing code catches, with DynamoDB's message
    error = raised.value
    assert error.response["Error"]["Code"] == native.response["Error"]["Code"]
    assert error.response["Error"]["Code"] == "ValidationException"
    assert error.response["Error"]["Message"] == native.response["Error"]["Message"]
    assert isinstance(error, InvalidRequestError)
    assert_clean(ddb, accounts)


def test_given_a_missing_table_then_resource_not_found_is_caught_as_boto3s(
    tm: TransactionManager, ddb: Any, accounts: Tables
) -> None:
    # Given a table that does not exist
    missing = f"{accounts.data}-missing"
    native = native_error(lambda: ddb.get_item(TableName=missing, Key={"pk": {"S": "a"}}))

    # When a transaction writes to it
    modeled = tm.client.exceptions.ResourceNotFoundException
    with pytest.raises(modeled) as raised, tm.transaction() as tx:
        tx.put_item(TableName=missing, Item={"pk": {"S": "a"}})

    # Then boto3's class for the code catches it, and it is still ddbtx's
    assert raised.value.response["Error"]["Code"] == native.response["Error"]["Code"]
    assert isinstance(raised.value, (TableNotFound, InvalidRequestError))


def test_given_ddbtx_own_outcomes_then_they_are_not_client_errors() -> None:
    # Given the errors with no DynamoDB counterpart, and those with one
    own = TransactionRolledBackError("rolled back", tx_id="t")
    mirrored = [
        ConditionalCheckFailedError("false", operation="put"),
        InvalidRequestError("bad"),
        DynamoDBError("x", code="ThrottlingException", operation="PutItem"),
    ]
    # Then only the second kind are ClientErrors, each with its code
    assert not isinstance(own, ClientError)
    assert [e.response["Error"]["Code"] for e in mirrored] == [
        "ConditionalCheckFailedException",
        "ValidationException",
        "ThrottlingException",
    ]
    assert [e.operation_name for e in mirrored] == ["PutItem", "TransactWriteItems", "PutItem"]


def test_given_an_asyncio_transaction_then_the_aiobotocore_clients_class_catches_it(
    backend: Any, tables: Tables, accounts: Tables, event_loop_thread: EventLoopThread
) -> None:
    # Given an asyncio manager on an aiobotocore client
    client = event_loop_thread.client(backend)
    tm = aio.TransactionManager(client, tables.tx, tables.images)

    async def failing() -> None:
        async with tm.transaction() as tx:
            await tx.update_item(**false_condition(accounts.data, "a"))

    # When its request fails its condition
    with pytest.raises(client.exceptions.ConditionalCheckFailedException) as raised:
        event_loop_thread.run(failing())

    # Then the aiobotocore client's own class catches it, with DynamoDB's answer
    assert raised.value.response["Error"]["Message"] == "The conditional request failed"
    assert isinstance(raised.value, ConditionalCheckFailedError)


def test_given_old_on_failure_then_the_error_holds_the_item_as_it_was(
    tm: TransactionManager, ddb: Any, accounts: Tables
) -> None:
    # When a transaction's delete fails its condition, asking for the item back
    with pytest.raises(ClientError) as raised, tm.transaction() as tx:
        tx.delete_item(
            TableName=accounts.data,
            Key={"pk": {"S": "a"}},
            ConditionExpression="balance > :n",
            ExpressionAttributeValues={":n": {"N": "50"}},
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    # Then the error's Item is the item as it was, as DynamoDB documents, with nothing of
    # the protocol in it, and nothing changed
    assert raised.value.response["Item"] == {"pk": {"S": "a"}, "balance": {"N": "5"}}
    assert_clean(ddb, accounts)


def test_given_an_unknown_old_on_failure_value_then_dynamodbs_enum_error(
    tm: TransactionManager, ddb: Any, accounts: Tables
) -> None:
    # When a request names a value outside ReturnValuesOnConditionCheckFailure's enum
    with pytest.raises(ClientError) as raised, tm.transaction() as tx:
        tx.update_item(
            **false_condition(accounts.data, "a"), ReturnValuesOnConditionCheckFailure="BOGUS"
        )
    # Then it is refused in DynamoDB's words (AWS validates enums; neither emulator does)
    assert raised.value.response["Error"] == {
        "Code": "ValidationException",
        "Message": "1 validation error detected: Value 'BOGUS' at "
        "'returnValuesOnConditionCheckFailure' failed to satisfy constraint: Member must "
        "satisfy enum value set: [ALL_OLD, NONE]",
    }
    assert_clean(ddb, accounts)


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("put_item", {"Item": {"pk": "not-an-attribute-value"}}),
        ("put_item", {"Item": {"pk": {"S": "a"}, "n": {"N": 5}}}),
        ("update_item", {"Key": {"pk": {"S": "a"}}, "UpdateExpression": 7}),
        ("delete_item", {}),
        ("get_item", {"Key": {"pk": {"S": "a"}}, "ConsistentRead": "yes"}),
    ],
    ids=["item-not-attribute-values", "number-not-a-string", "expression-not-a-string",
         "no-key", "consistent-read-not-a-bool"],
)  # fmt: skip
def test_given_a_request_boto3_refuses_then_a_transaction_refuses_it_the_same_way(
    tm: TransactionManager, ddb: Any, accounts: Tables, method: str, params: dict[str, Any]
) -> None:
    # Given what boto3 raises for the request sent natively (before sending anything)
    full = {"TableName": accounts.data, **params}
    native = boto3_refusal(ddb, method, full)
    assert native is not None
    # When a transaction is sent it
    with pytest.raises(ParamValidationError) as raised, tm.transaction() as tx:
        getattr(tx, method)(**full)
    # Then it is botocore's own error, word for word, and nothing changed
    assert str(raised.value) == native
    assert_clean(ddb, accounts)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"S": 123}, "NUMBER_VALUE cannot be converted to String"),
        ({"N": 1.5}, "DECIMAL_VALUE cannot be converted to String"),
        ({"S": True}, "TRUE_VALUE cannot be converted to String"),
        ({"BOOL": "maybe"}, "Unexpected token received from parser"),
        ({"SS": "a"}, "Unexpected field type"),
        ({"L": [{"S": {"x": 1}}]}, "Start of structure or map found where not expected"),
        ({"M": {"a": {"N": 2}}}, "NUMBER_VALUE cannot be converted to String"),
    ],
    ids=["S-int", "N-float", "S-bool", "BOOL-word", "SS-string", "L-map-in-S", "M-int-in-N"],
)
def test_given_a_malformed_value_without_client_validation_then_a_serialization_error(
    backend: Any,
    tables: Tables,
    accounts: Tables,
    value: dict[str, Any],
    message: str,
) -> None:
    # Given a client that does not validate parameters (they go to DynamoDB as they are)
    client = backend.client()
    client.meta.config.parameter_validation = False
    tm = TransactionManager(client, tables.tx, tables.images)
    # When a transaction puts an item with a value of the wrong JSON type
    with pytest.raises(ClientError) as raised, tm.transaction() as tx:
        tx.put_item(TableName=accounts.data, Item={"pk": {"S": "a"}, "v": value})
    # Then DynamoDB's SerializationException (AWS's text for it), never a Python error
    assert raised.value.response["Error"] == {"Code": "SerializationException", "Message": message}
    assert_clean(client, accounts)


@pytest.mark.parametrize(
    ("update", "condition"),
    [
        ("SET balance = :n,", None),
        ("SET balance = = :n", None),
        ("SET balance = :n", "balance = = :n"),
        ("SET balance = :n", "attribute_exists(balance"),
        ("SET balance = :n REMOVE", "balance > :n"),
    ],
    ids=["trailing-comma", "double-equals", "condition-double-equals", "condition-open",
         "empty-remove"],
)  # fmt: skip
def test_given_a_syntax_error_then_dynamodbs_message_about_the_users_own_expression(
    tm: TransactionManager, ddb: Any, accounts: Tables, update: str, condition: str | None
) -> None:
    # Given an expression DynamoDB refuses, and its answer sent natively
    params: dict[str, Any] = {
        "TableName": accounts.data,
        "Key": {"pk": {"S": "a"}},
        "UpdateExpression": update,
        "ExpressionAttributeValues": {":n": {"N": "1"}},
    }
    if condition is not None:
        params["ConditionExpression"] = condition
    native = native_error(lambda: ddb.update_item(**params))
    # When a transaction sends it
    with pytest.raises(ClientError) as raised, tm.transaction() as tx:
        tx.update_item(**params)
    # Then its error is DynamoDB's, word for word: never ddbtx's rewritten expression
    assert raised.value.response["Error"] == native.response["Error"]
    assert "ddbtx" not in raised.value.response["Error"]["Message"]
    assert_clean(ddb, accounts)


# --- what DynamoDB's order of checks costs -----------------------------------------------


def failed_attempt_costs(tm: TransactionManager, params: dict[str, Any]) -> int:
    """Requests a transaction sends for an update whose condition is false (it rolls back)."""
    with (
        count_requests(tm.client) as counts,
        pytest.raises(ConditionalCheckFailedError),
        tm.transaction() as tx,
    ):
        tx.update_item(**params)
    return counts.total


def test_given_an_update_shape_never_applied_then_only_its_first_false_condition_asks_dynamodb(
    tm: TransactionManager, ddb: Any, accounts: Tables
) -> None:
    # Given an update whose condition is false on the item, of a shape the manager never
    # applied (the manager knows the table's key already)
    params = false_condition(accounts.data, "a")
    tm.key_names(accounts.data)
    # When it is tried twice
    first = failed_attempt_costs(tm, params)
    second = failed_attempt_costs(tm, params)
    # Then the first asks DynamoDB about the UpdateExpression alone (it checks that before
    # the condition), once: the second costs one request less
    assert first == second + 1
    assert_clean(ddb, accounts)


def test_given_an_update_shape_applied_before_then_its_false_condition_asks_nothing_more(
    make_tm: Callable[..., TransactionManager], ddb: Any, accounts: Tables
) -> None:
    tm, fresh = make_tm(), make_tm()
    fresh.key_names(accounts.data)
    # Given an update of that shape the manager applied once (the condition true: 5 >= 1)
    one = {":n": {"N": "1"}}
    applied = {**false_condition(accounts.data, "a"), "ExpressionAttributeValues": one}
    with tm.transaction() as tx:
        tx.update_item(**applied)
    # When an update of the same shape meets a false condition, on a fresh manager and this one
    on_fresh = failed_attempt_costs(fresh, false_condition(accounts.data, "a"))
    on_this = failed_attempt_costs(tm, false_condition(accounts.data, "a"))
    # Then only the manager that never applied it asks
    assert on_this == on_fresh - 1
    assert_clean(ddb, accounts)
