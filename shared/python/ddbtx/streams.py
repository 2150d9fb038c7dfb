"""Committed changes only: DynamoDB Streams records of a data table, with the protocol taken out.

Each record is judged from its own two images alone, so a batch split anywhere gives the
same changes (docs/streams.md).

Examples
--------
>>> from ddbtx.streams import committed_changes
>>> record = {
...     "eventName": "MODIFY",
...     "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/Accounts/stream/x",
...     "dynamodb": {
...         "Keys": {"id": {"S": "alice"}},
...         "OldImage": {
...             "id": {"S": "alice"}, "balance": {"N": "90"},
...             "_tx:id": {"S": "tx1/n1"}, "_tx:ap": {"BOOL": True},
...             "_tx:img": {"M": {"id": {"S": "alice"}, "balance": {"N": "100"}}},
...         },
...         "NewImage": {"id": {"S": "alice"}, "balance": {"N": "90"}},
...         "SequenceNumber": "111",
...         "StreamViewType": "NEW_AND_OLD_IMAGES",
...     },
... }
>>> [(c.kind, c.old["balance"], c.new["balance"], c.tx_id) for c in committed_changes([record])]
[('MODIFY', {'N': '100'}, {'N': '90'}, 'tx1')]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from . import schema as s
from ._base.items import Item, applied, comparable, flag, lock_owner, strip
from .errors import DdbtxError

__all__ = [
    "PROTOCOL_FILTER_PATTERNS",
    "Change",
    "StreamRecordError",
    "committed_change",
    "committed_changes",
    "record_handler",
]

logger = logging.getLogger(__name__)

ChangeKind = Literal["INSERT", "MODIFY", "REMOVE"]
_VIEW_TYPE: Final = "NEW_AND_OLD_IMAGES"
#: The images each event carries in a NEW_AND_OLD_IMAGES stream.
_IMAGES_OF: Final = {
    "INSERT": ("NewImage",),
    "MODIFY": ("OldImage", "NewImage"),
    "REMOVE": ("OldImage",),
}


class StreamRecordError(DdbtxError, ValueError):
    """A stream record this adapter cannot judge: ``problem`` says why, ``sequence_number``
    which record (None if none)."""

    def __init__(self, problem: str, *, sequence_number: str | None = None) -> None:
        where = f" (record {sequence_number})" if sequence_number is not None else ""
        super().__init__(f"stream record{where}: {problem}")
        self.problem = problem
        self.sequence_number = sequence_number


@dataclass(frozen=True)
class Change:
    """One committed change of one item, as a stream consumer should see it.

    Attributes
    ----------
    table
        The table's name, from the record's ``eventSourceARN``.
    key
        The item's key (low-level AttributeValue map).
    kind
        ``"INSERT"`` (the item did not exist before), ``"MODIFY"`` or ``"REMOVE"``.
    old, new
        The committed item before and after (low-level maps, no protocol attribute);
        None where there is none or (``old``) where it is not known (see ``old_known``).
    tx_id
        The transaction that made the change; None for a plain write (or native fast path).
    sequence_number
        The stream record's ``SequenceNumber`` (for checkpoints and partial batch failures).
    old_known
        False when the item before the transaction is kept in the images table (over 64 KB).
    """

    table: str
    key: Item
    kind: ChangeKind
    old: Item | None
    new: Item | None
    tx_id: str | None
    sequence_number: str
    old_known: bool = True


def committed_changes(records: Iterable[Mapping[str, Any]]) -> list[Change]:
    """The committed changes in the ``Records`` of a DynamoDB Streams event, in order.

    Parameters
    ----------
    records
        ``event["Records"]`` of a Lambda event from a ``NEW_AND_OLD_IMAGES`` stream of a
        data table, as delivered (low-level AttributeValue maps).

    Returns
    -------
    list of Change
        One per committed change (at the item's release) and one per plain write.

    Raises
    ------
    StreamRecordError
        A record that is malformed, of another view type, or lacks an image its event
        must carry, naming the problem and the record.

    Examples
    --------
    >>> def handler(event, context):                       # doctest: +SKIP
    ...     for change in committed_changes(event["Records"]):
    ...         index(change.table, change.key, change.new)
    """
    return [change for record in records if (change := committed_change(record)) is not None]


def committed_change(record: Mapping[str, Any]) -> Change | None:
    """The committed change one stream record carries, or None for a protocol-only record.

    Parameters
    ----------
    record
        One element of ``event["Records"]`` (see :func:`committed_changes`).

    Raises
    ------
    StreamRecordError
        As :func:`committed_changes`.

    Examples
    --------
    >>> committed_change(record) is None  # a lock, an apply, a roll back...  # doctest: +SKIP
    True
    """
    parsed = _Parsed.of(record)
    old, new = parsed.old, parsed.new
    if not _has_protocol(old) and not _has_protocol(new):
        if old is not None and new is not None and _same(old, new):
            return None  # a write that changed nothing (DynamoDB writes no record for it)
        return parsed.change(parsed.event_name, old, new, tx_id=None)
    if _has_protocol(new):
        return None  # lock, apply, later write, mark deleted: nothing is committed yet
    assert old is not None  # new has no protocol attribute, so old must have them
    tx_id = lock_owner(old)
    if tx_id is None:
        # No ddbtx step leaves protocol attributes without the lock: judged as no change.
        logger.warning(
            "record %s: protocol attributes without a lock; no change emitted",
            parsed.sequence_number,
        )
        return None
    if new is None:
        return _deleted_under_lock(parsed, old, tx_id)
    return _released(parsed, old, new, tx_id)


def _deleted_under_lock(parsed: _Parsed, old: Item, tx_id: str) -> Change | None:
    """A locked item deleted: a transient one goes (nothing committed), or a delete commits."""
    if flag(old, s.ATTR_TRANSIENT):
        # Not there before the transaction nor after: a rolled-back or deleted-again insert.
        return None
    if not flag(old, s.ATTR_DELETED):
        # Only a commit deletes an item that existed, marked deleted: this is an unguarded writer.
        logger.warning(
            "record %s: a locked item not marked deleted was deleted (tx %s); no change emitted",
            parsed.sequence_number,
            tx_id,
        )
        return None
    before, known = _before_transaction(parsed, old)
    return parsed.change("REMOVE", before, None, tx_id=tx_id, old_known=known)


def _released(parsed: _Parsed, old: Item, new: Item, tx_id: str) -> Change | None:
    """The lock left the item: a committed write's release, a restore, or a bare unlock."""
    if not applied(old) or flag(old, s.ATTR_DELETED):
        # A lock that wrote nothing, or on a delete (a commit deletes it), or a restore.
        return None
    if not _same(strip(old), new):
        return None  # a restore: the roll back put the saved image back
    if flag(old, s.ATTR_TRANSIENT):
        return parsed.change("INSERT", None, new, tx_id=tx_id)
    before, known = _before_transaction(parsed, old)
    if known and before is not None and _same(before, new):
        # Committed or rolled back, the item is as it was: nothing changed.
        return None
    return parsed.change("MODIFY", before, new, tx_id=tx_id, old_known=known)


def _before_transaction(parsed: _Parsed, old: Item) -> tuple[Item | None, bool]:
    """The item before the transaction, from a locked old image, and whether it is known."""
    image = old.get(s.ATTR_IMAGE)
    if image is not None:
        if not isinstance(image, Mapping) or not isinstance(image.get("M"), Mapping):
            raise StreamRecordError(
                f"{s.ATTR_IMAGE} is not a map attribute", sequence_number=parsed.sequence_number
            )
        return dict(image["M"]), True
    if flag(old, s.ATTR_IMAGE_EXTERNAL):
        return None, False  # kept in the images table: not in the record, never guessed
    if not applied(old):
        return strip(old), True  # a delete that is the item's only write changed nothing yet
    logger.warning(
        "record %s: an applied item without its image (tx %s); old value unknown",
        parsed.sequence_number,
        lock_owner(old),
    )
    return None, False


@dataclass(frozen=True)
class _Parsed:
    """One record's fields, checked."""

    table: str
    event_name: ChangeKind
    key: Item
    old: Item | None
    new: Item | None
    sequence_number: str

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> _Parsed:
        if not isinstance(record, Mapping):
            raise StreamRecordError(f"expected a record mapping, got {type(record).__name__}")
        body = record.get("dynamodb")
        if not isinstance(body, Mapping):
            raise StreamRecordError("no 'dynamodb' mapping")
        seq = body.get("SequenceNumber")
        if not isinstance(seq, str) or not seq:
            raise StreamRecordError("no dynamodb.SequenceNumber")
        view = body.get("StreamViewType", _VIEW_TYPE)
        if view != _VIEW_TYPE:
            raise StreamRecordError(
                f"stream view type {view!r}: committed changes need {_VIEW_TYPE}",
                sequence_number=seq,
            )
        name = record.get("eventName")
        if name not in _IMAGES_OF:
            raise StreamRecordError(
                f"eventName {name!r} is not one of {', '.join(_IMAGES_OF)}", sequence_number=seq
            )
        key = body.get("Keys")
        if not isinstance(key, Mapping) or not key:
            raise StreamRecordError("no dynamodb.Keys", sequence_number=seq)
        old, new = _images(body, name, seq)
        return cls(_table_of(record, seq), name, dict(key), old, new, seq)

    def change(
        self,
        kind: ChangeKind,
        old: Item | None,
        new: Item | None,
        *,
        tx_id: str | None,
        old_known: bool = True,
    ) -> Change:
        return Change(self.table, self.key, kind, old, new, tx_id, self.sequence_number, old_known)


def _images(body: Mapping[str, Any], name: str, seq: str) -> tuple[Item | None, Item | None]:
    """The old and new images of a ``name`` record, which must carry those of its event."""
    for image_name in ("OldImage", "NewImage"):
        if body.get(image_name) is not None and not isinstance(body[image_name], Mapping):
            raise StreamRecordError(f"dynamodb.{image_name} is not a mapping", sequence_number=seq)
    for missing in (n for n in _IMAGES_OF[name] if body.get(n) is None):
        raise StreamRecordError(
            f"a {name} record without its {missing} (is the stream {_VIEW_TYPE}?)",
            sequence_number=seq,
        )
    old, new = body.get("OldImage"), body.get("NewImage")
    return _unfenced(old), _unfenced(new)


def _unfenced(image: Mapping[str, Any] | None) -> Item | None:
    """An image without the fence: it stays on items after their transactions and moves
    with every lock, so it tells nothing committed (docs/protocol.md)."""
    if image is None:
        return None
    return {name: value for name, value in image.items() if name != s.ATTR_FENCE}


def _table_of(record: Mapping[str, Any], seq: str) -> str:
    """The table name in ``arn:aws:dynamodb:<region>:<account>:table/<name>/stream/<label>``."""
    arn = record.get("eventSourceARN")
    parts = arn.split(":", 5) if isinstance(arn, str) else []
    resource = parts[5].split("/") if len(parts) == 6 else []
    if len(resource) < 2 or resource[0] != "table" or not resource[1]:
        raise StreamRecordError(
            f"eventSourceARN {arn!r} is not a DynamoDB table stream ARN", sequence_number=seq
        )
    return resource[1]


def _has_protocol(item: Item | None) -> bool:
    return any(name.startswith(s.RESERVED_PREFIX) for name in item or ())


def _same(a: Item, b: Item) -> bool:
    """Equal items, as DynamoDB compares them: sets in any order, numbers by value."""
    return bool(comparable({"M": a}) == comparable({"M": b}))


def record_handler(on_change: Callable[[Change], None]) -> Callable[..., None]:
    """A record handler for Powertools' ``BatchProcessor`` that passes committed changes only.

    A raise fails that record and Lambda retries from it: be idempotent.

    Parameters
    ----------
    on_change
        Called once per committed change, in stream order.

    Examples
    --------
    >>> from aws_lambda_powertools.utilities.batch import (   # doctest: +SKIP
    ...     BatchProcessor, EventType, process_partial_response)
    >>> processor = BatchProcessor(event_type=EventType.DynamoDBStreams)  # doctest: +SKIP
    >>> handle = record_handler(lambda change: print(change.kind, change.key))  # doctest: +SKIP
    >>> def handler(event, context):                      # doctest: +SKIP
    ...     return process_partial_response(
    ...         event=event, record_handler=handle, processor=processor, context=context)
    """

    def handle(record: Any) -> None:
        raw = getattr(record, "raw_event", record)
        change = committed_change(raw)
        if change is not None:
            on_change(change)

    return handle


_ABSENT: Final = [{"exists": False}]
_PRESENT: Final = [{"exists": True}]
#: No lock on the new image (or no new image: a REMOVE).
_UNLOCKED_AFTER: Final = {s.ATTR_LOCK: {"S": _ABSENT}}

#: Lambda event filter patterns (OR-ed) that keep every record :func:`committed_change` may
#: emit a change for and drop most protocol records before the function is invoked.
PROTOCOL_FILTER_PATTERNS: Final[tuple[dict[str, Any], ...]] = (
    # A plain write: no lock on either image.
    {"dynamodb": {"NewImage": _UNLOCKED_AFTER, "OldImage": {s.ATTR_LOCK: {"S": _ABSENT}}}},
    # The lock leaves an item a write was applied to (first write: true; later: its number).
    {"dynamodb": {"NewImage": _UNLOCKED_AFTER, "OldImage": {s.ATTR_APPLIED: {"BOOL": _PRESENT}}}},
    {"dynamodb": {"NewImage": _UNLOCKED_AFTER, "OldImage": {s.ATTR_APPLIED: {"N": _PRESENT}}}},
    # A locked item marked deleted goes, and it existed before the transaction.
    {
        "dynamodb": {
            "NewImage": _UNLOCKED_AFTER,
            "OldImage": {
                s.ATTR_DELETED: {"BOOL": _PRESENT},
                s.ATTR_TRANSIENT: {"BOOL": _ABSENT},
            },
        }
    },
)
