"""The state of one sweep: its cursor (and the cursor row), its report and its budget."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from .. import schema as s
from .._base.effects import Step, request
from .._base.items import Item
from ..errors import ConditionFailed
from ..recovery import key_from_json, key_to_json

logger = logging.getLogger(__name__)

#: Key of the cursor row in the transactions table (its sk is never "#", so it is no TX record).
CURSOR_ID: Final = "#sweeper"
CURSOR_SK: Final = "cursor"
_CURSOR_JSON: Final = "cur"
_CURSOR_GEN: Final = "gen"
_CURSOR_BY: Final = "by"

#: The index pass visits these (state tag, shard) partitions, in this order.
PARTITIONS: Final = tuple(
    (tag, shard)
    for tag in (s.STATE_PENDING, s.STATE_COMMITTED, s.STATE_ROLLED_BACK, s.STATE_COMPLETED_TAG)
    for shard in range(s.SWEEP_SHARDS)
)
#: Most stuck transaction ids a report lists.
MAX_STUCK_IDS: Final = 100

Key = dict[str, Any]
Deadline = Callable[[], float]
Progress = Callable[[str, int], None]


@dataclass(frozen=True)
class Cursor:
    """Where the next sweep continues.

    Attributes
    ----------
    partition
        Index of the next partition of :data:`PARTITIONS` the index pass queries.
    index_key
        ``ExclusiveStartKey`` inside that partition (None: from its start).
    task
        Scan task the scan pass continues with (None: the first one).
    scan_key
        ``ExclusiveStartKey`` inside that task's table.
    """

    partition: int = 0
    index_key: Key | None = None
    task: str | None = None
    scan_key: Key | None = None

    def to_json(self) -> dict[str, Any]:
        """The cursor as plain JSON (what the handler returns and the cursor row stores)."""
        tag, shard = PARTITIONS[self.partition] if self.partition < len(PARTITIONS) else ("", 0)
        return {
            "partition": self.partition,
            "index": f"{tag}#{shard}" if tag else None,
            "index_key": key_to_json(self.index_key) if self.index_key else None,
            "task": self.task,
            "scan_key": key_to_json(self.scan_key) if self.scan_key else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Cursor:
        partition = data.get("partition", 0)
        if not isinstance(partition, int) or not 0 <= partition < len(PARTITIONS):
            partition = 0
        return cls(
            partition=partition,
            index_key=key_from_json(data["index_key"]) if data.get("index_key") else None,
            task=data.get("task"),
            scan_key=key_from_json(data["scan_key"]) if data.get("scan_key") else None,
        )


class CursorStore:
    """Every read and write of the cursor row."""

    def __init__(self, table: str) -> None:
        self.table = table
        self._key: Item = {s.TX_PK: {"S": CURSOR_ID}, s.TX_SK: {"S": CURSOR_SK}}

    def _row(self) -> Step[Item | None]:
        resp = yield from request("get_item", TableName=self.table, Key=self._key,
                                  ConsistentRead=True)  # fmt: skip
        row: Item | None = resp.get("Item")
        return row

    def load(self) -> Step[tuple[int, Cursor]]:
        row = yield from self._row()
        if not row:
            return 0, Cursor()
        try:
            cursor = Cursor.from_json(json.loads(row[_CURSOR_JSON]["S"]))
        except (KeyError, ValueError, TypeError, AttributeError):
            logger.warning("unreadable sweep cursor %r; starting from the beginning", row)
            cursor = Cursor()
        return int(row.get(_CURSOR_GEN, {"N": "0"})["N"]), cursor

    def save(self, generation: int, cursor: Cursor) -> Step[bool]:
        token = uuid.uuid4().hex
        try:
            yield from request(
                "update_item",
                TableName=self.table,
                Key=self._key,
                UpdateExpression="SET #cur = :cur, #gen = :next, #by = :by",
                # cursor: advance only from the generation this run started at, so a
                # sweeper that started earlier never moves a later one's cursor back.
                ConditionExpression="attribute_not_exists(#gen) OR #gen = :gen",
                ExpressionAttributeNames={
                    "#cur": _CURSOR_JSON,
                    "#gen": _CURSOR_GEN,
                    "#by": _CURSOR_BY,
                },
                ExpressionAttributeValues={
                    ":cur": {"S": json.dumps(cursor.to_json(), sort_keys=True)},
                    ":gen": {"N": str(generation)},
                    ":next": {"N": str(generation + 1)},
                    ":by": {"S": token},
                },
            )
            return True
        except ConditionFailed:
            # Our own write, its response lost, or a concurrent sweeper's: the token tells.
            row = yield from self._row()
            mine: bool = (row or {}).get(_CURSOR_BY, {}).get("S") == token
            if not mine:
                logger.info("a concurrent sweeper advanced the cursor; keeping its position")
            return mine


@dataclass
class SweepReport:
    """What one sweep did.

    Attributes
    ----------
    scanned
        Rows examined: index hits plus rows the scans read.
    rolled_back, rolled_forward, completed, deleted
        TX records moved along, by :class:`SweepOutcome`.
    orphan_images_deleted
        Image rows whose TX record was gone or completed.
    locks_released
        Data-table item locks whose TX record was gone or completed.
    lock_rows_deleted
        Expired mutex and queue rows of the locks table.
    errors
        Records or rows whose step failed (logged with their ids); retried next run.
    skipped_requests
        Recorded requests no call can apply (say, their table is gone): skipped and logged.
    stuck
        Pending records older than the rollback age (ids in ``stuck_ids``, capped).
    pages
        Scan pages read (what the page budget limits).
    exhausted
        True when the sweep reached the end of every pass: the cursor is back at the start.
    stopped_by
        ``"deadline"`` or ``"page_budget"`` when the sweep stopped early, else None.
    cursor
        Where the next run continues (JSON, see :class:`Cursor`).
    cursor_saved
        Whether this run's cursor was stored (False: a concurrent sweeper got further).
    not_covered
        What this sweep did not look at, one line each: the data tables or the locks table
        it was not given, and where it stopped early. Empty when it covered everything.
    """

    scanned: int = 0
    rolled_back: int = 0
    rolled_forward: int = 0
    completed: int = 0
    deleted: int = 0
    orphan_images_deleted: int = 0
    locks_released: int = 0
    lock_rows_deleted: int = 0
    errors: int = 0
    skipped_requests: int = 0
    stuck: int = 0
    pages: int = 0
    exhausted: bool = False
    stopped_by: str | None = None
    cursor: dict[str, Any] = field(default_factory=lambda: Cursor().to_json())
    cursor_saved: bool = False
    stuck_ids: list[str] = field(default_factory=list)
    not_covered: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return asdict(self)

    @property
    def left_something(self) -> bool:
        """Whether work may be left: an error, a stuck record, or a part not covered."""
        return bool(self.errors or self.stuck or self.not_covered)

    def note_coverage(self, gaps: list[str]) -> None:
        """Record what the sweep did not look at: ``gaps`` and where it stopped early."""
        self.not_covered = list(gaps)
        if not self.exhausted:
            self.not_covered.append(
                f"stopped by its {(self.stopped_by or 'end').replace('_', ' ')} before the end: "
                "the next run continues from the cursor"
            )


class Stop(Exception):
    """The deadline or the page budget is reached: the sweep stops at ``Run.stop_cursor``."""


class Run:
    def __init__(self, deadline: Deadline | None, margin: float, page_budget: int | None) -> None:
        self.report = SweepReport()
        self.deadline = deadline
        self.margin = margin
        self.page_budget = page_budget
        self.lock = threading.Lock()
        #: Where the next run continues if this one stops now.
        self.stop_cursor = Cursor()

    def count(self, name: str, amount: int = 1) -> None:
        with self.lock:
            setattr(self.report, name, getattr(self.report, name) + amount)

    def check_time(self) -> None:
        if self.deadline is not None and self.deadline() < self.margin:
            self.report.stopped_by = "deadline"
            raise Stop

    def check_page(self) -> None:
        self.check_time()
        if self.page_budget is not None and self.report.pages >= self.page_budget:
            self.report.stopped_by = "page_budget"
            raise Stop
