"""The janitor's sweep: finish or roll back abandoned transactions and clear what they left.

One :meth:`Sweeper.run` does two passes:

*index pass*
    Queries the sparse index ``schema.SWEEP_INDEX`` per state and shard for
    exactly the records that need work (pending ones older than the rollback
    age, decided but unfinished ones older than a short grace, finished ones
    older than the delete age) and moves each along with
    :meth:`TransactionManager.sweep`. A stale pending record is rolled back
    by a decision conditioned on the age the index showed, which returns the
    record, so it is not read first: the pass reads the index entry and the
    items to undo, nothing else. Its cost is proportional to the stuck work,
    not to the size of the transactions table.
*scan pass*
    Pages through the images table (orphaned images), every data table's
    sparse lock index ``schema.LOCK_INDEX`` (locks whose TX record is gone or
    finished; only locked items are in it, so this reads the locked items, not
    the table) and the locks table (expired mutex and queue rows TTL has not
    removed yet). A data table without an active lock index is scanned whole
    instead, with a warning naming the command that adds the index. Only this
    pass spends the page budget.

Both passes stop before a deadline and record where they stopped in a cursor
row of the transactions table (``id="#sweeper"``, ``sk="cursor"``), written
with a conditional ``UpdateItem`` so that a concurrent sweeper never moves it
back. The next run continues from there, so tables of any size are covered
across runs. Every step is a conditional write that is safe to repeat, so
duplicate or concurrent sweeps are harmless.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from typing import Any, Final

from . import _parts
from . import schema as s
from ._dynamo import call
from ._items import Item, flag, is_locked_by, key_of, lock_owner, request_id
from ._protocol import Header
from .errors import ConditionFailed
from .recovery import key_from_json, key_to_json
from .tables import lock_index_status
from .transaction import SweepOutcome, TransactionManager

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
    for tag in (s.STATE_PENDING, s.STATE_COMMITTED, s.STATE_ROLLED_BACK, s.STATE_FINISHED_TAG)
    for shard in range(s.SWEEP_SHARDS)
)
#: Most stuck transaction ids a report lists.
MAX_STUCK_IDS: Final = 100
TASK_IMAGES: Final = "images"
TASK_LOCKS: Final = "locks"
_DATA_PREFIX: Final = "data:"

#: What each :class:`SweepOutcome` adds to in the report.
_OUTCOME_COUNTER: Final = {
    SweepOutcome.ROLLED_BACK: "rolled_back",
    SweepOutcome.ROLLED_FORWARD: "rolled_forward",
    SweepOutcome.FINALISED: "finalised",
    SweepOutcome.DELETED: "deleted",
}

Key = dict[str, Any]
Deadline = Callable[[], float]
Progress = Callable[[str, int], None]


# --- cursor -------------------------------------------------------------------


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
        Scan task the scan pass continues with (``"images"``, ``"data:<table>"``
        or ``"locks"``; None: the first one).
    scan_key
        ``ExclusiveStartKey`` inside that task's table.
    """

    partition: int = 0
    index_key: Key | None = None
    task: str | None = None
    scan_key: Key | None = None

    @property
    def at_start(self) -> bool:
        return self == Cursor()

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


# --- report -------------------------------------------------------------------


@dataclass
class SweepReport:
    """What one sweep did.

    Attributes
    ----------
    scanned
        Rows examined: index hits plus rows the scans read.
    rolled_back, rolled_forward, finalised, deleted
        TX records moved along, by :class:`SweepOutcome`.
    orphan_images_deleted
        Image rows whose TX record was gone or finished.
    locks_released
        Data-table item locks whose TX record was gone or finished.
    lock_rows_deleted
        Expired mutex and queue rows of the locks table.
    errors
        Records or rows whose step failed (logged with their ids); retried next run.
    skipped_requests
        Recorded requests no call can ever read or apply (say, their table was
        deleted): skipped so their records could complete; each is logged.
    stuck
        Pending records found older than the rollback age (the first
        :data:`MAX_STUCK_IDS` ids in ``stuck_ids``).
    pages
        Scan pages read (what the page budget limits).
    complete
        True when the sweep reached the end of every pass: the cursor is back at the start.
    stopped_by
        ``"deadline"`` or ``"page_budget"`` when the sweep stopped early, else None.
    cursor
        Where the next run continues (JSON, see :class:`Cursor`).
    cursor_saved
        Whether this run's cursor was stored (False: a concurrent sweeper got further).
    """

    scanned: int = 0
    rolled_back: int = 0
    rolled_forward: int = 0
    finalised: int = 0
    deleted: int = 0
    orphan_images_deleted: int = 0
    locks_released: int = 0
    lock_rows_deleted: int = 0
    errors: int = 0
    skipped_requests: int = 0
    stuck: int = 0
    pages: int = 0
    complete: bool = False
    stopped_by: str | None = None
    cursor: dict[str, Any] = field(default_factory=lambda: Cursor().to_json())
    cursor_saved: bool = False
    stuck_ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return asdict(self)


