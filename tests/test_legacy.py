"""The legacy parameters in a transaction (issue 32): ``AttributeUpdates`` and ``Expected``
become their expression forms, as the Developer Guide defines them ("Legacy conditional
parameters"). The oracle compares most shapes with native DynamoDB on both emulators; these
tests cover what neither emulator does as AWS documents (ConditionalOperator OR)."""

from __future__ import annotations

from typing import Any

import pytest

from ddbtx import ConditionalCheckFailedError, InvalidRequestError, TransactionManager
from ddbtx._base.legacy import as_expressions
from helpers import Tables, assert_clean


def test_given_legacy_parameters_then_they_become_expressions() -> None:
    # Given an update with every AttributeUpdates action and Expected with OR
    params = {
        "TableName": "T",
        "Key": {"pk": {"S": "a"}},
        "AttributeUpdates": {
            "v": {"Value": {"S": "x"}},
            "n": {"Value": {"N": "1"}, "Action": "ADD"},
            "s": {"Action": "DELETE"},
            "ss": {"Value": {"SS": ["a"]}, "Action": "DELETE"},
        },
        "Expected": {
            "n": {"ComparisonOperator": "IN", "AttributeValueList": [{"N": "1"}, {"N": "2"}]},
            "q": {"Exists": False},
        },
        "ConditionalOperator": "OR",
    }
    # When translated
    out = as_expressions(params)
    # Then each is its expression, with placeholders of their own
    assert out["UpdateExpression"] == (
        "SET #legacy0 = :legacy0 ADD #legacy1 :legacy1 DELETE #legacy3 :legacy2 REMOVE #legacy2"
    )
    assert out["ConditionExpression"] == (
        "#legacy4 IN (:legacy3, :legacy4) OR attribute_not_exists(#legacy5)"
    )
    assert out["ExpressionAttributeNames"]["#legacy5"] == "q"
    assert not {"AttributeUpdates", "Expected", "ConditionalOperator"} & set(out)


def test_given_legacy_and_expression_parameters_then_dynamodbs_refusal() -> None:
    with pytest.raises(InvalidRequestError) as raised:
        as_expressions({"Expected": {"n": {"Exists": False}}, "ConditionExpression": "a = :a"})
    assert raised.value.response["Error"]["Message"] == (
        "Can not use both expression and non-expression parameters in the same request: "
        "Non-expression parameters: {Expected} Expression parameters: {ConditionExpression}"
    )


@pytest.mark.parametrize(("first", "holds"), [("GT", True), ("LT", False)])
def test_given_expected_with_or_when_a_transaction_updates_then_any_entry_suffices(
    tm: TransactionManager, ddb: Any, tables: Tables, first: str, holds: bool
) -> None:
    # Given an item with n = 5 and s = "hello"
    ddb.put_item(
        TableName=tables.data, Item={"pk": {"S": "a"}, "n": {"N": "5"}, "s": {"S": "hello"}}
    )
    expected = {
        "n": {"ComparisonOperator": "LT", "AttributeValueList": [{"N": "1"}]},
        "s": {"ComparisonOperator": first, "AttributeValueList": [{"S": "a"}]},
    }

    def update(tx: Any) -> Any:
        return tx.update_item(
            TableName=tables.data,
            Key={"pk": {"S": "a"}},
            AttributeUpdates={"v": {"Value": {"S": "x"}}},
            Expected=expected,
            ConditionalOperator="OR",
        )

    # When a transaction updates it under Expected joined by OR (n < 1 is false)
    if holds:
        tm.run(update)
    else:
        with pytest.raises(ConditionalCheckFailedError):
            tm.run(update)
    # Then it applied exactly when the second entry holds ("hello" > "a")
    item = ddb.get_item(TableName=tables.data, Key={"pk": {"S": "a"}})["Item"]
    assert ("v" in item) is holds
    assert_clean(ddb, tables)
