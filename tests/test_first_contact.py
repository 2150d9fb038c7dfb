"""What a newcomer meets first (issue 24): error messages that say what is wrong.

Each case is a mistake made while trying ddbtx out, on both emulators: the message
must carry the part that names the mistake, not only in ``__cause__``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ddbtx import InvalidRequestError, TransactionManager
from ddbtx.errors import TableNotFound
from ddbtx.tables import create_data_table


@pytest.fixture
def accounts(ddb: Any, table_name: Callable[[str], str]) -> str:
    """A data table keyed by ``id``, as the guides' examples make it."""
    name = table_name("accounts")
    create_data_table(ddb, name, partition_key="id")
    return name


@pytest.mark.parametrize(
    ("call", "params", "detail"),
    [
        (
            "update_item",
            {"Key": {"name": {"S": "alice"}}, "UpdateExpression": "SET a = :v",
             "ExpressionAttributeValues": {":v": {"N": "1"}}},
            "The provided key element does not match the schema",
        ),
        (
            "put_item",
            {"Item": {"name": {"S": "alice"}}},
            "One or more parameter values were invalid: Missing the key id in the item",
        ),
        (
            "put_item",
            {"Item": {"id": {"S": "alice"}}, "ReturnItemCollectionMetrics": "SIZE"},
            "put_item does not support ['ReturnItemCollectionMetrics'] in a transaction",
        ),
    ],
)  # fmt: skip
def test_given_a_bad_request_in_a_transaction_then_its_message_says_what_is_wrong(
    ddb: Any,
    table_name: Callable[[str], str],
    accounts: str,
    call: str,
    params: dict[str, Any],
    detail: str,
) -> None:
    # Given a transaction on a table keyed by id
    tm = TransactionManager(ddb, table_name("tx"), table_name("img"))
    tm.create_tables()
    tx = tm.begin()

    # When a request gets the item's shape wrong
    with pytest.raises(InvalidRequestError) as caught:
        getattr(tx, call)(TableName=accounts, **params)

    # Then the message itself names the mistake, then the transaction and table
    assert str(caught.value).startswith(f"{detail} [tx={tx.id} table={accounts} ")
    tx.rollback()


def test_given_no_protocol_tables_when_a_transaction_writes_then_the_error_names_the_table(
    ddb: Any, table_name: Callable[[str], str], accounts: str
) -> None:
    # Given a manager whose tables were never created (tm.create_tables() forgotten)
    transactions = table_name("tx")
    tm = TransactionManager(ddb, transactions, table_name("img"))

    # When a transaction writes its first item (which creates its record)
    with pytest.raises(TableNotFound) as caught:
        tm.run(lambda tx: tx.put_item(TableName=accounts, Item={"id": {"S": "alice"}}))

    # Then the message names the missing table and how to create it
    assert f"table {transactions!r}" in str(caught.value)
    assert "TransactionManager.create_tables()" in str(caught.value)
