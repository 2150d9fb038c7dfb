"""``ddbtx sweep``'s live display: one line per pass, the library's logs, the report's table."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..sweeper import PARTITIONS


class SweepProgress:
    """The sweeper's page callbacks as one line per pass (a scan shows rows read so far)."""

    def __init__(self, progress: Any, full_scan_table: str | None) -> None:
        self._progress = progress
        self._full_scan_table = full_scan_table
        self._tasks: dict[str, Any] = {}
        self._seen_partitions: set[str] = set()
        self._hits = 0
        self._rows: dict[str, int] = {}

    def _task(self, name: str, total: int | None) -> Any:
        if name not in self._tasks:
            # A pass that starts means the ones before it are over: show them full.
            for task in self._progress.tasks:
                self._progress.update(task.id, total=task.total or 1, completed=task.total or 1)
            self._tasks[name] = self._progress.add_task(name, total=total)
        return self._tasks[name]

    def __call__(self, name: str, rows: int) -> None:
        if name.startswith("index "):
            self._seen_partitions.add(name)
            self._hits += rows
            self._progress.update(
                self._task("index pass", len(PARTITIONS)),
                completed=len(self._seen_partitions),
                description=f"index pass: {len(self._seen_partitions)} of {len(PARTITIONS)}"
                f" partitions, {self._hits} due record(s)",
            )
            return
        label = "full scan" if name == self._full_scan_table else "scan pass"
        self._rows[label] = self._rows.get(label, 0) + rows
        task = self._task(label, None)
        self._progress.update(
            task, description=f"{label}: {name}, {self._rows[label]} row(s) read so far"
        )


@contextmanager
def library_logs(verbose: bool) -> Iterator[None]:
    """ddbtx's log records on stderr while a command runs: errors, or with ``verbose`` info too."""
    log = logging.getLogger("ddbtx")
    saved = (list(log.handlers), log.propagate, log.level)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("ddbtx: %(levelname)s: %(message)s"))
    log.handlers, log.propagate = [handler], False
    log.setLevel(logging.INFO if verbose else logging.ERROR)
    try:
        yield
    finally:
        log.handlers, log.propagate = saved[0], saved[1]
        log.setLevel(saved[2])


#: Counters of a sweep report, in the order they are shown.
REPORT_ROWS = (
    ("scanned", "rows examined"),
    ("stuck", "stuck (pending past the rollback age)"),
    ("rolled_back", "rolled back"),
    ("rolled_forward", "rolled forward"),
    ("completed", "completed (decided elsewhere)"),
    ("deleted", "TX records deleted"),
    ("orphan_images_deleted", "orphan images deleted"),
    ("locks_released", "stray item locks released (record gone or completed)"),
    ("lock_rows_deleted", "expired lock rows deleted"),
    ("errors", "errors"),
)


def report_table(report: dict[str, Any], title: str) -> Any:
    """A sweep report (``SweepReport.to_dict()``) as a rich table."""
    from rich.table import Column, Table

    table = Table("what", Column("count", justify="right"), title=title, show_header=False)
    for name, label in REPORT_ROWS:
        table.add_row(label, str(report[name]))
    table.add_row("covered everything", "no" if report["not_covered"] else "yes")
    for gap in report["not_covered"]:
        table.add_row(f"  not covered: {gap}", "")
    return table


#: Seconds the CLI waits for a connection (botocore's default is 60, per attempt).
CONNECT_TIMEOUT = 3.0


def say_retries(client: Any, endpoint: str) -> None:
    """A line on stderr each time ``client`` retries a call it could not connect for, so an
    unreachable endpoint is never a silent wait."""
    from botocore.exceptions import ConnectionError as BotoConnectionError

    # botocore's own total (a configured max_attempts of 5 makes 6 attempts in all).
    attempts = int(client.meta.config.retries.get("total_max_attempts", 1))

    def notice(**event: Any) -> None:
        made = int(event.get("attempts") or 0)
        if isinstance(event.get("caught_exception"), BotoConnectionError) and made < attempts:
            print(
                f"ddbtx: cannot connect to {endpoint} yet (attempt {made} of {attempts}); retrying",
                file=sys.stderr,
                flush=True,
            )

    # First, and answering None: botocore's own retry handler still decides.
    client.meta.events.register_first("needs-retry.dynamodb", notice)
