"""Low-level AttributeValue helpers: sizes, protocol-attribute stripping, keys."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import secrets
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from .. import schema

Item = dict[str, Any]

#: DynamoDB's item size limit, in bytes.
MAX_ITEM_BYTES = 400 * 1024

#: Each type's stored size, from its raw value, after DynamoDB's sizing rules.
_SIZES: dict[str, Callable[[Any], int]] = {
    "S": lambda raw: len(raw.encode()),
    "N": lambda raw: (len(str(raw).lstrip("-").replace(".", "")) + 1) // 2 + 1,
    "B": len,
    "BOOL": lambda raw: 1,
    "NULL": lambda raw: 1,
    "SS": lambda raw: sum(len(s.encode()) for s in raw),
    "NS": lambda raw: sum(value_size({"N": n}) for n in raw),
    "BS": lambda raw: sum(len(b) for b in raw),
    "L": lambda raw: 3 + sum(1 + value_size(v) for v in raw),
    "M": lambda raw: 3 + sum(1 + len(k.encode()) + value_size(v) for k, v in raw.items()),
}


def value_size(value: dict[str, Any]) -> int:
    """Approximate stored size of one AttributeValue, after DynamoDB's sizing rules."""
    ((kind, raw),) = value.items()
    if kind not in _SIZES:
        raise ValueError(f"unknown AttributeValue type {kind!r}")
    return _SIZES[kind](raw)


def as_json(value: dict[str, Any]) -> dict[str, Any]:
    """One AttributeValue as JSON data: binary values base64-encoded, as in a Lambda event."""
    ((kind, raw),) = value.items()
    if kind == "B":
        return {"B": base64.b64encode(raw).decode()}
    if kind == "BS":
        return {"BS": [base64.b64encode(b).decode() for b in raw]}
    if kind == "M":
        return {"M": {k: as_json(v) for k, v in raw.items()}}
    if kind == "L":
        return {"L": [as_json(v) for v in raw]}
    return value


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


#: DynamoDB's number syntax (as Java's BigDecimal reads it, without NaN or infinities).
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def canonical_number(text: Any) -> str:
    """DynamoDB's spelling of a number; ``ValueError`` with its reason for one it rejects."""
    if not isinstance(text, str) or not _NUMBER.fullmatch(text):
        raise ValueError(f"the parameter cannot be converted to a numeric value: {text!r:.60}")
    sign, digits, exponent = Decimal(text).as_tuple()
    assert isinstance(exponent, int)  # the syntax above admits no NaN or infinity
    significant = "".join(map(str, digits)).lstrip("0")
    if not significant:
        return "0"
    stripped = significant.rstrip("0")
    exponent += len(significant) - len(stripped)
    if len(stripped) > 38:
        raise ValueError("attempting to store more than 38 significant digits in a Number")
    magnitude = exponent + len(stripped) - 1  # the power of ten of the leading digit
    if magnitude > 125:
        raise ValueError("number overflow: magnitude larger than supported range")
    if magnitude < -130:
        raise ValueError("number underflow: magnitude smaller than supported range")
    return format(Decimal((sign, tuple(map(int, stripped)), exponent)), "f")


def comparable(value: Any) -> Any:
    """An AttributeValue in a form where the values DynamoDB's ``=`` finds equal compare
    equal (numbers by value, sets in any order, binary as bytes); a malformed one as it is."""
    if not isinstance(value, dict) or len(value) != 1:
        return value
    ((kind, raw),) = value.items()
    form = _COMPARABLE.get(kind)
    if form is not None:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            return kind, form(raw)
    return kind, raw


def as_bytes(raw: Any) -> bytes:
    """A binary value's bytes (boto3 may give a str, bytearray or memoryview)."""
    return raw.encode() if isinstance(raw, str) else bytes(raw)


#: Each type's comparable form of its raw value (other types compare as they are).
_COMPARABLE: dict[str, Callable[[Any], Any]] = {
    "N": canonical_number,
    "B": as_bytes,
    "SS": frozenset,
    "NS": lambda raw: frozenset(canonical_number(member) for member in raw),
    "BS": lambda raw: frozenset(as_bytes(member) for member in raw),
    "M": lambda raw: tuple(sorted((k, comparable(v)) for k, v in raw.items())),
    "L": lambda raw: tuple(comparable(v) for v in raw),
}


