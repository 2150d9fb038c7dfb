"""Low-level AttributeValue helpers: sizes, protocol-attribute stripping, keys."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from . import schema

Item = dict[str, Any]

#: DynamoDB's item size limit, in bytes.
MAX_ITEM_BYTES = 400 * 1024


def value_size(value: dict[str, Any]) -> int:
    """Approximate stored size of one AttributeValue, after DynamoDB's sizing rules."""
    ((kind, raw),) = value.items()
    if kind == "S":
        return len(raw.encode())
    if kind == "N":
        return (len(str(raw).lstrip("-").replace(".", "")) + 1) // 2 + 1
    if kind == "B":
        return len(raw)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode()) for s in raw)
    if kind == "NS":
        return sum(value_size({"N": n}) for n in raw)
    if kind == "BS":
        return sum(len(b) for b in raw)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in raw)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(v) for k, v in raw.items())
    raise ValueError(f"unknown AttributeValue type {kind!r}")


def item_size(item: Item) -> int:
    """Approximate size of an item as DynamoDB counts it toward the 400 KB limit."""
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def strip(item: Item | None) -> Item:
    """The user's view of an item: every protocol attribute removed."""
    if not item:
        return {}
    return {k: v for k, v in item.items() if not k.startswith(schema.RESERVED_PREFIX)}


def key_of(item: Item, key_names: tuple[str, ...]) -> Item:
    return {name: item[name] for name in key_names}


def _canonical(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return {"__b64": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple | set | frozenset):
        return [_canonical(v) for v in value]
    return value


def request_id(table: str, key: Item) -> str:
    """A stable id for "this item in this table": one request per item per transaction."""
    text = json.dumps([table, _canonical(key)], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def is_locked_by(item: Item | None, tx_id: str) -> bool:
    lock = (item or {}).get(schema.ATTR_LOCK, {}).get("S")
    return isinstance(lock, str) and lock.startswith(tx_id + "/")


def lock_owner(item: Item | None) -> str | None:
    """The transaction id in an item's lock attribute, or None when unlocked."""
    lock = (item or {}).get(schema.ATTR_LOCK, {}).get("S")
    if not isinstance(lock, str):
        return None
    return lock.rsplit("/", 1)[0]


def flag(item: Item | None, name: str) -> bool:
    return bool((item or {}).get(name, {}).get("BOOL", False))
