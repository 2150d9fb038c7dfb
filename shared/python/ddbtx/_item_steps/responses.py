"""The response shapes of a transaction's requests, as boto3 returns them."""

from __future__ import annotations

from typing import Any

from .._base.conditions import project, updated_paths
from .._base.items import Item, strip
from .._base.requests import Request
from .view import Local


def wrap(item: Item) -> dict[str, Any]:
    return {"Item": item} if item else {}


def attributes(item: Item | None) -> dict[str, Any]:
    return {"Attributes": item} if item else {}


def updated(req: Request, item: Item | None) -> Item:
    """The attributes ``req``'s update writes, as ``item`` holds them (DynamoDB's answer to
    ``UPDATED_OLD`` on the item before, ``UPDATED_NEW`` on the item after)."""
    expression = req.params.get("UpdateExpression")
    if not expression or not item:
        return {}
    names = req.params.get("ExpressionAttributeNames") or {}
    return project(item, updated_paths(expression, names))


def rebuilt(req: Request, before: Item | None, after: Item | None) -> dict[str, Any]:
    """ReturnValues for a write whose answer was lost, rebuilt from the item as it was
    (``before``) and as the write left it (``after``), as DynamoDB would have answered."""
    rv = req.return_values
    if rv == "ALL_OLD":
        return attributes(before)
    if rv == "UPDATED_OLD":
        return attributes(updated(req, before))
    if rv == "ALL_NEW":
        return attributes(after)
    if rv == "UPDATED_NEW":
        return attributes(updated(req, after))
    return {}


def return_values(local: Local, item: Item) -> dict[str, Any]:
    """ReturnValues for a write whose answer was lost, rebuilt from the item it left."""
    return rebuilt(local.request, local.pre, strip(item))
