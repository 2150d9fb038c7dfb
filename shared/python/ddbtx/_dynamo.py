"""The single door to DynamoDB: every call goes through :func:`call`.

It translates botocore ``ClientError`` into :mod:`ddbtx.errors` classes (one
place, cause kept) and strips response metadata nobody needs.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from .errors import ConditionFailed, translate

#: HTTP connections a client keeps: at least the manager's default pool of
#: concurrent per-item steps (32), so no step waits for or reopens a connection.
POOL_CONNECTIONS = 50


def client_config(max_attempts: int) -> Any:
    """botocore ``Config`` for the clients ddbtx makes: standard retries, a pool that fits."""
    from botocore.config import Config

    return Config(
        retries={"max_attempts": max_attempts, "mode": "standard"},
        max_pool_connections=POOL_CONNECTIONS,
    )


def call(client: Any, operation: str, *, resent: Any = None, **params: Any) -> dict[str, Any]:
    """Call ``client.<operation>(**params)``; raise a :class:`DynamoDBError` on failure.

    ``resent`` (a ``list[bool]``; typed Any so that ``**params`` dicts still pass)
    gets whether botocore sent the request more than once: an earlier attempt may
    then have been applied behind a lost answer.
    """
    try:
        response: dict[str, Any] = getattr(client, operation)(**params)
    except ClientError as exc:
        raise translate(exc, _tables(params)) from exc
    meta = response.pop("ResponseMetadata", None) or {}
    if resent is not None:
        resent.append(int(meta.get("RetryAttempts", 0)) > 0)
    return response


def _tables(params: dict[str, Any]) -> tuple[str, ...]:
    """The tables a request names: ``TableName``, or a batch's ``RequestItems``."""
    if isinstance(params.get("TableName"), str):
        return (params["TableName"],)
    items = params.get("RequestItems")
    return tuple(sorted(items)) if isinstance(items, dict) else ()


def was_resent(exc: BaseException) -> bool:
    """Whether botocore sent the request that failed with ``exc`` (a translated
    error) more than once; an unknown count is taken as resent."""
    response = getattr(exc.__cause__, "response", None)
    meta = response.get("ResponseMetadata", {}) if isinstance(response, dict) else {}
    return int(meta.get("RetryAttempts", 1)) > 0


def put_new(client: Any, table: str, item: dict[str, Any], condition: str, key: str) -> bool:
    """PutItem of a row that must not exist yet (``condition`` names ``key`` as ``#id``).

    Returns False when the condition failed: the row exists (possibly our own
    put, its response lost and the SDK's retry refused).
    """
    try:
        call(
            client,
            "put_item",
            TableName=table,
            Item=item,
            ConditionExpression=condition,
            ExpressionAttributeNames={"#id": key},
        )
    except ConditionFailed:
        return False
    return True
