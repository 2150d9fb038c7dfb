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


#: Endpoints that answered ``TransactWriteItems`` with ``UnknownOperationException`` (an
#: emulator without the API; AWS serves it): the protocol does without it there, and asks
#: once per process (:mod:`ddbtx.local` names its dynalite's at start).
_WITHOUT_TRANSACTIONS: set[str] = set()


def endpoint_of(client: Any) -> str | None:
    url = getattr(getattr(client, "meta", None), "endpoint_url", None)
    return url if isinstance(url, str) else None


def serves_transactions(client: Any) -> bool | None:
    """False where ``client``'s endpoint is known not to serve ``TransactWriteItems``;
    None where nothing is known yet (the first call tells)."""
    return False if endpoint_of(client) in _WITHOUT_TRANSACTIONS else None


def without_transactions(endpoint: str | None, *, serves: bool = False) -> None:
    """Note that ``endpoint`` does not serve ``TransactWriteItems`` (``serves``: forget it)."""
    if endpoint is None:
        return
    if serves:
        _WITHOUT_TRANSACTIONS.discard(endpoint)
    else:
        _WITHOUT_TRANSACTIONS.add(endpoint)


def call(client: Any, operation: str, *, resent: Any = None, **params: Any) -> dict[str, Any]:
    """The blocking :func:`ddbtx._base.effects.request`."""
    response: dict[str, Any] = drive(request(operation, resent=resent, **params), client)
    return response
