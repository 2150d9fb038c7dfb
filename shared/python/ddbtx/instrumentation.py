"""Exact DynamoDB request counting through botocore's event system.

Examples
--------
>>> with count_requests(client) as counts:   # doctest: +SKIP
...     tx.commit()
>>> counts.writes, counts.reads              # doctest: +SKIP
(5, 0)
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: Operations that read (everything else DynamoDB bills as a write or control call).
READ_OPERATIONS = frozenset(
    {"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems", "DescribeTable"}
)
WRITE_OPERATIONS = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
)


class RequestCounts:
    """Requests seen on one client, by operation name (one per API call, retries apart)."""

    def __init__(self) -> None:
        self.by_operation: Counter[str] = Counter()
        self.attempts = 0
        self._lock = threading.Lock()

    def _on_call(self, model: Any, **_: Any) -> None:
        with self._lock:
            self.by_operation[model.name] += 1

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

    def reset(self) -> None:
        with self._lock:
            self.by_operation.clear()
            self.attempts = 0


@contextmanager
def count_requests(client: Any) -> Iterator[RequestCounts]:
    """Count every DynamoDB request ``client`` makes inside the block."""
    counts = RequestCounts()
    events = client.meta.events
    events.register("before-call.dynamodb", counts._on_call)
    events.register("before-send.dynamodb", counts._on_send)
    try:
        yield counts
    finally:
        events.unregister("before-call.dynamodb", counts._on_call)
        events.unregister("before-send.dynamodb", counts._on_send)
