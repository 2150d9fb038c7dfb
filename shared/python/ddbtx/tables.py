"""Create the protocol's tables for local and development use (CDK provisions them in AWS)."""

from __future__ import annotations

import logging
from typing import Any

from . import schema as s
from ._dynamo import call
from .errors import DynamoDBError, TableNotFound

logger = logging.getLogger(__name__)


def create_table_if_missing(client: Any, name: str, ttl_attribute: str | None, **spec: Any) -> None:
    """Create an on-demand table with ``spec`` unless it exists; wait until active; enable TTL.

    Idempotent and safe to run concurrently; TTL (when ``ttl_attribute`` is
    given) is skipped where the emulator lacks the API: TTL is garbage
    collection only, never relied on.
    """
    try:
        call(client, "describe_table", TableName=name)
    except TableNotFound:
        try:
            call(client, "create_table", TableName=name, BillingMode="PAY_PER_REQUEST", **spec)
        except DynamoDBError as exc:
            if exc.code != "ResourceInUseException":  # created concurrently: fine
                raise
    client.get_waiter("table_exists").wait(
        TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
    )
    if ttl_attribute is None:
        return
    try:
        call(
            client,
            "update_time_to_live",
            TableName=name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl_attribute},
        )
    except DynamoDBError as exc:
        # Already enabled, or an emulator without the TTL API (dynalite): TTL is
        # garbage collection only, so the protocol never depends on it.
        logger.debug("TTL not enabled on %s: %s", name, exc.code)


def create_transactions_table(client: Any, name: str) -> None:
    """Transactions table: hash ``id`` + range ``sk``, with the sparse sweep index."""
    create_table_if_missing(
        client,
        name,
        s.TX_TTL,
        KeySchema=[
            {"AttributeName": s.TX_PK, "KeyType": "HASH"},
            {"AttributeName": s.TX_SK, "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": s.TX_PK, "AttributeType": "S"},
            {"AttributeName": s.TX_SK, "AttributeType": "S"},
            {"AttributeName": s.TX_SWEEP_KEY, "AttributeType": "S"},
            {"AttributeName": s.TX_UPDATED, "AttributeType": "N"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": s.SWEEP_INDEX,
                "KeySchema": [
                    {"AttributeName": s.TX_SWEEP_KEY, "KeyType": "HASH"},
                    {"AttributeName": s.TX_UPDATED, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
    )


def create_images_table(client: Any, name: str) -> None:
    """Images table: hash ``id`` (transaction) + range ``rid`` (request)."""
    create_table_if_missing(
        client,
        name,
        s.IMAGE_TTL,
        KeySchema=[
            {"AttributeName": s.IMAGE_PK, "KeyType": "HASH"},
            {"AttributeName": s.IMAGE_SK, "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": s.IMAGE_PK, "AttributeType": "S"},
            {"AttributeName": s.IMAGE_SK, "AttributeType": "S"},
        ],
    )


def create_data_table(client: Any, name: str, partition_key: str = "pk") -> None:
    """An application table with a string hash key, for local runs, tests and the demo.

    Examples
    --------
    >>> create_data_table(client, "Accounts", partition_key="id")  # doctest: +SKIP
    """
    create_table_if_missing(
        client,
        name,
        None,
        KeySchema=[{"AttributeName": partition_key, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": partition_key, "AttributeType": "S"}],
    )
