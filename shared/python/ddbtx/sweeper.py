"""The janitor's sweep: complete or roll back abandoned transactions and clear what they left
(an index pass, then a scan pass, both resumable from a cursor row; docs/protocol.md)."""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Final

from . import schema as s
from ._base.drive import drive
from ._base.effects import Step, gather
from ._base.items import Item, flag
from ._coordinator.manager_steps import sweep
from ._janitors.scan import TASK_IMAGES, TASK_LOCKS, Headers, ScanPass
from ._janitors.state import (
    CURSOR_ID,
    CURSOR_SK,
    MAX_STUCK_IDS,
    PARTITIONS,
    Cursor,
    CursorStore,
    Deadline,
    Key,
    Progress,
    Run,
    Stop,
    SweepReport,
)
from ._janitors.survey import Survey
from .locks._rows import check_positive
from .manager import SweepOutcome, TransactionManager

__all__ = [
    "CURSOR_ID",
    "CURSOR_SK",
    "MAX_STUCK_IDS",
    "PARTITIONS",
    "TASK_IMAGES",
    "TASK_LOCKS",
    "ConfigError",
    "Cursor",
    "Deadline",
    "JanitorSettings",
    "Key",
    "Progress",
    "SweepReport",
    "Sweeper",
    "janitor_client",
]

logger = logging.getLogger(__name__)

#: The outcomes the report counts, each under its value's name.
_COUNTED: Final = {
    SweepOutcome.ROLLED_BACK,
    SweepOutcome.ROLLED_FORWARD,
    SweepOutcome.COMPLETED,
    SweepOutcome.DELETED,
}


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
        """Read and validate the janitors' environment variables (docs/operations.md).

        Raises
        ------
        ConfigError
            Naming the variable that is missing or malformed.
        """
        env = os.environ if environ is None else environ
        for name in ("TRANSACTIONS_TABLE", "IMAGES_TABLE"):
            if not env.get(name, "").strip():
                raise ConfigError(f"environment variable {name} is required (a table name)")
        return cls(
            transactions_table=env["TRANSACTIONS_TABLE"].strip(),
            images_table=env["IMAGES_TABLE"].strip(),
            locks_table=env.get("LOCKS_TABLE", "").strip() or None,
            data_tables=tuple(
                t.strip() for t in env.get("DATA_TABLES", "").split(",") if t.strip()
            ),
            rollback_after=timedelta(seconds=_env_int(env, "ROLLBACK_AFTER_SECONDS", 60, 0)),
            delete_after=timedelta(seconds=_env_int(env, "DELETE_AFTER_SECONDS", 86_400, 0)),
            page_budget=_env_int(env, "SWEEP_PAGE_BUDGET", 50, 1),
            page_size=_env_int(env, "SWEEP_PAGE_SIZE", 100, 1),
            safety_margin=_env_int(env, "SWEEP_SAFETY_MARGIN_SECONDS", 20, 0),
        )

    def manager(self, client: Any, **options: Any) -> TransactionManager:
        """A :class:`~ddbtx.TransactionManager` on these tables."""
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
        return Sweeper(manager, **{**settings, **options})


def _check_age(name: str, value: Any) -> timedelta:
    if not isinstance(value, timedelta) or value < timedelta(0):
        raise ValueError(f"{name} must be a timedelta >= 0, not {value!r}")
    return value