def canonical_key_value(value: dict[str, Any]) -> dict[str, Any]:
    """One form per key value: numbers as DynamoDB spells them, binary (even a str) as bytes."""
    ((kind, raw),) = value.items()
    if kind == "N":
        return {"N": canonical_number(raw)}
    if kind == "B" and isinstance(raw, str):
        return {"B": raw.encode()}
    if kind == "B" and isinstance(raw, bytearray | memoryview):
        return {"B": bytes(raw)}
    return value


def _canonical(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return {"__b64": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple | set | frozenset):
        return [_canonical(v) for v in value]
    return value


def probe_key(key: Item) -> Item:
    """A key of ``key``'s attributes and types that no item has: a write there, refused or
    conditional on the item existing, touches nothing (DynamoDB's answer is the point)."""
    return {name: _probe_value(value) for name, value in key.items()}


def _probe_value(value: dict[str, Any]) -> dict[str, Any]:
    ((kind, _),) = value.items()
    token = uuid.uuid4()
    if kind == "N":
        return {"N": str(token.int % 10**30 + 10**30)}
    if kind == "B":
        return {"B": b"ddbtx-probe-" + token.bytes}
    return {"S": f"ddbtx-probe-{token.hex}"}


def request_id(table: str, key: Item) -> str:
    """A stable id for "this item in this table", one for every spelling of its key."""
    canonical = {name: canonical_key_value(value) for name, value in key.items()}
    text = json.dumps([table, _canonical(canonical)], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def is_locked_by(item: Item | None, tx_id: str) -> bool:
    lock = (item or {}).get(schema.ATTR_LOCK, {}).get("S")
    return isinstance(lock, str) and lock.startswith(tx_id + "/")


def lock_owner(item: Item | None) -> str | None:
    """The transaction id in an item's lock attribute, or None when unlocked."""
    lock = (item or {}).get(schema.ATTR_LOCK, {}).get("S")
    return lock.rsplit("/", 1)[0] if isinstance(lock, str) else None


#: Under the lock: the item's fence is the value the lock left...
FENCED = "{name} = {value}"
#: ...or there is none (a lock an older ddbtx took, which did not move one).
UNFENCED = "attribute_not_exists({name})"

#: A fence's random start, in bytes: a counter that begins anew (an insert, or an item a
#: plain put replaced) does not meet the values an old lock of the item left.
FENCE_START_BYTES = 6


def fence_of(item: Item | None) -> str | None:
    """The fence an item carries (a number, as text), or None."""
    value = (item or {}).get(schema.ATTR_FENCE, {}).get("N")
    return value if isinstance(value, str) else None


def new_fence_start() -> str:
    # token_hex, as nonces and ids are made: a seeded stand-in replays all of them
    return str(int(secrets.token_hex(FENCE_START_BYTES), 16))


def moved_fence(before: str | None, start: str) -> str:
    """The fence a lock leaves: one past the item's (``before``), or past ``start``."""
    return str(int(before if before is not None else start) + 1)


def fenced(
    condition: str,
    fence: str | None,
    names: dict[str, str],
    values: dict[str, Any],
    *,
    name: str = "#ddbtxf",
    value: str = ":ddbtxf",
) -> str:
    """``condition`` AND the item's fence is ``fence``: a write under a lock made only under
    the lock it was meant for, never under a late copy of that lock (docs/protocol.md)."""
    names[name] = schema.ATTR_FENCE
    if fence is None:
        return f"{condition} AND {UNFENCED.format(name=name)}"
    values[value] = {"N": fence}
    return f"{condition} AND {FENCED.format(name=name, value=value)}"


def held(item: Item | None, lock: str, fence: str | None) -> bool:
    """Whether ``lock`` holds the item under ``fence``: the lock as taken, not a late copy."""
    found = (item or {}).get(schema.ATTR_LOCK, {}).get("S")
    return found == lock and fence_of(item) == fence


def flag(item: Item | None, name: str) -> bool:
    return bool((item or {}).get(name, {}).get("BOOL", False))


def applied(item: Item | None) -> bool:
    """Whether a write of the holding transaction has changed the item."""
    return schema.ATTR_APPLIED in (item or {})


def write_marker(seq: int, op: str) -> dict[str, Any] | None:
    """The ``_tx:ap`` an item carries once its ``seq``-th write is applied: ``true`` after a
    first put or update, none after a first delete, the number itself from the second on."""
    if seq >= 2:
        return {"N": str(seq)}
    return {"BOOL": True} if op in ("put", "update") else None
