"""The single blocking door to DynamoDB: every sync call goes through :func:`call`."""

from __future__ import annotations

from typing import Any

from .drive import drive
from .effects import request


def client_config(max_attempts: int) -> Any:
    """botocore ``Config`` for the clients ddbtx makes: standard retries, a pool that fits."""
    from botocore.config import Config

    return Config(
        retries={"max_attempts": max_attempts, "mode": "standard"},
        # At least the manager's default pool of per-item steps (32): none waits or reconnects.
        max_pool_connections=50,
    )


def call(client: Any, operation: str, *, resent: Any = None, **params: Any) -> dict[str, Any]:
    """The blocking :func:`ddbtx._base.effects.request`."""
    response: dict[str, Any] = drive(request(operation, resent=resent, **params), client)
    return response
