"""The response shapes of a transaction's requests, as boto3 returns them."""

from __future__ import annotations

from typing import Any

from .._base.items import Item, strip
from .view import Local


def wrap(item: Item) -> dict[str, Any]:
    return {"Item": item} if item else {}


def attributes(item: Item | None) -> dict[str, Any]:
    return {"Attributes": item} if item else {}


def return_values(local: Local, item: Item) -> dict[str, Any]:
    """ReturnValues for a write whose response was lost, rebuilt from the item."""
    rv = local.request.return_values
    if rv in ("ALL_OLD", "UPDATED_OLD"):
        return attributes(local.pre)
    if rv in ("ALL_NEW", "UPDATED_NEW"):
        return attributes(strip(item))
    return {}
