"""Create the protocol's tables for local and development use (CDK provisions them in AWS)."""

from __future__ import annotations

import logging
import time
from typing import Any, Final

from . import schema as s
from ._base.drive import drive
from ._base.dynamo import call
from ._base.effects import Step, pause, request
from .errors import DdbtxError, DynamoDBError, TableNotFound

logger = logging.getLogger(__name__)


def create_table_if_missing(client: Any, name: str, ttl_attribute: str | None, **spec: Any) -> None:
    """Create an on-demand table with ``spec`` unless it exists; wait until active; enable TTL
    (idempotent, safe to run concurrently)."""
    drive(ensure_table(name, ttl_attribute, **spec), client)


#: How the wait for a new table polls: as boto3's ``table_exists`` waiter would.
TABLE_POLL_SECONDS = 1.0
TABLE_POLLS = 120


def ensure_table(name: str, ttl_attribute: str | None, **spec: Any) -> Step[None]:
    """The step of :func:`create_table_if_missing`, for any driver."""
    try:
        yield from request("describe_table", TableName=name)
    except TableNotFound:
        try:
            yield from request(
                "create_table", TableName=name, BillingMode="PAY_PER_REQUEST", **spec
            )
        except DynamoDBError as exc:
            if exc.code != "ResourceInUseException":  # created concurrently: fine
                raise
    yield from _wait_active(name)
    if ttl_attribute is None:
        return
    try:
        yield from request(
            "update_time_to_live",
            TableName=name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl_attribute},
        )
    except DynamoDBError as exc:
        # Already enabled, or no TTL API (dynalite): TTL is garbage collection only.
        logger.debug("TTL not enabled on %s: %s", name, exc.code)


def _wait_active(name: str) -> Step[None]:
    for attempt in range(TABLE_POLLS):
        if attempt:
            yield from pause(TABLE_POLL_SECONDS)
        try:
            described = yield from request("describe_table", TableName=name)
        except TableNotFound:
            continue  # listed a moment later by an eventually consistent endpoint
        if described["Table"].get("TableStatus") == "ACTIVE":
            return
    raise DdbtxError(f"table {name!r} did not become ACTIVE within {TABLE_POLLS} polls")


def create_transactions_table(client: Any, name: str) -> None:
    """Transactions table: hash ``id`` + range ``sk``, with the sparse sweep index."""
    drive(transactions_table(name), client)


def transactions_table(name: str) -> Step[None]:
    """The step of :func:`create_transactions_table`, for any driver."""
    spec = _string_keys(s.TX_PK, s.TX_SK)
    spec["AttributeDefinitions"] += [
        {"AttributeName": s.TX_SWEEP_KEY, "AttributeType": "S"},
        {"AttributeName": s.TX_UPDATED, "AttributeType": "N"},
    ]
    index = {
        "IndexName": s.SWEEP_INDEX,
        "KeySchema": [
            {"AttributeName": s.TX_SWEEP_KEY, "KeyType": "HASH"},
            {"AttributeName": s.TX_UPDATED, "KeyType": "RANGE"},
        ],
        "Projection": {"ProjectionType": "KEYS_ONLY"},
    }
    return ensure_table(name, s.TX_TTL, GlobalSecondaryIndexes=[index], **spec)


def create_images_table(client: Any, name: str) -> None:
    """Images table: hash ``id`` (transaction) + range ``rid`` (request)."""
    drive(images_table(name), client)


def images_table(name: str) -> Step[None]:
    """The step of :func:`create_images_table`, for any driver."""
    return ensure_table(name, s.IMAGE_TTL, **_string_keys(s.IMAGE_PK, s.IMAGE_SK))


