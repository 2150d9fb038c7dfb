"""Values too large for one row, compressed and cut into parts (``<sort key>#k``)."""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from .. import schema as s
from .items import MAX_ITEM_BYTES, Item, as_json, item_size

#: Raw bytes of one part: a row of it, its key and its TTL stay well under 400 KB.
PART_BYTES = 350_000
#: A value's row is split once it passes this size: 1 KB under the limit, as DynamoDB's
#: own sizing of a row can differ slightly from :func:`item_size`.
ROW_LIMIT = MAX_ITEM_BYTES - 1024


def fits(row: Item) -> bool:
    return item_size(row) <= ROW_LIMIT


def split(value: dict[str, Any]) -> list[bytes]:
    data = zlib.compress(json.dumps(as_json(value), separators=(",", ":")).encode(), 6)
    return [data[i : i + PART_BYTES] for i in range(0, max(len(data), 1), PART_BYTES)]


def join(parts: list[bytes]) -> dict[str, Any]:
    return from_json(json.loads(zlib.decompress(b"".join(parts))))


def rows(first: Item, key: Item, sort_name: str, value: dict[str, Any]) -> list[Item]:
    """The rows of ``value``: ``first`` with part 0 and the count, then the further parts."""
    parts = split(value)
    out = [{**first, s.ROW_PART: {"B": parts[0]}, s.ROW_PARTS: {"N": str(len(parts))}}]
    extra = {name: av for name, av in first.items() if name not in key}
    for part_key, part in zip(part_keys(key, sort_name, len(parts)), parts[1:], strict=True):
        out.append({**part_key, **extra, s.ROW_PART: {"B": part}})
    return out


def count(first_row: Item) -> int:
    return int(first_row[s.ROW_PARTS]["N"]) if s.ROW_PARTS in first_row else 1


def part_keys(key: Item, sort_name: str, parts: int) -> list[Item]:
    """Keys of the parts beyond the first row of a value spanning ``parts`` rows."""
    return [{**key, sort_name: {"S": f"{key[sort_name]['S']}#{k}"}} for k in range(1, parts)]


def from_json(value: dict[str, Any]) -> dict[str, Any]:
    ((kind, raw),) = value.items()
    if kind == "B":
        return {"B": base64.b64decode(raw)}
    if kind == "BS":
        return {"BS": [base64.b64decode(b) for b in raw]}
    if kind == "M":
        return {"M": {name: from_json(v) for name, v in raw.items()}}
    if kind == "L":
        return {"L": [from_json(v) for v in raw]}
    return value
