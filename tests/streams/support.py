"""The committed values each item went through, to check the adapter's changes against, and
Lambda's filter patterns applied as moto's EventBridge pattern matcher applies them."""

from __future__ import annotations

from typing import Any

from ddbtx.stream_reader import as_json
from ddbtx.streams import PROTOCOL_FILTER_PATTERNS, Change
from helpers import leftover, scan, unfenced

Value = dict[str, Any] | None


class Ledger:
    """The committed values of every item of a table, as a list per key: a snapshot of the
    table after each completed step (no transaction of it still holding a lock), recording a
    value whenever it differs from the item's last one (None: no item)."""

    def __init__(self, ddb: Any, table: str) -> None:
        self.ddb, self.table = ddb, table
        self.values: dict[str, list[Value]] = {}

    def snapshot(self) -> None:
        items = {item["pk"]["S"]: item for item in scan(self.ddb, self.table)}
        for item in items.values():
            assert not leftover(item), (
                f"a snapshot is taken only when every transaction has completed: {item['pk']}"
            )
        for pk in set(items) | set(self.values):
            history = self.values.setdefault(pk, [None])
            value = items.get(pk)
            value = None if value is None else unfenced(value)
            if value != history[-1]:
                history.append(value)


def replay(changes: list[Change]) -> tuple[dict[str, list[Value]], int]:
    """Each item's values as the changes take it from absent, checking that each change
    starts from the value the item had (where the change knows it).

    Returns the values per key and how many changes did not know their ``old``.
    """
    values: dict[str, list[Value]] = {}
    unknown = 0
    for change in changes:
        pk = change.key["pk"]["S"]
        history = values.setdefault(pk, [None])
        if change.old_known:
            assert change.old == history[-1], f"{pk}: {change} does not start from {history[-1]}"
        else:
            unknown += 1
        assert (change.kind == "INSERT") == (history[-1] is None), f"{pk}: {change.kind}"
        history.append(change.new)
    return values, unknown


def decoded(values: dict[str, list[Value]]) -> dict[str, list[Value]]:
    """Ledger values (boto3: binary as bytes) in the stream's JSON shape (base64)."""
    return {
        pk: [None if v is None else {k: as_json(a) for k, a in v.items()} for v in history]
        for pk, history in values.items()
    }


def passes_filters(record: dict[str, Any]) -> bool:
    """Whether Lambda would deliver ``record`` past :data:`PROTOCOL_FILTER_PATTERNS` (OR-ed),
    as moto's implementation of EventBridge's pattern matching (Lambda's syntax) decides."""
    from moto.events.models import EventPattern

    return any(
        EventPattern(None, pattern).matches_event(record) for pattern in PROTOCOL_FILTER_PATTERNS
    )