# --- configuration --------------------------------------------------------------


class ConfigError(ValueError):
    """A janitor environment variable is missing or malformed; the message names it."""


def _env_int(environ: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(
            f"environment variable {name} must be a whole number >= {minimum}, not {raw!r}"
        ) from exc
    if value < minimum:
        raise ConfigError(f"environment variable {name} must be >= {minimum}, not {value}")
    return value


@dataclass(frozen=True)
class JanitorSettings:
    """The janitors' configuration, as the CDK app passes it in environment variables.

    Examples
    --------
    >>> JanitorSettings.from_env({"TRANSACTIONS_TABLE": "Tx", "IMAGES_TABLE": "Img"}).page_budget
    50
    """

    transactions_table: str
    images_table: str
    locks_table: str | None = None
    data_tables: tuple[str, ...] = ()
    rollback_after: timedelta = timedelta(seconds=60)
    delete_after: timedelta = timedelta(days=1)
    page_budget: int = 50
    page_size: int = 100
    safety_margin: float = 20.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> JanitorSettings:
        """Read and validate ``TRANSACTIONS_TABLE``, ``IMAGES_TABLE``, ``LOCKS_TABLE``,
        ``DATA_TABLES`` (comma-separated), ``ROLLBACK_AFTER_SECONDS``,
        ``DELETE_AFTER_SECONDS``, ``SWEEP_PAGE_BUDGET``, and the optional
        ``SWEEP_PAGE_SIZE`` (default 100) and ``SWEEP_SAFETY_MARGIN_SECONDS`` (default 20).

        Raises
        ------
        ConfigError
            Naming the variable that is missing or malformed.
        """
        env = os.environ if environ is None else environ
        required = {}
        for name in ("TRANSACTIONS_TABLE", "IMAGES_TABLE"):
            value = env.get(name, "").strip()
            if not value:
                raise ConfigError(f"environment variable {name} is required (a table name)")
            required[name] = value
        data_tables = tuple(t.strip() for t in env.get("DATA_TABLES", "").split(",") if t.strip())
        return cls(
            transactions_table=required["TRANSACTIONS_TABLE"],
            images_table=required["IMAGES_TABLE"],
            locks_table=env.get("LOCKS_TABLE", "").strip() or None,
            data_tables=data_tables,
            rollback_after=timedelta(seconds=_env_int(env, "ROLLBACK_AFTER_SECONDS", 60, 0)),
            delete_after=timedelta(seconds=_env_int(env, "DELETE_AFTER_SECONDS", 86_400, 0)),
            page_budget=_env_int(env, "SWEEP_PAGE_BUDGET", 50, 1),
            page_size=_env_int(env, "SWEEP_PAGE_SIZE", 100, 1),
            safety_margin=_env_int(env, "SWEEP_SAFETY_MARGIN_SECONDS", 20, 0),
        )

    def manager(self, client: Any, **options: Any) -> TransactionManager:
        """A :class:`TransactionManager` on these tables."""
        return TransactionManager(client, self.transactions_table, self.images_table, **options)

    def sweeper(self, manager: TransactionManager, **options: Any) -> Sweeper:
        """A :class:`Sweeper` with these ages, tables and page budget."""
        settings: dict[str, Any] = {
            "rollback_after": self.rollback_after,
            "delete_after": self.delete_after,
            "locks_table": self.locks_table,
            "data_tables": self.data_tables,
            "page_size": self.page_size,
            "safety_margin": self.safety_margin,
        }
        settings.update(options)
        return Sweeper(manager, **settings)


# --- the sweeper ------------------------------------------------------------------


class _Stop(Exception):
    """Internal: the deadline or the page budget is reached."""


def _check_age(name: str, value: Any) -> timedelta:
    if not isinstance(value, timedelta) or value < timedelta(0):
        raise ValueError(f"{name} must be a timedelta >= 0, not {value!r}")
    return value


def _check_positive(name: str, value: Any, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, not {value!r}")


class _Run:
    """Mutable state of one sweep: report, budget and deadline checks."""

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
            raise _Stop

    def check_page(self) -> None:
        self.check_time()
        if self.page_budget is not None and self.report.pages >= self.page_budget:
            self.report.stopped_by = "page_budget"
            raise _Stop


class Sweeper:
    """Finds abandoned transactions and what they left behind, and settles them.

    Parameters
    ----------
    manager
        The :class:`TransactionManager` whose tables, client and clock are swept.
    rollback_after
        A pending record unchanged for this long is rolled back.
    delete_after
        A finished record is deleted this long after it finished.
    decided_grace
        A committed or rolled-back record still unfinished this long after its
        decision is completed by the sweeper (capped at ``rollback_after``): its
        own coordinator normally finishes it within moments.
    locks_table
        The :mod:`ddbtx.locks` table whose expired rows are removed (None: skip).
    data_tables
        Tables scanned for locks whose TX record is gone or finished.
    lock_grace
        Seconds past a lock row's TTL before the sweeper deletes it.
    page_size
        ``Limit`` of each query and scan page.
    safety_margin
        Stop when the deadline reports fewer seconds left than this.
    persist_cursor
        Load and store the cursor row (False: every run starts from the beginning).
    progress
        Called with (task name, rows) after every page, e.g. for a progress bar.

    Examples
    --------
    >>> sweeper = Sweeper(tm, rollback_after=timedelta(minutes=1),  # doctest: +SKIP
    ...                   delete_after=timedelta(days=1), data_tables=["Accounts"])
    >>> report = sweeper.run(deadline=lambda: ctx.get_remaining_time_in_millis() / 1000,
    ...                      page_budget=50)                                 # doctest: +SKIP
    >>> report.rolled_back, report.complete                                 # doctest: +SKIP
    (2, True)
    """

    def __init__(
        self,
        manager: TransactionManager,
        *,
        rollback_after: timedelta,
        delete_after: timedelta,
        decided_grace: timedelta = timedelta(seconds=30),
        locks_table: str | None = None,
        data_tables: Sequence[str] = (),
        lock_grace: float = 3600.0,
        page_size: int = 100,
        safety_margin: float = 10.0,
        persist_cursor: bool = True,
        progress: Progress | None = None,
    ) -> None:
        self.tm = manager
        self.rollback_after = _check_age("rollback_after", rollback_after)
        self.delete_after = _check_age("delete_after", delete_after)
        self.decided_grace = min(_check_age("decided_grace", decided_grace), rollback_after)
        if isinstance(data_tables, str) or not all(isinstance(t, str) and t for t in data_tables):
            raise ValueError(f"data_tables must be a sequence of table names, not {data_tables!r}")
        if isinstance(lock_grace, bool) or not isinstance(lock_grace, int | float):
            raise ValueError(f"lock_grace must be a number of seconds, not {lock_grace!r}")
        if not math.isfinite(lock_grace) or lock_grace < 0:
            raise ValueError(f"lock_grace must be finite and >= 0, not {lock_grace!r}")
        _check_positive("page_size", page_size)
        if not isinstance(safety_margin, int | float) or safety_margin < 0:
            raise ValueError(f"safety_margin must be a number >= 0, not {safety_margin!r}")
        self.locks_table = locks_table
        self.data_tables = tuple(data_tables)
        self.lock_grace = float(lock_grace)
        self.page_size = page_size
        self.safety_margin = float(safety_margin)
        self.persist_cursor = persist_cursor
        self.progress = progress

    @property
    def client(self) -> Any:
        return self.tm.client

    @property
    def tasks(self) -> tuple[str, ...]:
        """The scan pass's tasks, in order."""
        data = tuple(_DATA_PREFIX + t for t in self.data_tables)
        return (TASK_IMAGES, *data, *((TASK_LOCKS,) if self.locks_table else ()))

    # -- entry points ------------------------------------------------------------

    def run(
        self,
        deadline: Deadline | None = None,
        page_budget: int | None = None,
        *,
        resume: bool = True,
    ) -> SweepReport:
        """Sweep until done, the deadline is near, or the scan pages run out.

        Parameters
        ----------
        deadline
            Returns the seconds left (e.g. ``lambda: ctx.get_remaining_time_in_millis() / 1000``);
            the sweep stops once fewer than ``safety_margin`` are left. None: no deadline.
        page_budget
            Most scan pages to read in this run (None: no limit).
        resume
            Continue from the stored cursor (False: start both passes from the beginning).

        Returns
        -------
        SweepReport
        """
        _check_positive("page_budget", page_budget, allow_none=True)
        run = _Run(deadline, self.safety_margin, page_budget)
        skipped_before = self.tm.protocol.skipped_requests
        generation, start = self.load_cursor() if self.persist_cursor else (0, Cursor())
        cursor = start if resume else Cursor()
        try:
            cursor = self._index_pass(run, cursor)
            cursor = self._scan_pass(run, cursor)
            run.report.complete = True
        except _Stop:
            cursor = run.stop_cursor
        report = run.report
        report.skipped_requests = self.tm.protocol.skipped_requests - skipped_before
        report.cursor = cursor.to_json()
        if self.persist_cursor:
            report.cursor_saved = self.save_cursor(generation, cursor)
        logger.info(
            "sweep %s: %s",
            "complete" if report.complete else f"stopped by {report.stopped_by}",
            {k: v for k, v in report.to_dict().items() if k not in ("stuck_ids",)},
        )
        return report

    def run_full(self, deadline: Deadline | None = None, *, segments: int = 4) -> SweepReport:
        """Sweep every TX record by a parallel scan of the transactions table, then every scan task.

        For recovery and ``ddbtx sweep --full``: costs a read of the whole table,
        ignores and keeps the stored cursor, and has no page budget. Records the
        scan shows need no work (pending and young, finished and not yet old
        enough to delete) are not read again; every other one is moved along.
        """
        _check_positive("segments", segments)
        run = _Run(deadline, self.safety_margin, None)
        skipped_before = self.tm.protocol.skipped_requests
        try:
            with ThreadPoolExecutor(segments, thread_name_prefix="ddbtx-sweep") as pool:
                futures = [
                    pool.submit(self._scan_segment, run, i, segments) for i in range(segments)
                ]
                for future in futures:
                    future.result()
            self._scan_pass(run, Cursor())
            run.report.complete = True
        except _Stop:
            pass
        run.report.skipped_requests = self.tm.protocol.skipped_requests - skipped_before
        run.report.cursor = Cursor().to_json()
        return run.report

    # -- cursor row --------------------------------------------------------------

    def _cursor_key(self) -> Item:
        return {s.TX_PK: {"S": CURSOR_ID}, s.TX_SK: {"S": CURSOR_SK}}

    def _cursor_row(self) -> Item | None:
        resp = call(
            self.client,
            "get_item",
            TableName=self.tm.transactions_table,
            Key=self._cursor_key(),
            ConsistentRead=True,
        )
        row: Item | None = resp.get("Item")
        return row

    def load_cursor(self) -> tuple[int, Cursor]:
        """The stored cursor and its generation (0 and the start when there is none)."""
        row = self._cursor_row()
        if not row:
            return 0, Cursor()
        try:
            cursor = Cursor.from_json(json.loads(row[_CURSOR_JSON]["S"]))
        except (KeyError, ValueError, TypeError, AttributeError):
            logger.warning("unreadable sweep cursor %r; starting from the beginning", row)
            cursor = Cursor()
        return int(row.get(_CURSOR_GEN, {"N": "0"})["N"]), cursor

    def save_cursor(self, generation: int, cursor: Cursor) -> bool:
        """Store ``cursor`` if the row is still at ``generation``; True when stored."""
        token = uuid.uuid4().hex
        try:
            call(
                self.client,
                "update_item",
                TableName=self.tm.transactions_table,
                Key=self._cursor_key(),
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
            # Our own write whose response was lost looks the same as a concurrent
            # sweeper's: the token in the row tells them apart.
            mine: bool = (self._cursor_row() or {}).get(_CURSOR_BY, {}).get("S") == token
            if not mine:
                logger.info("a concurrent sweeper advanced the cursor; keeping its position")
            return mine

    # -- index pass ----------------------------------------------------------------

    def _cutoff_ms(self, tag: str) -> int:
        age = {
            s.STATE_PENDING: self.rollback_after,
            s.STATE_COMMITTED: self.decided_grace,
            s.STATE_ROLLED_BACK: self.decided_grace,
            s.STATE_FINISHED_TAG: self.delete_after,
        }[tag]
        return self.tm.protocol.now_ms() - int(age.total_seconds() * 1000)

    def _index_pass(self, run: _Run, cursor: Cursor) -> Cursor:
        """Query each sweep-index partition for due records; returns the cursor after it."""
        for number in range(cursor.partition, len(PARTITIONS)):
            tag, shard = PARTITIONS[number]
            key = cursor.index_key if number == cursor.partition else None
            cutoff = self._cutoff_ms(tag)
            while True:
                run.stop_cursor = replace(cursor, partition=number, index_key=key)
                run.check_time()
                params: dict[str, Any] = {"ExclusiveStartKey": key} if key else {}
                page = call(
                    self.client,
                    "query",
                    TableName=self.tm.transactions_table,
                    IndexName=s.SWEEP_INDEX,
                    KeyConditionExpression="#sw = :sw AND #ts < :cutoff",
                    ExpressionAttributeNames={"#sw": s.TX_SWEEP_KEY, "#ts": s.TX_UPDATED},
                    ExpressionAttributeValues={
                        ":sw": {"S": f"{tag}#{shard}"},
                        ":cutoff": {"N": str(cutoff)},
                    },
                    Limit=self.page_size,
                    **params,
                )
                for hit in page.get("Items", []):
                    run.stop_cursor = replace(cursor, partition=number, index_key=key)
                    run.check_time()
                    if hit[s.TX_SK]["S"] == s.TX_HEADER_SK:
                        # The index keeps ts (its range key): the age a rollback is conditioned on.
                        seen = int(hit[s.TX_UPDATED]["N"]) if tag == s.STATE_PENDING else None
                        self._sweep_record(run, hit[s.TX_PK]["S"], stale_since=seen)
                    key = {n: hit[n] for n in (s.TX_SWEEP_KEY, s.TX_UPDATED, s.TX_PK, s.TX_SK)}
                self._progress(f"index {tag}#{shard}", len(page.get("Items", [])))
                key = page.get("LastEvaluatedKey")
                if not key:
                    break
        return Cursor(task=cursor.task, scan_key=cursor.scan_key)

    def _sweep_record(self, run: _Run, tx_id: str, *, stale_since: int | None) -> None:
        """Move one record along; ``stale_since`` is the ``ts`` of a pending record seen stale."""
        run.count("scanned")
        stuck = stale_since is not None
        if stuck:
            run.count("stuck")
            with run.lock:
                # The count stays exact; the ids are for the log and are capped.
                if len(run.report.stuck_ids) < MAX_STUCK_IDS:
                    run.report.stuck_ids.append(tx_id)
        try:
            if stale_since is None:
                outcome = self._sweep_general(tx_id)
            else:
                outcome = self._roll_back_stale(tx_id, stale_since)
        except Exception:
            # One bad record must not stop the sweep; it stays in the index for the next run.
            run.count("errors")
            logger.exception("sweeping transaction %s failed", tx_id)
            return
        if stuck:
            logger.warning("stuck transaction %s: %s", tx_id, outcome.value)
        counter = _OUTCOME_COUNTER.get(outcome)
        if counter:
            run.count(counter)

    def _sweep_general(self, tx_id: str) -> SweepOutcome:
        return self.tm.sweep(
            tx_id, rollback_after=self.rollback_after, delete_after=self.delete_after
        )

    def _roll_back_stale(self, tx_id: str, seen_ms: int) -> SweepOutcome:
        """Roll back a pending record seen unchanged since ``seen_ms`` (older than the rollback
        age), without reading it first.

        The decision is conditioned on the record's ``ts`` still being the one
        seen, and returns the record as decided, whose requests say what to
        undo. Whenever it does not apply (the record changed, or someone else
        settled it meanwhile), the general step decides from a fresh read.
        """
        outcome = self.tm.protocol.settle(tx_id, expect_updated_ms=seen_ms)
        if outcome is SweepOutcome.ACTIVE:
            return self._sweep_general(tx_id)  # it changed since it was seen: judge it afresh
        return outcome

    def _scan_segment(self, run: _Run, segment: int, total: int) -> None:
        rollback_cutoff = self._cutoff_ms(s.STATE_PENDING)
        delete_cutoff = self._cutoff_ms(s.STATE_FINISHED_TAG)
        for page in self._pages(
            run,
            self.tm.transactions_table,
            None,
            budgeted=False,
            Segment=segment,
            TotalSegments=total,
            FilterExpression="#sk = :header",
            ProjectionExpression="#id, #sk, #st, #ts, #fin",
            ExpressionAttributeNames={
                "#sk": s.TX_SK,
                "#id": s.TX_PK,
                "#st": s.TX_STATE,
                "#ts": s.TX_UPDATED,
                "#fin": s.TX_FINISHED,
            },
            ExpressionAttributeValues={":header": {"S": s.TX_HEADER_SK}},
        ):
            for record in page[0]:
                run.check_time()
                updated = int(record[s.TX_UPDATED]["N"])
                if flag(record, s.TX_FINISHED):
                    if updated >= delete_cutoff:
                        continue  # kept: reading it again would change nothing
                    self._sweep_record(run, record[s.TX_PK]["S"], stale_since=None)
                elif record[s.TX_STATE]["S"] == s.STATE_PENDING:
                    if updated >= rollback_cutoff:
                        continue  # active: reading it again would change nothing
                    self._sweep_record(run, record[s.TX_PK]["S"], stale_since=updated)
                else:
                    # Decided but unfinished: a full sweep finishes it whatever its age.
                    self._sweep_record(run, record[s.TX_PK]["S"], stale_since=None)

    # -- scan pass -----------------------------------------------------------------

    def _scan_pass(self, run: _Run, cursor: Cursor) -> Cursor:
        """Run the scan tasks from the cursor's; returns the start cursor when all finished."""
        tasks = self.tasks
        first = tasks.index(cursor.task) if cursor.task in tasks else 0
        for number in range(first, len(tasks)):
            task = tasks[number]
            key = cursor.scan_key if number == first and cursor.task == task else None

            def here(key: Key | None, task: str = task) -> None:
                # The index pass starts afresh next run; the scan continues here.
                run.stop_cursor = Cursor(task=task, scan_key=key)

            here(key)
            if task == TASK_LOCKS:
                self._sweep_lock_rows(run, key, here)
            elif task == TASK_IMAGES:
                self._sweep_images(run, key, here)
            else:
                self._sweep_data(run, task[len(_DATA_PREFIX) :], key, here)
        return Cursor()

    def _pages(
        self,
        run: _Run,
        table: str,
        key: Key | None,
        *,
        budgeted: bool = True,
        consistent: bool = True,
        **params: Any,
    ) -> Iterator[tuple[list[Item], Key | None]]:
        """Scan pages of ``table`` from ``key`` with the key after each page.

        Budgeted pages count against the page budget. ``consistent`` (default)
        reads strongly consistent pages; a global secondary index offers none.
        """
        while True:
            if budgeted:
                run.check_page()
            else:
                run.check_time()
            start = {"ExclusiveStartKey": key} if key else {}
            page = call(
                self.client,
                "scan",
                TableName=table,
                ConsistentRead=consistent,
                Limit=self.page_size,
                **params,
                **start,
            )
            if budgeted:
                run.count("pages")
            run.count("scanned", page.get("ScannedCount", 0))
            key = page.get("LastEvaluatedKey")
            yield page.get("Items", []), key
            self._progress(table, page.get("ScannedCount", 0))
            if not key:
                return

    def _headers(self) -> Callable[[str], Header | None]:
        """A per-page cache of TX record headers (several rows often share a transaction)."""
        seen: dict[str, Header | None] = {}

        def header(tx_id: str) -> Header | None:
            if tx_id not in seen:
                seen[tx_id] = self.tm.protocol.records.read_header(tx_id)
            return seen[tx_id]

        return header

    def _sweep_images(self, run: _Run, key: Key | None, here: Callable[[Key | None], None]) -> None:
        table = self.tm.images_table
        names = {"#id": s.IMAGE_PK, "#rid": s.IMAGE_SK}
        pages = self._pages(
            run, table, key, ProjectionExpression="#id, #rid", ExpressionAttributeNames=names
        )
        for page, after in pages:
            header = self._headers()
            for row in page:
                run.check_time()
                tx_id, rid = row[s.IMAGE_PK]["S"], row[s.IMAGE_SK]["S"]
                found = header(tx_id)
                if found is None or found.finished:
                    try:
                        self._delete_orphan_image(run, tx_id, rid)
                    except Exception:
                        run.count("errors")
                        logger.exception("removing image %s/%s failed", tx_id, rid)
                here({s.IMAGE_PK: row[s.IMAGE_PK], s.IMAGE_SK: row[s.IMAGE_SK]})
            here(after)

    def _delete_orphan_image(self, run: _Run, tx_id: str, rid: str) -> None:
        """Delete an image whose transaction is gone or finished, after undoing any lock
        that still depends on it (an image is the only copy of the item it saved).

        A near-400 KB image spans rows ``rid``, ``rid#1``, ...: its first row goes
        first, then its parts; a part whose first row still exists is left to it.
        """
        protocol = self.tm.protocol
        key = protocol.image_key(tx_id, rid)
        base, _, part = rid.partition("#")
        if part and protocol.get_image_row(protocol.image_key(tx_id, base)) is not None:
            return  # deleted with its first row, after that row's lock is undone
        if self.data_tables and not part:
            first = protocol.get_image_row(key)
            if first is None:
                return  # removed concurrently
            # None: parts missing, so its writer died before any item could name it.
            saved = protocol.read_image(tx_id, rid, first)
            if saved is not None:
                self._undo_image_owner(run, tx_id, rid, saved)
        resp = call(self.client, "delete_item", TableName=self.tm.images_table, Key=key,
                    ReturnValues="ALL_OLD")  # fmt: skip
        parts = _parts.count(resp.get("Attributes", {}))
        for part_key in _parts.part_keys(key, s.IMAGE_SK, parts):
            call(self.client, "delete_item", TableName=self.tm.images_table, Key=part_key)
        run.count("orphan_images_deleted")

    def _undo_image_owner(self, run: _Run, tx_id: str, rid: str, saved: Item) -> None:
        """Undo the lock of the item this image saved, if it is in a known data table.

        The image holds the item's key; the request id (a hash of table and key)
        says which table it came from.
        """
        for table in self.data_tables:
            names = self.tm.key_names(table)
            if not all(n in saved for n in names):
                continue
            item_key = key_of(saved, names)
            if request_id(table, item_key) != rid:
                continue
            item = self.tm.protocol.read_item(table, item_key)
            if is_locked_by(item, tx_id):
                self.tm.protocol.undo(tx_id, table, item_key, item)
                run.count("locks_released")
            return

    def _sweep_data(
        self, run: _Run, table: str, key: Key | None, here: Callable[[Key | None], None]
    ) -> None:
        """Release the locks in ``table`` whose TX record is gone or finished."""
        if self._lock_index_active(table):
            if key is not None and s.ATTR_LOCK not in key:
                key = None  # a table-scan cursor from before the index existed
            self._sweep_data_index(run, table, key, here)
        else:
            if key is not None and s.ATTR_LOCK in key:
                key = None  # an index cursor, and the index is gone
            self._sweep_data_scan(run, table, key, here)

    def _lock_index_active(self, table: str) -> bool:
        """Whether ``table``'s sparse lock index is there and built; logs the fallback."""
        status = lock_index_status(call(self.client, "describe_table", TableName=table)["Table"])
        if status == "ACTIVE":
            return True
        logger.warning(
            "data table %s: %s, so the stray-lock pass scans the whole table "
            "(page-budgeted); add the index with `ddbtx add-lock-index %s`",
            table,
            f"no index {s.LOCK_INDEX!r}" if status is None else f"index {s.LOCK_INDEX} {status}",
            table,
        )
        return False

    def _sweep_data_index(
        self, run: _Run, table: str, key: Key | None, here: Callable[[Key | None], None]
    ) -> None:
        """Stray locks from the sparse lock index: reads the locked items only.

        The index is eventually consistent and keys only, so an entry is a
        lead, not a fact: the item is read (consistently) and released only if
        the record of the transaction locking it now is gone or finished. A
        lock the index does not show yet is found by a later run.
        """
        names = self.tm.key_names(table)
        pages = self._pages(run, table, key, consistent=False, IndexName=s.LOCK_INDEX)
        for page, after in pages:
            header = self._headers()
            for entry in page:
                run.check_time()
                owner = lock_owner(entry) or ""
                found = header(owner)
                if found is None or found.finished:
                    item_key = key_of(entry, names)
                    item = self.tm.protocol.read_item(table, item_key)
                    if item is not None and is_locked_by(item, owner):
                        self._release(run, owner, table, item_key, item)
                here({**key_of(entry, names), s.ATTR_LOCK: entry[s.ATTR_LOCK]})
            here(after)

    def _sweep_data_scan(
        self, run: _Run, table: str, key: Key | None, here: Callable[[Key | None], None]
    ) -> None:
        """Stray locks by a scan of the whole table (a table without the lock index)."""
        names = self.tm.key_names(table)
        for page, after in self._pages(
            run,
            table,
            key,
            FilterExpression="attribute_exists(#l)",
            ExpressionAttributeNames={"#l": s.ATTR_LOCK},
        ):
            header = self._headers()
            for item in page:
                run.check_time()
                owner = lock_owner(item) or ""
                item_key = key_of(item, names)
                found = header(owner)
                # A lock outlives its record only when stray (records are deleted after
                # every recorded item settled); a finished record's lock is stray too.
                if found is None or found.finished:
                    self._release(run, owner, table, item_key, item)
                here(item_key)
            here(after)

    def _release(self, run: _Run, owner: str, table: str, item_key: Key, item: Item) -> None:
        """Undo a stray lock of ``owner`` on ``item``; a failure is counted and logged."""
        try:
            self.tm.protocol.undo(owner, table, item_key, item)
            run.count("locks_released")
        except Exception:
            run.count("errors")
            logger.exception("releasing %s's lock in %s failed", owner, table)

    def _sweep_lock_rows(
        self, run: _Run, key: Key | None, here: Callable[[Key | None], None]
    ) -> None:
        from .locks import sweep_expired_page

        assert self.locks_table is not None
        while True:
            here(key)
            run.check_page()
            page = sweep_expired_page(
                self.client,
                self.locks_table,
                now=self.tm.clock(),
                grace=self.lock_grace,
                start_key=key,
                page_size=self.page_size,
            )
            run.count("pages")
            run.count("scanned", page.scanned)
            run.count("lock_rows_deleted", page.deleted)
            self._progress(self.locks_table, page.scanned)
            key = page.next_key
            if key is None:
                return

    def _progress(self, task: str, rows: int) -> None:
        if self.progress is not None:
            self.progress(task, rows)


def janitor_client(max_attempts: int = 5) -> Any:
    """The boto3 DynamoDB client the janitors use (standard retries).

    boto3 reads region, credentials and ``AWS_ENDPOINT_URL_DYNAMODB`` from the
    environment, so the same code runs in Lambda and against a local emulator.
    """
    import boto3

    from ._dynamo import client_config

    return boto3.client("dynamodb", config=client_config(max_attempts))
