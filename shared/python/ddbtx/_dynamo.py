"""The single blocking door to DynamoDB: every sync call goes through :func:`call`."""

from __future__ import annotations

from typing import Any

from ._drive import drive
from ._effects import request

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

    The blocking form of :func:`ddbtx._effects.request`. ``resent`` (a ``list[bool]``, typed
    Any so ``**params`` dicts pass) gets whether botocore sent the request more than once.
    """
    response: dict[str, Any] = drive(request(operation, resent=resent, **params), client)
    return response