def _check_lock_grace(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"lock_grace must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"lock_grace must be finite and >= 0, not {value!r}")


class Sweeper:
    """Rolls abandoned transactions forward or back, completes them and clears their leftovers.

    Parameters
    ----------
    manager
        The :class:`~ddbtx.TransactionManager` whose tables, client and clock are swept.
    rollback_after
        A pending record unchanged for this long is rolled back.
    delete_after
        A completed record is deleted this long after it completed.
    decided_grace
        A decided record not completed this long after its decision is completed.
    locks_table
        The :mod:`ddbtx.locks` table whose expired rows are removed (None: skip).
    data_tables
        Tables scanned for locks whose TX record is gone or completed.
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
    >>> report.rolled_back, report.exhausted                                 # doctest: +SKIP
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
        _check_lock_grace(lock_grace)
        check_positive("page_size", page_size)
        if not isinstance(safety_margin, int | float) or safety_margin < 0:
            raise ValueError(f"safety_margin must be a number >= 0, not {safety_margin!r}")
        self.safety_margin = float(safety_margin)
        self.persist_cursor = persist_cursor
        self.cursors = CursorStore(manager.transactions_table)
        self.scans = ScanPass(
            manager, tuple(data_tables), locks_table, float(lock_grace), page_size, progress
        )
        self.survey = Survey(
            manager, self.scans, self.rollback_after, self.decided_grace, page_size
        )

    @property
    def client(self) -> Any:
        return self.tm.client

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
            Returns the seconds left; the sweep stops below ``safety_margin``. None: no deadline.
        page_budget
            Most scan pages to read in this run (None: no limit).
        resume
            Continue from the stored cursor (False: start both passes from the beginning).

        Returns
        -------
        SweepReport
        """
        return self.tm.protocol.run(self.pass_step(deadline, page_budget, resume=resume))

    def pass_step(
        self,
        deadline: Deadline | None = None,
        page_budget: int | None = None,
        *,
        resume: bool = True,
    ) -> Step[SweepReport]:
        """The step of :meth:`run`, for any driver (a bad ``page_budget`` raises at once)."""
        if page_budget is not None:
            check_positive("page_budget", page_budget)
        return self._pass(Run(deadline, self.safety_margin, page_budget), resume)

    def _pass(self, run: Run, resume: bool) -> Step[SweepReport]:
        skipped_before = self.tm.protocol.skipped_requests
        generation, cursor = (
            (yield from self.cursors.load()) if self.persist_cursor else (0, Cursor())
        )
        if not resume:
            cursor = Cursor()
        try:
            cursor = yield from self._index_pass(run, cursor)
            cursor = yield from self.scans.run(run, cursor)
            run.report.exhausted = True
        except Stop:
            cursor = run.stop_cursor
        report = run.report
        report.skipped_requests = self.tm.protocol.skipped_requests - skipped_before
        report.note_coverage(self.scans.not_covered())
        report.cursor = cursor.to_json()
        if self.persist_cursor:
            report.cursor_saved = yield from self.cursors.save(generation, cursor)
        logger.info(
            "sweep %s: %s",
            "covered everything" if not report.not_covered else "did not cover everything",
            {k: v for k, v in report.to_dict().items() if k not in ("stuck_ids",)},
        )
        return report

    def pending(self) -> list[dict[str, Any]]:
        """Every transaction whose record is not completed, oldest first, each as
        :func:`ddbtx.recovery.inspect` shows it plus ``plan``: what a sweep with these
        settings would do with it now, and ``acts``: whether that changes anything.
        Changes nothing.

        Examples
        --------
        >>> [(t["transaction_id"], t["plan"]) for t in sweeper.pending()]  # doctest: +SKIP
        [('0187f3c2a1b4c5d6-0a1b2c3d4e5f', 'roll back: pending, stale for 3540 s')]
        """
        return self.tm.protocol.run(self.pending_step())

    def pending_step(self) -> Step[list[dict[str, Any]]]:
        """The step of :meth:`pending`, for any driver."""
        return self.survey.pending()

    def dry_run(self) -> dict[str, Any]:
        """What a sweep with these settings would do now with the TX records; changes nothing.

        Returns ``transactions`` (:meth:`pending`: each record not completed, with its
        ``plan``), ``records_to_delete`` (completed records older than ``delete_after``)
        and ``not_looked_at`` (what a sweep also covers that a dry run does not read, and
        what this sweeper is not set up to cover).

        Examples
        --------
        >>> plan = sweeper.dry_run()                                        # doctest: +SKIP
        >>> [t["plan"] for t in plan["transactions"]], plan["records_to_delete"]  # doctest: +SKIP
        (['roll back: pending, stale for 3540 s'], 12)
        """
        return self.tm.protocol.run(self.dry_run_step())

    def dry_run_step(self) -> Step[dict[str, Any]]:
        """The step of :meth:`dry_run`, for any driver."""
        return self.survey.dry_run(self._cutoff_ms(s.STATE_COMPLETED_TAG))

    def run_full(self, deadline: Deadline | None = None, *, segments: int = 4) -> SweepReport:
        """Sweep every TX record by a parallel scan, then every scan task (cursor kept)."""
        step = self.full_step(deadline, segments=segments)
        # A pool of their own: on the manager's, their own gathers would queue behind them for ever.
        with ThreadPoolExecutor(segments, thread_name_prefix="ddbtx-sweep") as pool:
            driver, nested = threading.get_ident(), self.tm.protocol.parallel

            # The segments' gather on ``pool``; any gather a segment yields, by ``nested``.
            def parallel(run_one: Callable[[Step[Any]], Any], steps: list[Step[Any]]) -> list[Any]:
                if threading.get_ident() != driver:
                    return nested(run_one, steps)
                futures = [pool.submit(run_one, step) for step in steps]
                wait(futures)
                # Results, or the exceptions in their place: the driver raises the first, in order.
                return [f.result() if f.exception() is None else f.exception() for f in futures]

            return drive(step, self.client, self.tm.protocol.sleep, parallel)

    def full_step(
        self, deadline: Deadline | None = None, *, segments: int = 4
    ) -> Step[SweepReport]:
        """The step of :meth:`run_full`, for any driver (bad ``segments`` raise at once)."""
        check_positive("segments", segments)
        return self._full(Run(deadline, self.safety_margin, None), segments)

    def _full(self, run: Run, segments: int) -> Step[SweepReport]:
        skipped_before = self.tm.protocol.skipped_requests
        try:
            yield from gather(self._scan_segment(run, i, segments) for i in range(segments))
            yield from self.scans.run(run, Cursor())
            run.report.exhausted = True
        except Stop:
            pass
        run.report.skipped_requests = self.tm.protocol.skipped_requests - skipped_before
        run.report.note_coverage(self.scans.not_covered())
        return run.report

    def load_cursor(self) -> tuple[int, Cursor]:
        """The stored cursor and its generation (0 and the start when there is none)."""
        return self.tm.protocol.run(self.cursors.load())

    def save_cursor(self, generation: int, cursor: Cursor) -> bool:
        """Store ``cursor`` if the row is still at ``generation``; True when stored."""
        return self.tm.protocol.run(self.cursors.save(generation, cursor))

    def _cutoff_ms(self, tag: str) -> int:
        age = {
            s.STATE_PENDING: self.rollback_after,
            s.STATE_COMMITTED: self.decided_grace,
            s.STATE_ROLLED_BACK: self.decided_grace,
            s.STATE_COMPLETED_TAG: self.delete_after,
        }[tag]
        return self.tm.protocol.now_ms() - int(age.total_seconds() * 1000)

    def _index_pass(self, run: Run, cursor: Cursor) -> Step[Cursor]:
        for number in range(cursor.partition, len(PARTITIONS)):
            tag, shard = PARTITIONS[number]
            key = cursor.index_key if number == cursor.partition else None
            cutoff = self._cutoff_ms(tag)
            while True:
                run.stop_cursor = replace(cursor, partition=number, index_key=key)
                run.check_time()
                page = yield from self.survey.index_page(tag, shard, key, cutoff)
                for hit in page.get("Items", []):
                    run.stop_cursor = replace(cursor, partition=number, index_key=key)
                    run.check_time()
                    if hit[s.TX_SK]["S"] == s.TX_HEADER_SK:
                        # The index keeps ts (its range key): the age a rollback is conditioned on.
                        seen = int(hit[s.TX_UPDATED]["N"]) if tag == s.STATE_PENDING else None
                        yield from self._sweep_record(run, hit[s.TX_PK]["S"], stale_since=seen)
                    key = {n: hit[n] for n in (s.TX_SWEEP_KEY, s.TX_UPDATED, s.TX_PK, s.TX_SK)}
                self.scans.progress(f"index {tag}#{shard}", len(page.get("Items", [])))
                key = page.get("LastEvaluatedKey")
                if not key:
                    break
        return Cursor(task=cursor.task, scan_key=cursor.scan_key)

    def _sweep_record(self, run: Run, tx_id: str, *, stale_since: int | None) -> Step[None]:
        """``stale_since``: the ``ts`` of a pending record seen stale."""
        run.count("scanned")
        if stale_since is not None:
            run.count("stuck")
            with run.lock:
                # The count stays exact; the ids are for the log and are capped.
                if len(run.report.stuck_ids) < MAX_STUCK_IDS:
                    run.report.stuck_ids.append(tx_id)
        try:
            outcome = SweepOutcome.ACTIVE
            if stale_since is not None:
                # Rolled back unread, conditioned on the ts seen: it returns the record to undo.
                outcome = yield from self.tm.protocol.resolve(tx_id, expect_updated_ms=stale_since)
            if outcome is SweepOutcome.ACTIVE:  # not seen stale, or changed since: judge afresh
                protocol = self.tm.protocol
                outcome = yield from sweep(protocol, tx_id, self.rollback_after, self.delete_after)
        except Exception:
            # One bad record must not stop the sweep; it stays in the index for the next run.
            run.count("errors")
            logger.exception("sweeping transaction %s failed", tx_id)
            return
        if stale_since is not None:
            logger.warning("stuck transaction %s: %s", tx_id, outcome.value)
        if outcome in _COUNTED:
            run.count(outcome.value)

    def _scan_segment(self, run: Run, segment: int, total: int) -> Step[None]:
        rollback_cutoff = self._cutoff_ms(s.STATE_PENDING)
        delete_cutoff = self._cutoff_ms(s.STATE_COMPLETED_TAG)

        def visit(record: Item, header: Headers) -> Step[None]:
            updated = int(record[s.TX_UPDATED]["N"])
            completed = flag(record, s.TX_COMPLETED)
            pending = not completed and record[s.TX_STATE]["S"] == s.STATE_PENDING
            # Kept or active records are skipped; a decided one is completed whatever its age.
            cutoff = delete_cutoff if completed else rollback_cutoff if pending else None
            if cutoff is None or updated < cutoff:
                stale = updated if pending else None
                yield from self._sweep_record(run, record[s.TX_PK]["S"], stale_since=stale)

        yield from self.scans.each_page(
            run,
            self.tm.transactions_table,
            None,
            visit,
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
                "#fin": s.TX_COMPLETED,
            },
            ExpressionAttributeValues={":header": {"S": s.TX_HEADER_SK}},
        )


def janitor_client(max_attempts: int = 5) -> Any:
    """The janitors' boto3 DynamoDB client (standard retries; endpoint from the environment)."""
    import boto3

    from ._base.dynamo import client_config

    return boto3.client("dynamodb", config=client_config(max_attempts))
