"""Validation and normalisation of the boto3-shaped requests a transaction accepts.

Everything here runs before a single byte is written, so a rejected request
leaves the transaction exactly as it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from . import schema
from ._items import MAX_ITEM_BYTES, Item, item_size, request_id
from .errors import InvalidRequestError

Op = Literal["put", "update", "delete", "get"]

_COMMON = {"TableName", "ConditionExpression", "ExpressionAttributeNames"}
_ALLOWED: dict[str, set[str]] = {
    "put": _COMMON | {"Item", "ExpressionAttributeValues", "ReturnValues"},
    "update": _COMMON | {"Key", "UpdateExpression", "ExpressionAttributeValues", "ReturnValues"},
    "delete": _COMMON | {"Key", "ExpressionAttributeValues", "ReturnValues"},
    "get": {"TableName", "Key", "ConsistentRead"},
}
_RETURN_VALUES: dict[str, set[str]] = {
    "put": {"NONE", "ALL_OLD"},
    "update": {"NONE", "ALL_OLD", "UPDATED_OLD", "ALL_NEW", "UPDATED_NEW"},
    "delete": {"NONE", "ALL_OLD"},
}
_AV_TYPES = {"S", "N", "B", "BOOL", "NULL", "SS", "NS", "BS", "L", "M"}

#: Placeholders the protocol adds to user expressions; user placeholders may not use them.
PLACEHOLDER_PREFIX = "ddbtx"

#: Bytes the protocol adds to an item at most, besides an in-item image.
PROTOCOL_OVERHEAD = 160

_CLAUSE = re.compile(r"(?<![#:\w.])(SET|REMOVE|ADD|DELETE)(?!\w)", re.IGNORECASE)


@dataclass(frozen=True)
class Request:
    """One validated request on one item."""

    op: Op
    table: str
    key: Item
    params: dict[str, Any] = field(repr=False)
    rid: str = ""

    @property
    def return_values(self) -> str:
        return str(self.params.get("ReturnValues", "NONE"))

    @property
    def condition(self) -> str | None:
        cond = self.params.get("ConditionExpression")
        return str(cond) if cond else None


def _fail(message: str, table: str | None, key: Item | None = None) -> InvalidRequestError:
    return InvalidRequestError(message, table=table, key=key)


def _check_av(name: str, value: Any, table: str) -> None:
    if not (isinstance(value, dict) and len(value) == 1 and next(iter(value)) in _AV_TYPES):
        raise _fail(f"attribute {name!r} is not a low-level AttributeValue: {value!r:.80}", table)


def _check_names(names: Any, table: str) -> None:
    if names is None:
        return
    if not isinstance(names, dict):
        raise _fail("ExpressionAttributeNames must be a dict", table)
    for placeholder, real in names.items():
        if not (isinstance(placeholder, str) and placeholder.startswith("#")):
            raise _fail(f"placeholder {placeholder!r} must start with '#'", table)
        if placeholder[1:].startswith(PLACEHOLDER_PREFIX):
            raise _fail(f"placeholder {placeholder!r} is reserved by ddbtx", table)
        if not isinstance(real, str) or real.startswith(schema.RESERVED_PREFIX):
            raise _fail(
                f"attribute name {real!r} (behind {placeholder}) uses the reserved prefix "
                f"{schema.RESERVED_PREFIX!r}",
                table,
            )


def _check_values(values: Any, table: str) -> None:
    if values is None:
        return
    if not isinstance(values, dict):
        raise _fail("ExpressionAttributeValues must be a dict", table)
    for placeholder, value in values.items():
        if not (isinstance(placeholder, str) and placeholder.startswith(":")):
            raise _fail(f"placeholder {placeholder!r} must start with ':'", table)
        if placeholder[1:].startswith(PLACEHOLDER_PREFIX):
            raise _fail(f"placeholder {placeholder!r} is reserved by ddbtx", table)
        _check_av(placeholder, value, table)


def _check_key(key: Any, key_names: tuple[str, ...], table: str) -> Item:
    if not isinstance(key, dict) or not key:
        raise _fail("Key is missing or empty", table)
    if set(key) != set(key_names):
        raise _fail(
            f"Key must have exactly the key attributes {sorted(key_names)}, got {sorted(key)}",
            table,
        )
    for name, value in key.items():
        _check_av(name, value, table)
        ((kind, raw),) = value.items()
        if kind not in ("S", "N", "B") or raw in ("", b""):
            raise _fail(f"key attribute {name!r} must be a non-empty S, N or B", table)
    return {name: key[name] for name in key_names}


def build(op: Op, params: dict[str, Any], key_names: tuple[str, ...]) -> Request:
    """Validate boto3-style ``params`` for ``op`` and return a :class:`Request`.

    Raises
    ------
    InvalidRequestError
        Naming the first problem found; nothing has been written.
    """
    table = params.get("TableName")
    if not isinstance(table, str) or not table:
        raise _fail("TableName is missing", None)
    unknown = set(params) - _ALLOWED[op]
    if unknown:
        raise _fail(f"{op}_item does not support {sorted(unknown)} in a transaction", table)
    _check_names(params.get("ExpressionAttributeNames"), table)
    _check_values(params.get("ExpressionAttributeValues"), table)
    if op in _RETURN_VALUES:
        rv = params.get("ReturnValues", "NONE")
        if rv not in _RETURN_VALUES[op]:
            raise _fail(f"ReturnValues={rv!r} is not supported for {op}_item", table)
    for text_param in ("ConditionExpression", "UpdateExpression"):
        value = params.get(text_param)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise _fail(f"{text_param} must be a non-empty string", table)
    if op == "put":
        item = params.get("Item")
        if not isinstance(item, dict) or not item:
            raise _fail("Item is missing or empty", table)
        for name, value in item.items():
            if name.startswith(schema.RESERVED_PREFIX):
                raise _fail(
                    f"attribute name {name!r} uses the reserved prefix {schema.RESERVED_PREFIX!r}",
                    table,
                )
            _check_av(name, value, table)
        missing = [k for k in key_names if k not in item]
        if missing:
            raise _fail(f"Item lacks key attributes {missing}", table)
        key = _check_key({k: item[k] for k in key_names}, key_names, table)
        size = item_size(item) + PROTOCOL_OVERHEAD
        if size > MAX_ITEM_BYTES:
            raise _fail(
                f"item is {size} bytes with protocol attributes, over the "
                f"{MAX_ITEM_BYTES}-byte DynamoDB limit",
                table,
                key,
            )
    else:
        key = _check_key(params.get("Key"), key_names, table)
    if op == "update" and not params.get("UpdateExpression"):
        raise _fail("UpdateExpression is missing", table, key)
    return Request(op=op, table=table, key=key, params=dict(params), rid=request_id(table, key))


def merge_set(update_expression: str, assignments: str) -> str:
    """Add ``assignments`` to the SET clause of a user's update expression.

    DynamoDB allows each clause keyword once, so protocol assignments must join
    the user's own SET clause rather than start a second one.
    """
    matches = [m for m in _CLAUSE.finditer(update_expression) if m.group(1).upper() == "SET"]
    if not matches:
        return f"{update_expression} SET {assignments}"
    start = matches[0].end()
    following = [m.start() for m in _CLAUSE.finditer(update_expression) if m.start() > start]
    end = following[0] if following else len(update_expression)
    clause = update_expression[start:end].rstrip()
    return f"{update_expression[:start]}{clause}, {assignments} {update_expression[end:]}".strip()
