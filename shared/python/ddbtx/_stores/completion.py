"""Completion: the steps every coordinator and janitor shares: complete, undo, resolve, delete
(docs/protocol.md). A lock whose nonce the record does not name is a *stray*, always undone."""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import timedelta
from typing import Any, TypeVar

from .. import schema as s
from .._base import parts as _parts
from .._base.drive import drive
from .._base.dynamo import endpoint_of, serves_transactions, without_transactions
from .._base.effects import Step, gather, pause, query_all, request
from .._base.items import (
    Item,
    applied,
    fence_of,
    fenced,
    flag,
    is_locked_by,
    item_size,
    request_id,
    strip,
    write_marker,
)
from ..errors import ConditionFailed, TableNotFound, Throttled, ValidationFailed
from . import record as _record
from .alias import AliasStore
from .finish import HELD, Finish, Unlock, release_request
from .record import Entry, Header, RecordStore, new_lock_value, new_tx_id, params_from_av, shard_of

#: Saved images outlive any transaction that needs them; TTL only collects orphans.
IMAGE_TTL = timedelta(days=7)
#: UpdateExpression shapes kept as known valid (``Completion.valid_updates``).
VALID_UPDATES_KEPT = 4096

__all__ = [
    "Completion",
    "Entry",
    "Header",
    "SweepOutcome",
    "new_tx_id",
    "params_from_av",
    "shard_of",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class SweepOutcome(enum.Enum):
    """What resolving one TX record did: one vocabulary for coordinators and janitors."""

    MISSING = "missing"
    ACTIVE = "active"  #: pending and recently changed (or changed since seen): left alone
    ROLLED_BACK = "rolled_back"  #: pending: decided rolled back and completed
    ROLLED_FORWARD = "rolled_forward"  #: committed but not completed: completed
    COMPLETED = "completed"  #: rolled back but not completed: completed
    KEPT = "kept"  #: completed, younger than the delete age
    DELETED = "deleted"


class Completion:
    """Stateless protocol steps bound to one client, table pair and clock."""

    def __init__(
        self,
        client: Any,
        transactions_table: str,
        images_table: str,
        *,
        clock: Callable[[], float],
        max_workers: int,
        completed_ttl_seconds: int,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.images_table = images_table
        self.clock = clock
        self.sleep = sleep
        self.max_workers = max_workers
        self.records = RecordStore(
            transactions_table, clock=clock, completed_ttl_seconds=completed_ttl_seconds
        )
        self.finishing = Finish(
            self.records,
            self.read_item,
            known=lambda: serves_transactions(client),
            lacking=lambda: without_transactions(endpoint_of(client)),
        )
        self.aliases = AliasStore(
            transactions_table, clock=clock, ttl_seconds=completed_ttl_seconds
        )
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        #: Recorded requests no call can ever read or apply (a janitor's metric).
        self.skipped_requests = 0
        #: Per table: did the last put of a transaction insert or replace? (lock's first guess)
        self.put_paths: dict[str, str] = {}
        #: Shapes of UpdateExpressions DynamoDB took (``requests.update_shape``): a false
        #: condition needs no question about them (``ItemWrites.condition_false``)
        self.valid_updates: set[Hashable] = set()

    def valid_update(self, shape: Hashable) -> None:
        """DynamoDB took an UpdateExpression of this shape (kept for the most recent few
        thousand shapes: an application has few)."""
        if len(self.valid_updates) >= VALID_UPDATES_KEPT:
            self.valid_updates.clear()
        self.valid_updates.add(shape)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def parallel(self, fn: Callable[[Any], T], items: Iterable[Any]) -> list[T]:
        """Run per-item steps on a bounded pool; every step ends before an error is raised."""
        work = list(items)
        if self.max_workers <= 1 or len(work) <= 1:
            return [fn(w) for w in work]
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.max_workers, thread_name_prefix="ddbtx")
        futures = [self._pool.submit(fn, w) for w in work]
        wait(futures)
        return [future.result() for future in futures]

    def run(self, step: Step[T]) -> T:
        return drive(step, self.client, self.sleep, self.parallel)

    def write_batches(self, table: str, rows: list[dict[str, Any]]) -> Step[None]:
        """Put or delete rows no one else writes, in batches sent together (no conditions)."""
        chunks = [rows[i : i + BATCH_ROWS] for i in range(0, len(rows), BATCH_ROWS)]
        yield from gather(self._batch_chunk(table, chunk) for chunk in chunks)

    def _batch_chunk(self, table: str, chunk: list[dict[str, Any]]) -> Step[None]:
        pending: dict[str, Any] = {table: chunk}
        for attempt in range(BATCH_ATTEMPTS):
            resp = yield from request("batch_write_item", RequestItems=pending)
            pending = resp.get("UnprocessedItems") or {}
            if not pending:
                return
            yield from pause(min(0.05 * 2**attempt, 2.0))
        raise Throttled(
            f"{len(pending.get(table, []))} rows stayed unprocessed after {BATCH_ATTEMPTS} batches",
            code="UnprocessedItems",
            operation="BatchWriteItem",
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def read_item(self, table: str, key: Item) -> Step[Item | None]:
        return (yield from _record.read_row(table, key))

    def release(
        self,
        table: str,
        key: Item,
        lock_value: str,
        *,
        delete: bool,
        applied: bool | None,
        fence: str | None,
    ) -> Step[None]:
        """Unlock an item whose write stands (commit), or delete it (transient or delete)."""
        operation, params = release_request(
            table, key, lock_value, delete=delete, applied=applied, fence=fence
        )
        yield from request(operation, **params)

    def image_of(self, tx_id: str, rid: str, item: Item) -> Step[Item | None]:
        """The pre-write image of an applied item, from the item or the images table."""
        if s.ATTR_IMAGE in item:
            image: Item = item[s.ATTR_IMAGE]["M"]
            return image
        if flag(item, s.ATTR_IMAGE_EXTERNAL):
            return (yield from self.read_image(tx_id, rid))
        return None

    def image_key(self, tx_id: str, rid: str) -> Item:
        return {s.IMAGE_PK: {"S": tx_id}, s.IMAGE_SK: {"S": rid}}

    def image_rows(self, tx_id: str, rid: str, image: Item) -> list[Item]:
        """The images table row(s) of a saved image: one, or several near 400 KB."""
        key = self.image_key(tx_id, rid)
        expires = int(self.clock() + IMAGE_TTL.total_seconds())
        first = {**key, s.IMAGE_TTL: {"N": str(expires)}}
        row = {**first, s.IMAGE_ITEM: {"M": image}}
        return [row] if _parts.fits(row) else _parts.rows(first, key, s.IMAGE_SK, {"M": image})

    def read_image(self, tx_id: str, rid: str, row: Item | None = None) -> Step[Item | None]:
        """A saved image from the images table (None: not there); ``row``: its first row."""
        key = self.image_key(tx_id, rid)
        row = row or (yield from self.get_image_row(key))
        if row is None:
            return None
        if s.IMAGE_ITEM in row:
            image: Item = row[s.IMAGE_ITEM]["M"]
            return image
        # None while being deleted: its transaction is completed
        joined = yield from _record.read_parts(self.images_table, key, s.IMAGE_SK, row)
        return None if joined is None else joined["M"]

    def get_image_row(self, key: Item) -> Step[Item | None]:
        return (yield from self.read_item(self.images_table, key))

    def undo(
        self, tx_id: str, table: str, key: Item, item: Item | None, *, only: str | None = None
    ) -> Step[None]:
        """Roll one item back and unlock it (``only``: just that stray lock); safe concurrently."""
        for _ in range(8):
            if item is None:
                item = yield from self.read_item(table, key)
            if not is_locked_by(item, tx_id):
                return
            assert item is not None
            lock_value = item[s.ATTR_LOCK]["S"]
            if only is not None and lock_value != only:
                return
            fence = fence_of(item)
            try:
                if flag(item, s.ATTR_TRANSIENT):
                    yield from self.release(
                        table, key, lock_value, delete=True, applied=None, fence=fence
                    )
                elif applied(item):
                    image = yield from self.image_of(tx_id, request_id(table, key), item)
                    if image is None:
                        logger.error("applied item without image tx=%s table=%s", tx_id, table)
                        return
                    yield from self._restore(table, image, item[s.ATTR_LOCK], fence)
                else:
                    yield from self.release(
                        table, key, lock_value, delete=False, applied=False, fence=fence
                    )
                return
            except ConditionFailed:
                item = None
        raise RuntimeError(f"undo of tx {tx_id} in {table} did not converge")

    def _restore(self, table: str, image: Item, lock: Item, fence: str | None) -> Step[None]:
        """undo: the saved image back over the applied item, under the same lock; the fence
        stays on the item."""
        names = {"#l": s.ATTR_LOCK}
        values: dict[str, Any] = {":l": lock}
        restored = {**image, s.ATTR_FENCE: {"N": fence}} if fence is not None else image
        yield from request(
            "put_item",
            TableName=table,
            Item=restored,
            ConditionExpression=fenced(HELD, fence, names, values, name="#f", value=":f"),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    def complete_item(
        self, header: Header, entry: Entry, known: Item | None = None
    ) -> Step[Unlock | None]:
        """complete: one recorded request; ``known`` (saves a read) only with the recorded
        lock. An item the transaction inserted is not unlocked here: its :class:`Unlock` is
        returned, to be sent with the record's completion (:mod:`ddbtx._stores.finish`)."""
        tx_id = header.tx_id
        lock_value = new_lock_value(tx_id, entry.nonce)
        if header.state == s.STATE_ROLLED_BACK:
            yield from self.undo(tx_id, entry.table, entry.key, known)
            return None
        item = known if known is None or known.get(s.ATTR_LOCK, {}).get("S") == lock_value else None
        for _ in range(8):
            if item is None:
                item = yield from self.read_item(entry.table, entry.key)
            if not is_locked_by(item, tx_id):
                return None
            assert item is not None
            if item[s.ATTR_LOCK]["S"] != lock_value:
                # A stray lock from a paused or superseded coordinator: never kept.
                yield from self.undo(
                    tx_id, entry.table, entry.key, item, only=item[s.ATTR_LOCK]["S"]
                )
                item = None
                continue
            deleting = entry.op == "delete" or (flag(item, s.ATTR_TRANSIENT) and entry.op == "get")
            needs_write = entry.op in ("put", "update")
            # A rewrite (seq >= 2) is applied once the item carries its number.
            done = (
                applied(item)
                if entry.seq == 1
                else item.get(s.ATTR_APPLIED) == write_marker(entry.seq, entry.op)
            )
            if needs_write and not done:
                logger.error(
                    "committed tx %s has an unapplied write on %s; undoing it", tx_id, entry.table
                )
                yield from self.undo(tx_id, entry.table, entry.key, item, only=lock_value)
                return None
            if flag(item, s.ATTR_TRANSIENT) and not deleting:
                fence = fence_of(item)
                return Unlock(entry.table, entry.key, lock_value, fence, grown(item, entry))
            try:
                yield from self.release(
                    entry.table,
                    entry.key,
                    lock_value,
                    delete=deleting,
                    applied=True if needs_write else None,
                    fence=fence_of(item),
                )
                return None
            except ConditionFailed:
                item = None
        raise RuntimeError(f"completion of tx {tx_id} in {entry.table} did not converge")

    def _complete_or_skip(
        self, header: Header, entry: Entry, known: Item | None
    ) -> Step[Unlock | bool]:
        """:meth:`complete_item` (True, or the unlock it leaves to the record's completion),
        or False for an item DynamoDB rejects (it holds no lock)."""
        try:
            unlock = yield from self.complete_item(header, entry, known)
            return True if unlock is None else unlock
        except (ValidationFailed, TableNotFound) as exc:
            with self._pool_lock:
                self.skipped_requests += 1
            logger.error(
                "skipped request %s of %s: it can never be read or applied (%s)",
                entry.rid,
                header.tx_id,
                exc,
            )
            return False

    def delete_images(self, tx_id: str) -> Step[None]:
        """Remove every external image of a transaction (after its items are settled)."""
        keys = yield from query_all(
            TableName=self.images_table,
            KeyConditionExpression="#id = :id",
            ProjectionExpression="#id, #rid",
            ExpressionAttributeNames={"#id": s.IMAGE_PK, "#rid": s.IMAGE_SK},
            ExpressionAttributeValues={":id": {"S": tx_id}},
            ConsistentRead=True,
        )
        # First rows before further parts (``rid#k``): a first row found has all its parts.
        for part in (False, True):
            for key in keys:
                if ("#" in key[s.IMAGE_SK]["S"]) == part:
                    yield from request("delete_item", TableName=self.images_table, Key=key)

    def complete(
        self,
        header: Header,
        known: dict[str, Item] | None = None,
        *,
        external_images: bool | None = None,
    ) -> Step[int]:
        """complete: every item, then the record; how many were skipped."""
        if header.completed:
            return 0
        known = known or {}
        done = yield from gather(
            self._complete_or_skip(header, e, known.get(e.rid)) for e in header.entries.values()
        )
        if external_images is not False:
            yield from self.delete_images(header.tx_id)
        unlocks = [u for u in done if isinstance(u, Unlock)]
        yield from self.finishing.finish(header, unlocks)
        return sum(1 for u in done if u is False)

    def resolve(
        self,
        tx_id: str,
        header: Header | None = None,
        *,
        expect_version: int | None = None,
        expect_updated_ms: int | None = None,
        by: str | None = None,
    ) -> Step[SweepOutcome]:
        """Roll back (``expect_*``: else ``ACTIVE``) and complete a pending record, or a decided."""
        rolled_back_here = False
        if header is None or header.state == s.STATE_PENDING:
            header = yield from self.records.decide(
                tx_id,
                s.STATE_ROLLED_BACK,
                expect_version=expect_version,
                expect_updated_ms=expect_updated_ms,
                by=by,
            )
            if header is None:
                return SweepOutcome.MISSING
            if header.state == s.STATE_PENDING:
                return SweepOutcome.ACTIVE
            rolled_back_here = header.state == s.STATE_ROLLED_BACK and not header.completed
        yield from self.complete(header)
        if header.state == s.STATE_COMMITTED:
            return SweepOutcome.ROLLED_FORWARD
        return SweepOutcome.ROLLED_BACK if rolled_back_here else SweepOutcome.COMPLETED

    def delete_record(self, header: Header) -> Step[None]:
        """delete: a completed TX record and its body rows, its alias first (never orphaned)."""
        if header.caller_id is not None:
            yield from self.aliases.forget(header.caller_id, header.tx_id)
        yield from self.records.delete(header, self.write_batches)


def grown(item: Item, entry: Entry) -> int:
    """An estimate of an inserted item's size (what a coordinator knows of it may hold only
    its key and lock): the request's values counted twice, as an update may use each twice."""
    params = entry.params or {}
    values = params.get("ExpressionAttributeValues") or {}
    return item_size(item) + item_size(params.get("Item") or {}) + 2 * item_size(values)


#: Rows per ``BatchWriteItem`` (DynamoDB's limit).
BATCH_ROWS = 25
#: Times a batch's unprocessed rows are resent before giving up.
BATCH_ATTEMPTS = 8


def user_view(item: Item | None) -> Item:
    """What an UNCOMMITTED reader sees: pending deletes and bare lock holders read as absent."""
    if not item or flag(item, s.ATTR_DELETED):
        return {}
    return {} if flag(item, s.ATTR_TRANSIENT) and not applied(item) else strip(item)
