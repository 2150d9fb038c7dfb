"""Exact DynamoDB request counting through botocore's events, with the items read as billed.

Examples
--------
>>> with count_requests(client) as counts:   # doctest: +SKIP
...     tx.commit()
>>> counts.writes, counts.reads              # doctest: +SKIP
(5, 0)
>>> counts.items_read                        # doctest: +SKIP
0
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

#: Operations that read (everything else DynamoDB bills as a write or control call).
READ_OPERATIONS = frozenset(
    {"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems", "DescribeTable"}
)
WRITE_OPERATIONS = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
)


def items_in(operation: str, parsed: Mapping[str, Any]) -> int:
    """Items a call of ``operation`` read, from its parsed response (0 for an error)."""
    if operation in ("Query", "Scan"):
        return int(parsed.get("ScannedCount", 0))
    if operation == "GetItem":
        return 1 if parsed.get("Item") is not None else 0
    if operation == "BatchGetItem":
        return sum(len(items) for items in parsed.get("Responses", {}).values())
    if operation == "TransactGetItems":
        return sum(1 for response in parsed.get("Responses", []) if response.get("Item"))
    return 0


class RequestCounts:
    """Requests seen on one client, by operation name (one per API call, retries apart),
    and the items they read.

    Attributes
    ----------
    by_operation
        Calls per operation name.
    attempts
        HTTP attempts (calls plus botocore's retries).
    items_read_by_operation
        Items read per operation name (see :func:`items_in`).
    """

    def __init__(self) -> None:
        self.by_operation: Counter[str] = Counter()
        self.items_read_by_operation: Counter[str] = Counter()
        self.attempts = 0
        self._lock = threading.Lock()

    def _on_call(self, model: Any, **_: Any) -> None:
        with self._lock:
            self.by_operation[model.name] += 1

    def _on_response(self, model: Any, parsed: Mapping[str, Any] | None = None, **_: Any) -> None:
        # after-call fires once per API call (retries apart); an error carries no items.
        read = items_in(model.name, parsed or {})
        if read:
            with self._lock:
                self.items_read_by_operation[model.name] += read

    def _on_send(self, **_: Any) -> None:
        with self._lock:
            self.attempts += 1

    @property
    def reads(self) -> int:
        return sum(n for op, n in self.by_operation.items() if op in READ_OPERATIONS)

    @property
    def writes(self) -> int:
        return sum(n for op, n in self.by_operation.items() if op in WRITE_OPERATIONS)

    @property
    def total(self) -> int:
        return sum(self.by_operation.values())

    @property
    def items_read(self) -> int:
        """Items read by every call so far."""
        return sum(self.items_read_by_operation.values())

    def reset(self) -> None:
        with self._lock:
            self.by_operation.clear()
            self.items_read_by_operation.clear()
            self.attempts = 0


@contextmanager
def count_requests(client: Any) -> Iterator[RequestCounts]:
    """Count every DynamoDB request ``client`` makes inside the block, and the items read."""
    counts = RequestCounts()
    events = client.meta.events
    events.register("before-call.dynamodb", counts._on_call)
    events.register("before-send.dynamodb", counts._on_send)
    events.register("after-call.dynamodb", counts._on_response)
    try:
        yield counts
    finally:
        events.unregister("before-call.dynamodb", counts._on_call)
        events.unregister("before-send.dynamodb", counts._on_send)
        events.unregister("after-call.dynamodb", counts._on_response)
