"""Keep plain writers off items a ddbtx transaction has locked (:func:`guard`)."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any, Final

from . import schema as s
from ._base.requests import grouped
from .errors import DdbtxError

#: Name placeholder the guard uses for the lock attribute (a suffix is added on a clash).
PLACEHOLDER: Final = "#ddbtxLock"
#: Parameters of DynamoDB's legacy API, which cannot be combined with a ConditionExpression.
_LEGACY: Final = ("Expected", "AttributeUpdates", "ConditionalOperator")


class GuardError(DdbtxError, ValueError):
    """The request cannot be guarded as given; the message names the parameter."""


def guard(params: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a write request that fails if a ddbtx transaction holds the item's lock.

    For ``put_item``, ``update_item``, ``delete_item`` and ``transact_write_items``, in both
    boto3 shapes; on a locked item the write fails like any false condition.

    Parameters
    ----------
    params
        The request's keyword arguments.

    Returns
    -------
    dict
        The guarded request's keyword arguments.

    Raises
    ------
    GuardError
        ``BatchWriteItem`` requests (they cannot carry a condition: write the
        items one by one or in a ``TransactWriteItems``), requests using the
        legacy ``Expected``/``AttributeUpdates`` parameters, or a transaction
        item that is not a ``Put``, ``Update``, ``Delete`` or ``ConditionCheck``.

    Examples
    --------
    >>> import ddbtx
    >>> request = ddbtx.guard({"TableName": "Accounts", "Item": {"pk": {"S": "alice"}}})
    >>> request["ConditionExpression"]
    'attribute_not_exists(#ddbtxLock)'
    >>> request["ExpressionAttributeNames"]
    {'#ddbtxLock': '_tx:id'}
    >>> client.put_item(**request)  # doctest: +SKIP
    """
    if not isinstance(params, Mapping):
        raise GuardError(f"guard() takes a request's keyword arguments, not {type(params)!r}")
    if "RequestItems" in params:
        raise GuardError(
            "RequestItems: BatchWriteItem cannot carry a condition, so it cannot be guarded; "
            "send each item as a guarded PutItem/DeleteItem or in a TransactWriteItems"
        )
    if "TransactItems" in params:
        items = [_guard_transact_item(i, item) for i, item in enumerate(params["TransactItems"])]
        return {**params, "TransactItems": items}
    return _guard_write(params, "request")


def is_locked(item: Mapping[str, Any] | None) -> bool:
    """Whether an item (either boto3 shape) is locked by a ddbtx transaction.

    Examples
    --------
    >>> is_locked({"pk": {"S": "alice"}, "_tx:id": {"S": "0186f-2c1d/9f3e"}})
    True
    """
    return item is not None and s.ATTR_LOCK in item


def _guard_transact_item(index: int, item: Mapping[str, Any]) -> dict[str, Any]:
    kinds = [k for k in item if k in ("Put", "Update", "Delete", "ConditionCheck")]
    if len(kinds) != 1:
        raise GuardError(
            f"TransactItems[{index}]: expected exactly one of Put, Update, Delete or "
            f"ConditionCheck, got {sorted(item)}"
        )
    (kind,) = kinds
    if kind == "ConditionCheck":
        return dict(item)
    return {**item, kind: _guard_write(item[kind], f"TransactItems[{index}].{kind}")}


def _guard_write(params: Mapping[str, Any], where: str) -> dict[str, Any]:
    legacy = [name for name in _LEGACY if name in params]
    if legacy:
        raise GuardError(
            f"{where}: {', '.join(legacy)} (DynamoDB's legacy parameters) cannot be combined "
            "with the guard's ConditionExpression; use UpdateExpression/ConditionExpression"
        )
    out = dict(params)
    names = dict(params.get("ExpressionAttributeNames") or {})
    values = copy.copy(params.get("ExpressionAttributeValues"))
    condition = params.get("ConditionExpression")
    if condition is not None and not isinstance(condition, str):
        # A boto3.dynamodb.conditions object: rendered with placeholders clear of the request's.
        condition, names, values = _render(condition, names, values)
    placeholder = _free(PLACEHOLDER, names, params)
    names[placeholder] = s.ATTR_LOCK
    # guard: no transaction holds this item's lock (a lock is released by removing the
    # attribute, so an unlocked item passes and only the request's own condition decides).
    mine = f"attribute_not_exists({placeholder})"
    out["ConditionExpression"] = f"{mine} AND {grouped(condition)}" if condition else mine
    out["ExpressionAttributeNames"] = names
    if values is not None:
        out["ExpressionAttributeValues"] = values
    return out


def _render(
    condition: Any, names: dict[str, str], values: dict[str, Any] | None
) -> tuple[str, dict[str, str], dict[str, Any] | None]:
    """A conditions object as (expression, names, values), placeholders clear of the request's."""
    from boto3.dynamodb.conditions import ConditionBase, ConditionExpressionBuilder

    if not isinstance(condition, ConditionBase):
        raise GuardError(
            "ConditionExpression must be a string or a boto3.dynamodb.conditions "
            f"condition, not {type(condition)!r}"
        )
    built = ConditionExpressionBuilder().build_expression(condition)
    taken = set(names) | set(values or {})
    renamed: dict[str, str] = {}
    for old in [*built.attribute_name_placeholders, *built.attribute_value_placeholders]:
        new = old.replace("#n", "#ddbtxN", 1).replace(":v", ":ddbtxV", 1)
        while new in taken:
            new += "_"
        taken.add(new)
        renamed[old] = new
    expression = re.sub(
        r"[#:][nv]\d+\b", lambda m: renamed.get(m.group(0), m.group(0)), built.condition_expression
    )
    built_values = {renamed[k]: v for k, v in built.attribute_value_placeholders.items()}
    return (
        expression,
        {**names, **{renamed[k]: v for k, v in built.attribute_name_placeholders.items()}},
        {**(values or {}), **built_values} if built_values else values,
    )


def _free(placeholder: str, names: Mapping[str, str], params: Mapping[str, Any]) -> str:
    """``placeholder``, or it with a number, so that no expression of the request uses it."""
    texts = [v for k, v in params.items() if k.endswith("Expression") and isinstance(v, str)]
    candidate, n = placeholder, 1
    while candidate in names or any(re.search(re.escape(candidate) + r"\b", t) for t in texts):
        n += 1
        candidate = f"{placeholder}{n}"
    return candidate