def _string_keys(hash_key: str, range_key: str) -> dict[str, Any]:
    """``KeySchema`` and ``AttributeDefinitions`` of a table keyed by two strings."""
    return {
        "KeySchema": [
            {"AttributeName": hash_key, "KeyType": "HASH"},
            {"AttributeName": range_key, "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [
            {"AttributeName": n, "AttributeType": "S"} for n in (hash_key, range_key)
        ],
    }


def _lock_index(throughput: dict[str, int] | None = None) -> dict[str, Any]:
    """The sparse lock index: a GSI omits items without its key ``ATTR_LOCK``."""
    index: dict[str, Any] = {
        "IndexName": s.LOCK_INDEX,
        "KeySchema": [{"AttributeName": s.ATTR_LOCK, "KeyType": "HASH"}],
        "Projection": {"ProjectionType": "KEYS_ONLY"},
    }
    if throughput:
        index["ProvisionedThroughput"] = throughput
    return index


_LOCK_ATTRIBUTE: Final = {"AttributeName": s.ATTR_LOCK, "AttributeType": "S"}


def create_data_table(
    client: Any,
    name: str,
    partition_key: str = "pk",
    *,
    lock_index: bool = True,
    stream: bool = False,
) -> None:
    """An application table with a string hash key, with the sweeper's sparse lock index and,
    with ``stream``, a ``NEW_AND_OLD_IMAGES`` stream for :mod:`ddbtx.streams`.

    Examples
    --------
    >>> create_data_table(client, "Accounts", partition_key="id")  # doctest: +SKIP
    """
    attributes = [{"AttributeName": partition_key, "AttributeType": "S"}]
    options: dict[str, Any] = {}
    if lock_index:
        attributes.append(_LOCK_ATTRIBUTE)
        options["GlobalSecondaryIndexes"] = [_lock_index()]
    if stream:
        options["StreamSpecification"] = {
            "StreamEnabled": True,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        }
    key_schema = [{"AttributeName": partition_key, "KeyType": "HASH"}]
    create_table_if_missing(
        client, name, None, KeySchema=key_schema, AttributeDefinitions=attributes, **options
    )


def lock_index_status(description: dict[str, Any]) -> str | None:
    """The lock index's ``IndexStatus`` in a DescribeTable ``Table`` (None: no such index).

    Examples
    --------
    >>> lock_index_status({"TableName": "Accounts"}) is None
    True
    """
    for index in description.get("GlobalSecondaryIndexes") or ():
        if index.get("IndexName") == s.LOCK_INDEX:
            if index.get("Backfilling"):
                return "BACKFILLING"
            status: str = index.get("IndexStatus", "ACTIVE")
            return status
    return None


class LockIndexError(DdbtxError):
    """The lock index cannot be added to this table; the message says why."""


def add_lock_index(
    client: Any, table: str, *, wait: bool = True, poll_seconds: float = 10.0
) -> str:
    """Add the sparse lock index to an existing data table (e.g. one of ``dataTables``).

    Idempotent; on a provisioned table the index gets the table's capacity.

    Parameters
    ----------
    client
        A low-level boto3 DynamoDB client.
    table
        The data table's name.
    wait
        Wait until the index is ``ACTIVE`` (backfilled).
    poll_seconds
        Seconds between two DescribeTable calls while waiting.

    Returns
    -------
    str
        The index status when done: ``"ACTIVE"``, or ``"CREATING"`` without ``wait``.

    Raises
    ------
    TableNotFound
        No table of that name (in that region/account).
    LockIndexError
        Another index has that name, or the endpoint cannot add the index.

    Examples
    --------
    >>> add_lock_index(boto3.client("dynamodb"), "Accounts")  # doctest: +SKIP
    'ACTIVE'
    """
    desc = call(client, "describe_table", TableName=table)["Table"]
    status = lock_index_status(desc)
    if status is None:
        throughput = None
        if (desc.get("BillingModeSummary") or {}).get("BillingMode") != "PAY_PER_REQUEST":
            table_throughput = desc.get("ProvisionedThroughput") or {}
            throughput = {
                "ReadCapacityUnits": max(1, int(table_throughput.get("ReadCapacityUnits", 1))),
                "WriteCapacityUnits": max(1, int(table_throughput.get("WriteCapacityUnits", 1))),
            }
        call(
            client,
            "update_table",
            TableName=table,
            AttributeDefinitions=[_LOCK_ATTRIBUTE],
            GlobalSecondaryIndexUpdates=[{"Create": _lock_index(throughput)}],
        )
        logger.info("adding index %s to %s", s.LOCK_INDEX, table)
        desc = call(client, "describe_table", TableName=table)["Table"]
        status = lock_index_status(desc)
        if status is None:
            raise LockIndexError(
                f"{table}: UpdateTable was accepted but the table lists no index "
                f"{s.LOCK_INDEX!r} (an endpoint that cannot add an index to an existing "
                "table, such as dynalite)"
            )
    else:
        _check_lock_index_shape(table, desc)
    while wait and status != "ACTIVE":
        time.sleep(poll_seconds)
        status = lock_index_status(call(client, "describe_table", TableName=table)["Table"])
        if status is None:
            raise LockIndexError(f"{table}: index {s.LOCK_INDEX!r} vanished while being built")
    assert status is not None
    return status


def _check_lock_index_shape(table: str, desc: dict[str, Any]) -> None:
    index = next(i for i in desc["GlobalSecondaryIndexes"] if i["IndexName"] == s.LOCK_INDEX)
    keys = [(k["AttributeName"], k["KeyType"]) for k in index["KeySchema"]]
    if keys != [(s.ATTR_LOCK, "HASH")]:
        raise LockIndexError(
            f"{table} has an index named {s.LOCK_INDEX!r} keyed on {keys}, not on "
            f"{s.ATTR_LOCK!r} alone: drop or rename it first"
        )
