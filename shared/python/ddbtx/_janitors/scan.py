"""The sweep's scan pass: orphaned images, stray item locks, expired lock rows."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from .. import schema as s
from .._base import parts as _parts
from .._base.effects import Step, request
from .._base.items import Item, is_locked_by, key_of, lock_owner, request_id
from .._stores.completion import Header
from ..manager import TransactionManager
from ..tables import lock_index_status
from .state import Cursor, Key, Progress, Run

logger = logging.getLogger(__name__)

TASK_IMAGES: Final = "images"
TASK_LOCKS: Final = "locks"
DATA_PREFIX: Final = "data:"

Here = Callable[[Key | None], None]
Headers = Callable[[str], Step[Header | None]]
Visit = Callable[[Item, Headers], Step[None]]


@dataclass
class ScanPass:
    """Pages through the images table, the data tables' lock indexes and the locks table."""

    tm: TransactionManager
    data_tables: tuple[str, ...]
    locks_table: str | None
    lock_grace: float
    page_size: int
    on_progress: Progress | None

    def not_covered(self) -> list[str]:
        """What no run of this pass looks at, as set up (each a line for an operator)."""
        gaps = []
        if not self.data_tables:
            gaps.append("no data tables given: stray item locks were not looked for")
        if self.locks_table is None:
            gaps.append("no locks table given: expired lock rows were not looked for")
        return gaps

    def run(self, run: Run, cursor: Cursor) -> Step[Cursor]:
        data = tuple(DATA_PREFIX + t for t in self.data_tables)
        tasks = (TASK_IMAGES, *data, *((TASK_LOCKS,) if self.locks_table else ()))
        first = tasks.index(cursor.task) if cursor.task in tasks else 0
        for number in range(first, len(tasks)):
            task = tasks[number]
            key = cursor.scan_key if number == first and cursor.task == task else None

            def here(key: Key | None, task: str = task) -> None:
                # The index pass starts afresh next run; the scan continues here.
                run.stop_cursor = Cursor(task=task, scan_key=key)

            here(key)
            if task == TASK_LOCKS:
                yield from self._sweep_lock_rows(run, key, here)
            elif task == TASK_IMAGES:
                yield from self._sweep_images(run, key, here)
            else:
                yield from self._sweep_data(run, task[len(DATA_PREFIX) :], key, here)
        return Cursor()

    def each_page(
        self,
        run: Run,
        table: str,
        key: Key | None,
        visit: Visit,
        *,
        here: Here | None = None,
        budgeted: bool = True,
        consistent: bool = True,
        **params: Any,
    ) -> Step[None]:
        """Scan from ``key``, ``visit``-ing each row with a per-page cache of headers."""
        seen: dict[str, Header | None] = {}

        def header(tx_id: str) -> Step[Header | None]:
            if tx_id not in seen:
                seen[tx_id] = yield from self.tm.protocol.records.read_header(tx_id)
            return seen[tx_id]

        while True:
            if budgeted:
                run.check_page()
            else:
                run.check_time()
            start: dict[str, Any] = {"ExclusiveStartKey": key} if key else {}
            page = yield from request(
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
            seen.clear()
            for row in page.get("Items", []):
                run.check_time()
                yield from visit(row, header)
            if here is not None:
                here(key)
            self.progress(table, page.get("ScannedCount", 0))
            if not key:
                return

    def _sweep_images(self, run: Run, key: Key | None, here: Here) -> Step[None]:
        def visit(row: Item, header: Headers) -> Step[None]:
            tx_id, rid = row[s.IMAGE_PK]["S"], row[s.IMAGE_SK]["S"]
            found = yield from header(tx_id)
            if found is None or found.completed:
                try:
                    yield from self._delete_orphan_image(run, tx_id, rid)
                except Exception:
                    run.count("errors")
                    logger.exception("removing image %s/%s failed", tx_id, rid)
            here({s.IMAGE_PK: row[s.IMAGE_PK], s.IMAGE_SK: row[s.IMAGE_SK]})

        yield from self.each_page(
            run,
            self.tm.images_table,
            key,
            visit,
            here=here,
            ProjectionExpression="#id, #rid",
            ExpressionAttributeNames={"#id": s.IMAGE_PK, "#rid": s.IMAGE_SK},
        )

    def _delete_orphan_image(self, run: Run, tx_id: str, rid: str) -> Step[None]:
        """Undo locks depending on the image, then delete its first row, then its parts."""
        protocol = self.tm.protocol
        key = protocol.image_key(tx_id, rid)
        base, _, part = rid.partition("#")
        if (
            part
            and (yield from protocol.get_image_row(protocol.image_key(tx_id, base))) is not None
        ):
            return  # deleted with its first row, after that row's lock is undone
        if self.data_tables and not part:
            first = yield from protocol.get_image_row(key)
            if first is None:
                return  # removed concurrently
            # None: parts missing, so its writer died before any item could name it.
            saved = yield from protocol.read_image(tx_id, rid, first)
            if saved is not None:
                yield from self._undo_image_owner(run, tx_id, rid, saved)
        resp = yield from request("delete_item", TableName=self.tm.images_table, Key=key,
                                  ReturnValues="ALL_OLD")  # fmt: skip
        for part_key in _parts.part_keys(key, s.IMAGE_SK, _parts.count(resp.get("Attributes", {}))):
            yield from request("delete_item", TableName=self.tm.images_table, Key=part_key)
        run.count("orphan_images_deleted")

    def _undo_image_owner(self, run: Run, tx_id: str, rid: str, saved: Item) -> Step[None]:
        """Undo the lock of the item this image saved, if in a data table (its rid says which)."""
        for table in self.data_tables:
            names = tuple((yield from self.tm.schemas.types(table)))
            if not all(n in saved for n in names):
                continue
            item_key = key_of(saved, names)
            if request_id(table, item_key) != rid:
                continue
            item = yield from self.tm.protocol.read_item(table, item_key)
            if is_locked_by(item, tx_id):
                yield from self.tm.protocol.undo(tx_id, table, item_key, item)
                run.count("locks_released")
            return

    def _sweep_data(self, run: Run, table: str, key: Key | None, here: Here) -> Step[None]:
        """Release locks whose TX record is gone or completed (lock index, else a scan)."""
        described = yield from request("describe_table", TableName=table)
        status = lock_index_status(described["Table"])
        indexed = status == "ACTIVE"
        if not indexed:
            logger.warning(
                "data table %s: %s, so the stray-lock pass scans the whole table "
                "(page-budgeted); add the index with `ddbtx add-lock-index %s`",
                table,
                f"no index {s.LOCK_INDEX!r}"
                if status is None
                else f"index {s.LOCK_INDEX} {status}",
                table,
            )
        if key is not None and (s.ATTR_LOCK in key) != indexed:
            key = None  # a cursor of the other kind: the index came or went since
        names = tuple((yield from self.tm.schemas.types(table)))

        def visit(row: Item, header: Headers) -> Step[None]:
            owner = lock_owner(row) or ""
            item_key = key_of(row, names)
            found = yield from header(owner)
            # A lock outlives its record (or outlives its completion) only when stray.
            if found is None or found.completed:
                if not indexed:
                    yield from self._release(run, owner, table, item_key, row)
                else:
                    item = yield from self.tm.protocol.read_item(table, item_key)
                    if item is not None and is_locked_by(item, owner):
                        yield from self._release(run, owner, table, item_key, item)
            here({**item_key, s.ATTR_LOCK: row[s.ATTR_LOCK]} if indexed else item_key)

        params: dict[str, Any] = (
            {"consistent": False, "IndexName": s.LOCK_INDEX}
            if indexed
            else {
                "FilterExpression": "attribute_exists(#l)",
                "ExpressionAttributeNames": {"#l": s.ATTR_LOCK},
            }
        )
        yield from self.each_page(run, table, key, visit, here=here, **params)

    def _release(self, run: Run, owner: str, table: str, item_key: Key, item: Item) -> Step[None]:
        try:
            yield from self.tm.protocol.undo(owner, table, item_key, item)
            run.count("locks_released")
        except Exception:
            run.count("errors")
            logger.exception("releasing %s's lock in %s failed", owner, table)

    def _sweep_lock_rows(self, run: Run, key: Key | None, here: Here) -> Step[None]:
        from ..locks.admin import expired_page

        assert self.locks_table is not None
        while True:
            here(key)
            run.check_page()
            page = yield from expired_page(
                self.locks_table,
                now=self.tm.clock(),
                grace=self.lock_grace,
                start_key=key,
                page_size=self.page_size,
            )
            run.count("pages")
            run.count("scanned", page.scanned)
            run.count("lock_rows_deleted", page.deleted)
            self.progress(self.locks_table, page.scanned)
            key = page.next_key
            if key is None:
                return

    def progress(self, task: str, rows: int) -> None:
        if self.on_progress is not None:
            self.on_progress(task, rows)
