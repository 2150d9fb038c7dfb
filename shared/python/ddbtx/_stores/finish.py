"""complete (record): the record marked completed together with the unlocks of the items
its transaction inserted, so that no late copy of those unlocks can ever pass again.

Why together: an item a committed transaction inserted stays in the table, and its unlock
is the last write the transaction sends it. If a later transaction deletes the item, a
late copy of the locking insert re-creates it exactly as it was (an absent item has no
fence to move), and a late copy of the unlock after it would pass again and bring the
deleted item back. No condition on the item alone can tell the copies from the originals;
a condition on the record can. So the unlocks ride in the ``TransactWriteItems`` that marks
the record completed (more than fit in one go go first, each chunk checking the record is
still decided and not completed); a copy of any of them fails on the record, which is kept
completed for the janitors' ``delete_after`` (docs/protocol.md, "Fault model").

Where ``TransactWriteItems`` is not served (an emulator without it), the unlocks go one
by one before the record's mark, as they did before: the one window docs/protocol.md names.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import schema as s
from .._base.effects import Step, gather, pause, request
from .._base.items import Item, fenced, held
from ..errors import ConditionFailed, DynamoDBError, ValidationFailed
from .record import Header, RecordStore

logger = logging.getLogger(__name__)

#: complete/undo: only while this very lock still holds the item.
HELD = "#l = :l"
#: complete (commit): an unlock must not drop a write it believes applied...
RELEASE_APPLIED = "#l = :l AND attribute_exists(#ap)"
#: ...nor keep one it believes unapplied (roll back of a lock that never applied).
RELEASE_UNAPPLIED = "#l = :l AND attribute_not_exists(#ap)"

#: Unlocks per ``TransactWriteItems`` (DynamoDB takes 100 actions and 4 MB of items)...
UNLOCKS_PER_CALL = 24
#: ...and their items' estimated bytes, far under the 4 MB an item's growth could reach.
BYTES_PER_CALL = 1024 * 1024
#: Times one chunk is sent again after a conflict or a changed item.
CHUNK_ATTEMPTS = 8

ReadItem = Callable[[str, Item], Step[Item | None]]


@dataclass(frozen=True)
class Unlock:
    """The unlock of an item a committed transaction inserted, as its completion found it."""

    table: str
    key: Item
    lock: str
    fence: str | None
    size: int


def release_request(
    table: str,
    key: Item,
    lock_value: str,
    *,
    delete: bool,
    applied: bool | None,
    fence: str | None,
) -> tuple[str, dict[str, Any]]:
    """complete/undo: the unlock of an item whose write stands (commit), or its deletion
    (transient or delete), as (operation, parameters); ``fence``: the item's, as read under
    this lock (a late copy of the lock moved it on)."""
    names = {"#l": s.ATTR_LOCK}
    values: dict[str, Any] = {":l": {"S": lock_value}}
    condition = HELD
    update: dict[str, Any] = {}
    if not delete:
        removal = ", ".join(f"#r{i}" for i in range(len(s.ITEM_ATTRIBUTES)))
        names.update({f"#r{i}": a for i, a in enumerate(s.ITEM_ATTRIBUTES)})
        update = {"UpdateExpression": f"REMOVE {removal}"}
        if applied is not None:
            names["#ap"] = s.ATTR_APPLIED
            condition = RELEASE_APPLIED if applied else RELEASE_UNAPPLIED
    return "delete_item" if delete else "update_item", {
        "TableName": table,
        "Key": key,
        "ConditionExpression": fenced(condition, fence, names, values, name="#f", value=":f"),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        **update,
    }


class Finish:
    """complete (record): mark a record completed, with its inserted items' unlocks."""

    def __init__(
        self,
        records: RecordStore,
        read_item: ReadItem,
        *,
        known: Callable[[], bool | None],
        lacking: Callable[[], None],
    ) -> None:
        self.records = records
        self.read_item = read_item
        #: Whether the endpoint serves ``TransactWriteItems`` (None: not asked yet).
        self.transactions: bool | None = None
        self.known = known  # what is known of the endpoint before asking it
        self.lacking = lacking  # called when the endpoint turns out not to serve it

    def finish(self, header: Header, unlocks: list[Unlock]) -> Step[None]:
        """The unlocks, then the record's mark; in the same calls where DynamoDB can."""
        if unlocks and self.transactions is None:
            self.transactions = self.known()
        if unlocks and self.transactions is not False:
            try:
                yield from self._together(header, unlocks)
                header.completed = True
                return
            except _NoTransactions:
                self.transactions = False
                self.lacking()
                logger.info("no TransactWriteItems here: inserts are unlocked one by one")
        yield from gather(self._unlock_alone(u) for u in unlocks)
        yield from self.records.mark_completed(header)

    def _unlock_alone(self, unlock: Unlock) -> Step[None]:
        operation, params = _unlock_request(unlock)
        # Failing: another completer unlocked it first (a lock moved on is never ours).
        with contextlib.suppress(ConditionFailed):
            yield from request(operation, **params)

    def _together(self, header: Header, unlocks: list[Unlock]) -> Step[None]:
        chunks = _chunks(unlocks)
        for number, chunk in enumerate(chunks):
            last = number == len(chunks) - 1
            if not (yield from self._send_chunk(header, chunk, last=last)):
                return  # the record is completed (or gone): another party finished it

    def _send_chunk(self, header: Header, chunk: list[Unlock], *, last: bool) -> Step[bool]:
        """One call: the chunk's unlocks and the record's mark (``last``), or a check that
        the record is still decided and not completed; False: it no longer is."""
        for attempt in range(CHUNK_ATTEMPTS):
            record = (
                {"Update": self.records.completing(header)}
                if last
                else {"ConditionCheck": self.records.not_completed(header)}
            )
            actions = [record] + [{"Update": _unlock_request(u)[1]} for u in chunk]
            try:
                yield from request("transact_write_items", TransactItems=actions)
                return True
            except ValidationFailed:
                if len(chunk) == 1:
                    raise
                # larger than DynamoDB takes in one call after all: in halves
                half = len(chunk) // 2
                done = yield from self._send_chunk(header, chunk[:half], last=False)
                return done and (yield from self._send_chunk(header, chunk[half:], last=last))
            except DynamoDBError as exc:
                if exc.code == "UnknownOperationException" and self.transactions is None:
                    raise _NoTransactions from exc
                if exc.code != "TransactionCanceledException":
                    raise
                self.transactions = True
                reasons = [r.get("Code") for r in exc.response.get("CancellationReasons") or []]
                if reasons[:1] == ["ConditionalCheckFailed"] or not reasons:
                    now = yield from self.records.read_header(header.tx_id)
                    if now is None or now.completed:
                        return False
                    if not reasons:
                        raise
                chunk = yield from self._still_held(chunk, reasons[1:])
                if not chunk and not last:
                    return True
                yield from pause(min(0.02 * 2**attempt, 1.0))
        raise RuntimeError(f"completion of tx {header.tx_id} did not converge")

    def _still_held(self, chunk: list[Unlock], reasons: list[Any]) -> Step[list[Unlock]]:
        """The unlocks whose items are still held as found (a refused one is read again)."""
        kept = []
        for unlock, reason in zip(chunk, reasons + [None] * len(chunk), strict=False):
            if reason == "ConditionalCheckFailed":
                item = yield from self.read_item(unlock.table, unlock.key)
                if not held(item, unlock.lock, unlock.fence):
                    continue  # unlocked by another completer (a moved fence is not ours)
            kept.append(unlock)
        return kept


class _NoTransactions(Exception):
    """The endpoint does not serve ``TransactWriteItems``."""


def _unlock_request(unlock: Unlock) -> tuple[str, dict[str, Any]]:
    return release_request(
        unlock.table, unlock.key, unlock.lock, delete=False, applied=True, fence=unlock.fence
    )


def _chunks(unlocks: list[Unlock]) -> list[list[Unlock]]:
    chunks: list[list[Unlock]] = [[]]
    size = 0
    for unlock in unlocks:
        if chunks[-1] and (
            len(chunks[-1]) >= UNLOCKS_PER_CALL or size + unlock.size > BYTES_PER_CALL
        ):
            chunks.append([])
            size = 0
        chunks[-1].append(unlock)
        size += unlock.size
    return chunks
