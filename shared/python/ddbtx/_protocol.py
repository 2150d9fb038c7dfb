"""Protocol steps shared by every coordinator: the seed's vocabulary, one function each.

A transaction's state lives in its TX record (the *header*, plus spilled request
rows) and in protocol attributes on the items it locks. Any process can run any
step for any transaction; every step is a conditional write that is safe to
repeat, and a failed condition is settled by reading, never by assuming.

Item lock attribute: ``"<tx id>/<nonce>"``. The nonce is chosen when a request
is *added* to the TX record and recorded there, so a lock (or write) whose nonce
the record does not name is a *stray* one, left by a coordinator that was
paused or crashed, and is always undone, never kept.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, TypeVar

from . import schema as s
from ._dynamo import call
from ._items import Item, flag, is_locked_by, request_id, strip
from .errors import ConditionFailed, Throttled, TransactionError

logger = logging.getLogger(__name__)

T = TypeVar("T")

PROTOCOL_ITEM_ATTRS = s.ITEM_ATTRIBUTES

_id_lock = threading.Lock()
_last_ns = 0


def new_tx_id(clock_ns: Callable[[], int] = time.time_ns, *, priority: str | None = None) -> str:
    """A transaction id that sorts by start time, strictly increasing within a process.

    Wound-wait compares ids: the smaller id is the older transaction. With
    ``priority`` (an earlier transaction's id) the new id keeps that one's start
    time, so a retry is as old as its first attempt; the random part keeps it unique.
    """
    global _last_ns
    if priority is not None:
        if not re.fullmatch(r"[0-9a-f]{16}(-[0-9a-f]+)?", priority):
            raise ValueError(f"priority must be a transaction id, not {priority!r:.40}")
        return f"{priority[:16]}-{secrets.token_hex(6)}"
    with _id_lock:
        now = max(clock_ns(), _last_ns + 1)
        _last_ns = now
    return f"{now:016x}-{secrets.token_hex(6)}"


def new_nonce() -> str:
    return secrets.token_hex(4)


def shard_of(tx_id: str) -> int:
    return int(tx_id[-4:], 16) % s.SWEEP_SHARDS


@dataclass
class Entry:
    """A request as recorded in the TX record."""

    rid: str
    op: str
    table: str
    key: Item
    nonce: str
    params: dict[str, Any] | None = None  # None when spilled to its own row
    spilled: bool = False


@dataclass
class Header:
    """The decoded TX record header."""

    tx_id: str
    state: str
    version: int
    updated_ms: int
    finished: bool
    entries: dict[str, Entry] = field(default_factory=dict)
    raw_size: int = 0
    waiting: bool = False  # its coordinator is blocked on an older transaction's lock


# --- (de)serialisation of requests into the TX record -------------------------


def params_to_av(params: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in params.items():
        if name in ("Item", "Key", "ExpressionAttributeValues"):
            out[name] = {"M": value}
        elif name == "ExpressionAttributeNames":
            out[name] = {"M": {k: {"S": v} for k, v in value.items()}}
        elif isinstance(value, bool):
            out[name] = {"BOOL": value}
        else:
            out[name] = {"S": str(value)}
    return {"M": out}


def params_from_av(value: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, av in value["M"].items():
        if name == "ExpressionAttributeNames":
            out[name] = {k: v["S"] for k, v in av["M"].items()}
        elif "M" in av:
            out[name] = av["M"]
        elif "BOOL" in av:
            out[name] = av["BOOL"]
        else:
            out[name] = av["S"]
    return out


def entry_to_av(entry: Entry) -> dict[str, Any]:
    m: dict[str, Any] = {
        "o": {"S": entry.op},
        "t": {"S": entry.table},
        "k": {"M": entry.key},
        "n": {"S": entry.nonce},
    }
    if entry.spilled or entry.params is None:
        m["x"] = {"BOOL": True}
    else:
        m["p"] = params_to_av(entry.params)
    return {"M": m}


def entry_from_av(rid: str, value: dict[str, Any]) -> Entry:
    m = value["M"]
    return Entry(
        rid=rid,
        op=m["o"]["S"],
        table=m["t"]["S"],
        key=m["k"]["M"],
        nonce=m["n"]["S"],
        params=params_from_av(m["p"]) if "p" in m else None,
        spilled="x" in m,
    )


def header_from_item(item: Item) -> Header:
    from ._items import item_size

    entries = {
        rid: entry_from_av(rid, av) for rid, av in item.get(s.TX_REQUESTS, {"M": {}})["M"].items()
    }
    return Header(
        tx_id=item[s.TX_PK]["S"],
        state=item[s.TX_STATE]["S"],
        version=int(item[s.TX_VERSION]["N"]),
        updated_ms=int(item[s.TX_UPDATED]["N"]),
        finished=flag(item, s.TX_FINISHED),
        entries=entries,
        raw_size=item_size(item),
        waiting=s.TX_WAITING in item,
    )


# --- the protocol engine ------------------------------------------------------


#: Rows per ``BatchWriteItem`` (DynamoDB's limit).
BATCH_ROWS = 25
#: Times a batch's unprocessed rows are resent before giving up.
BATCH_ATTEMPTS = 8


class Protocol:
    """Stateless protocol steps bound to one client, table pair and clock."""

    def __init__(
        self,
        client: Any,
        transactions_table: str,
        images_table: str,
        *,
        clock: Callable[[], float],
        max_workers: int,
        finished_ttl_seconds: int,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.tx_table = transactions_table
        self.images_table = images_table
        self.clock = clock
        self.sleep = sleep
        self.max_workers = max_workers
        self.finished_ttl_seconds = finished_ttl_seconds
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    # -- helpers ---------------------------------------------------------------

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def parallel(self, fn: Callable[[Any], T], items: Iterable[Any]) -> list[T]:
        """Run independent per-item steps concurrently with a bounded pool; results in order.

        Every step runs to its end before the first error is raised, so no
        step is left half-done behind the caller's back.
        """
        work = list(items)
        if self.max_workers <= 1 or len(work) <= 1:
            return [fn(w) for w in work]
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.max_workers, thread_name_prefix="ddbtx")
        futures = [self._pool.submit(fn, w) for w in work]
        wait(futures)
        return [future.result() for future in futures]

    def batch_write(self, table: str, rows: list[dict[str, Any]]) -> None:
        """Put or delete ``rows`` (``PutRequest``/``DeleteRequest``s) in batches sent together.

        Only for rows no one else writes (request bodies of one transaction):
        a batch has no conditions, and resending one is harmless.
        """
        chunks = [rows[i : i + BATCH_ROWS] for i in range(0, len(rows), BATCH_ROWS)]
        self.parallel(lambda chunk: self._batch_chunk(table, chunk), chunks)

    def _batch_chunk(self, table: str, chunk: list[dict[str, Any]]) -> None:
        pending: dict[str, Any] = {table: chunk}
        for attempt in range(BATCH_ATTEMPTS):
            resp = call(self.client, "batch_write_item", RequestItems=pending)
            pending = resp.get("UnprocessedItems") or {}
            if not pending:
                return
            # DynamoDB left rows out (throughput): back off before resending only those.
            self.sleep(min(0.05 * 2**attempt, 2.0))
        raise Throttled(
            f"{len(pending.get(table, []))} rows stayed unprocessed after {BATCH_ATTEMPTS} batches",
            code="UnprocessedItems",
            operation="BatchWriteItem",
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def header_key(self, tx_id: str) -> Item:
        return {s.TX_PK: {"S": tx_id}, s.TX_SK: {"S": s.TX_HEADER_SK}}

    def spill_key(self, tx_id: str, entry: Entry) -> Item:
        """Key of a request body kept in its own row.

        The nonce is part of it: two coordinators adding the same item to one
        transaction write different rows, so the loser cannot overwrite the
        body the record names.
        """
        return {s.TX_PK: {"S": tx_id}, s.TX_SK: {"S": f"r#{entry.rid}#{entry.nonce}"}}

    def read_header(self, tx_id: str) -> Header | None:
        resp = call(
            self.client,
            "get_item",
            TableName=self.tx_table,
            Key=self.header_key(tx_id),
            ConsistentRead=True,
        )
        return header_from_item(resp["Item"]) if "Item" in resp else None

    def read_item(self, table: str, key: Item) -> Item | None:
        resp = call(self.client, "get_item", TableName=table, Key=key, ConsistentRead=True)
        item: Item | None = resp.get("Item")
        return item

    def load_params(self, tx_id: str, entry: Entry) -> dict[str, Any]:
        """The full request of an entry, reading its spilled row when needed."""
        if entry.params is not None:
            return entry.params
        resp = call(
            self.client,
            "get_item",
            TableName=self.tx_table,
            Key=self.spill_key(tx_id, entry),
            ConsistentRead=True,
        )
        if "Item" not in resp:
            raise TransactionError(
                f"the body of request {entry.rid} is gone from the TX record", tx_id=tx_id
            )
        entry.params = params_from_av(resp["Item"]["p"])
        return entry.params

    # -- decide ----------------------------------------------------------------

    def decide(
        self,
        tx_id: str,
        to_state: str,
        *,
        expect_version: int | None = None,
        expect_updated_ms: int | None = None,
    ) -> Header | None:
        """Move a pending transaction to committed or rolled back; return the header after.

        Returns the header as read when the condition fails (so the caller sees
        who decided first), or None when the record is gone.

        ``expect_version`` decides only at that version; ``expect_updated_ms``
        only while the record's last change (``ts``) is still the one the caller
        saw, which lets a sweeper that found a stale record through the sweep
        index (keys only, no version) roll it back without reading it first.
        """
        names = {"#st": s.TX_STATE, "#v": s.TX_VERSION, "#ts": s.TX_UPDATED, "#sw": s.TX_SWEEP_KEY}
        values: dict[str, Any] = {
            ":p": {"S": s.STATE_PENDING},
            ":to": {"S": to_state},
            ":one": {"N": "1"},
            ":now": {"N": str(self.now_ms())},
            ":sw": {"S": f"{to_state}#{shard_of(tx_id)}"},
        }
        # decide: only a pending transaction can be decided, and (for commit) only
        # at the version whose requests the committer has seen applied.
        condition = "#st = :p"
        if expect_version is not None:
            condition += " AND #v = :v"
            values[":v"] = {"N": str(expect_version)}
        if expect_updated_ms is not None:
            # decide (sweep): roll back only a record unchanged since it was seen stale.
            condition += " AND #ts = :seen"
            values[":seen"] = {"N": str(expect_updated_ms)}
        try:
            resp = call(
                self.client,
                "update_item",
                TableName=self.tx_table,
                Key=self.header_key(tx_id),
                UpdateExpression="SET #st = :to, #v = #v + :one, #ts = :now, #sw = :sw",
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            )
            return header_from_item(resp["Attributes"])
        except ConditionFailed:
            return self.read_header(tx_id)

    # -- complete: per-item steps after the decision -----------------------------

    def release(
        self, table: str, key: Item, lock_value: str, *, delete: bool, applied: bool | None
    ) -> None:
        """Unlock an item whose write stands (commit), or delete it (transient/delete request)."""
        names = {"#l": s.ATTR_LOCK}
        values = {":l": {"S": lock_value}}
        if delete:
            # complete: delete the item only while this very lock still holds it.
            call(
                self.client,
                "delete_item",
                TableName=table,
                Key=key,
                ConditionExpression="#l = :l",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
            return
        removal = ", ".join(f"#r{i}" for i in range(len(PROTOCOL_ITEM_ATTRS)))
        names.update({f"#r{i}": a for i, a in enumerate(PROTOCOL_ITEM_ATTRS)})
        condition = "#l = :l"
        if applied is not None:
            names["#ap"] = s.ATTR_APPLIED
            # complete: an unlock must not drop a write it believes applied (or vice versa).
            condition += (
                " AND attribute_exists(#ap)" if applied else " AND attribute_not_exists(#ap)"
            )
        call(
            self.client,
            "update_item",
            TableName=table,
            Key=key,
            UpdateExpression=f"REMOVE {removal}",
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    def restore(self, table: str, item: Item, image: Item) -> None:
        """Put the saved image back over an applied item (roll back)."""
        call(
            self.client,
            "put_item",
            TableName=table,
            Item=image,
            # roll back: overwrite only while the lock that applied the write still holds.
            ConditionExpression="#l = :l",
            ExpressionAttributeNames={"#l": s.ATTR_LOCK},
            ExpressionAttributeValues={":l": item[s.ATTR_LOCK]},
        )

    def image_of(self, tx_id: str, rid: str, item: Item) -> Item | None:
        """The pre-write image of an applied item, from the item or the images table."""
        if s.ATTR_IMAGE in item:
            image: Item = item[s.ATTR_IMAGE]["M"]
            return image
        if flag(item, s.ATTR_IMAGE_EXTERNAL):
            resp = call(
                self.client,
                "get_item",
                TableName=self.images_table,
                Key={s.IMAGE_PK: {"S": tx_id}, s.IMAGE_SK: {"S": rid}},
                ConsistentRead=True,
            )
            saved = resp.get("Item")
            return saved[s.IMAGE_ITEM]["M"] if saved else None
        return None

    def undo(self, tx_id: str, table: str, key: Item, item: Item | None) -> None:
        """Roll one item back: restore its image, or delete it if it was inserted, then unlock.

        ``item`` is what the caller believes the item is (None: read it). Any
        failed condition re-reads and decides again, so concurrent undo is safe.
        """
        for _ in range(8):
            if item is None:
                item = self.read_item(table, key)
            if not is_locked_by(item, tx_id):
                return
            assert item is not None
            lock_value = item[s.ATTR_LOCK]["S"]
            try:
                if flag(item, s.ATTR_TRANSIENT):
                    self.release(table, key, lock_value, delete=True, applied=None)
                elif flag(item, s.ATTR_APPLIED):
                    image = self.image_of(tx_id, request_id(table, key), item)
                    if image is None:
                        logger.error("applied item without image tx=%s table=%s", tx_id, table)
                        return
                    self.restore(table, item, image)
                else:
                    self.release(table, key, lock_value, delete=False, applied=False)
                return
            except ConditionFailed:
                item = None
        raise RuntimeError(f"undo of tx {tx_id} in {table} did not settle")

    def complete_entry(self, header: Header, entry: Entry, known: Item | None = None) -> None:
        """Finish one recorded request of a decided transaction."""
        tx_id = header.tx_id
        lock_value = f"{tx_id}/{entry.nonce}"
        if header.state == s.STATE_ROLLED_BACK:
            self.undo(tx_id, entry.table, entry.key, known)
            return
        item = known
        for _ in range(8):
            if item is None:
                item = self.read_item(entry.table, entry.key)
            if not is_locked_by(item, tx_id):
                return
            assert item is not None
            if item[s.ATTR_LOCK]["S"] != lock_value:
                # A stray lock from a paused or superseded coordinator: never kept.
                self.undo(tx_id, entry.table, entry.key, item)
                return
            deleting = entry.op == "delete" or (flag(item, s.ATTR_TRANSIENT) and entry.op == "get")
            needs_write = entry.op in ("put", "update")
            if needs_write and not flag(item, s.ATTR_APPLIED):
                logger.error(
                    "committed tx %s has an unapplied write on %s; undoing it", tx_id, entry.table
                )
                self.undo(tx_id, entry.table, entry.key, item)
                return
            try:
                self.release(
                    entry.table,
                    entry.key,
                    lock_value,
                    delete=deleting,
                    applied=True if needs_write else None,
                )
                return
            except ConditionFailed:
                item = None
        raise RuntimeError(f"completion of tx {tx_id} in {entry.table} did not settle")

    def delete_images(self, tx_id: str) -> None:
        """Remove every external image of a transaction (after its items are settled)."""
        resp = call(
            self.client,
            "query",
            TableName=self.images_table,
            KeyConditionExpression="#id = :id",
            ExpressionAttributeNames={"#id": s.IMAGE_PK},
            ExpressionAttributeValues={":id": {"S": tx_id}},
            ConsistentRead=True,
        )
        for row in resp.get("Items", []):
            call(
                self.client,
                "delete_item",
                TableName=self.images_table,
                Key={s.IMAGE_PK: row[s.IMAGE_PK], s.IMAGE_SK: row[s.IMAGE_SK]},
            )

    def finalize(self, header: Header) -> None:
        """clean: mark a decided transaction finished (all items settled); TTL may delete it."""
        ttl = int(self.clock()) + self.finished_ttl_seconds
        # Failing means another coordinator already finished (or deleted) the record.
        with contextlib.suppress(ConditionFailed):
            call(
                self.client,
                "update_item",
                TableName=self.tx_table,
                Key=self.header_key(header.tx_id),
                UpdateExpression="SET #fin = :t, #sw = :sw, #ts = :now, #ttl = :ttl, "
                "#v = #v + :one",
                # clean: only a decided record is finished, and only once.
                ConditionExpression="#st = :st AND attribute_not_exists(#fin)",
                ExpressionAttributeNames={
                    "#fin": s.TX_FINISHED,
                    "#sw": s.TX_SWEEP_KEY,
                    "#ts": s.TX_UPDATED,
                    "#ttl": s.TX_TTL,
                    "#st": s.TX_STATE,
                    "#v": s.TX_VERSION,
                },
                ExpressionAttributeValues={
                    ":t": {"BOOL": True},
                    ":sw": {"S": f"{s.STATE_FINISHED_TAG}#{shard_of(header.tx_id)}"},
                    ":now": {"N": str(self.now_ms())},
                    ":ttl": {"N": str(ttl)},
                    ":st": {"S": header.state},
                    ":one": {"N": "1"},
                },
            )
        header.finished = True

    def finish(
        self,
        header: Header,
        known: dict[str, Item] | None = None,
        *,
        external_images: bool | None = None,
    ) -> None:
        """complete + clean: settle every item of a decided transaction, then mark it finished.

        ``known`` maps request ids to the coordinator's own view of each item
        (saving a read per item); ``external_images`` False skips the images query.
        """
        if header.finished:
            return
        known = known or {}
        self.parallel(
            lambda e: self.complete_entry(header, e, known.get(e.rid)), header.entries.values()
        )
        if external_images is not False:
            self.delete_images(header.tx_id)
        self.finalize(header)

    def delete_record(self, tx_id: str, header: Header) -> None:
        """delete: remove a finished TX record and its spilled request rows."""
        spilled = [entry for entry in header.entries.values() if entry.spilled]
        self.batch_write(
            self.tx_table, [{"DeleteRequest": {"Key": self.spill_key(tx_id, e)}} for e in spilled]
        )
        try:
            call(
                self.client,
                "delete_item",
                TableName=self.tx_table,
                Key=self.header_key(tx_id),
                # delete: never a record whose items may still be locked.
                ConditionExpression="#fin = :t",
                ExpressionAttributeNames={"#fin": s.TX_FINISHED},
                ExpressionAttributeValues={":t": {"BOOL": True}},
            )
        except ConditionFailed:
            if self.read_header(tx_id) is not None:
                raise

    def release_orphan(self, table: str, key: Item, item: Item) -> None:
        """Release a lock whose TX record is gone: the transaction can only have rolled back.

        Records are deleted only after every recorded item was settled, so a lock
        that outlives its record is stray (or forged) and is undone.
        """
        owner = item[s.ATTR_LOCK]["S"].rsplit("/", 1)[0]
        self.undo(owner, table, key, item)


def new_lock_value(tx_id: str, nonce: str) -> str:
    return f"{tx_id}/{nonce}"


def user_view(item: Item | None) -> Item:
    """What an UNCOMMITTED reader sees: pending deletes and bare lock holders read as absent."""
    if not item:
        return {}
    if flag(item, s.ATTR_DELETED):
        return {}
    if flag(item, s.ATTR_TRANSIENT) and not flag(item, s.ATTR_APPLIED):
        return {}
    return strip(item)
