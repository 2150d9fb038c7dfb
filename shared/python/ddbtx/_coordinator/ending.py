"""The end of a transaction, as steps: commit (decide, then complete), roll back, delete."""

from __future__ import annotations

import logging
import typing

from .. import schema as s
from .._base.effects import Step
from .._base.items import Item
from .._item_steps.view import COMMIT_ROUNDS
from .._stores.record import Header
from ..errors import (
    TransactionCommittedError,
    TransactionError,
    TransactionOutcomeUnknownError,
    TransactionRolledBackError,
)
from .exactly import Replay, Resumed

logger = logging.getLogger(__name__)


class Ended(Resumed, typing.Protocol):
    """What the end uses of its coordinator."""

    @property
    def replay(self) -> Replay | None: ...
    def check_pending(self) -> None: ...
    def check_known(self) -> None: ...
    def decided(self, header: Header | None) -> Step[TransactionError]: ...
    def gone(self) -> Step[TransactionRolledBackError | TransactionOutcomeUnknownError]: ...
    def undo_late_locks(self) -> Step[None]: ...
    def known(self) -> dict[str, Item]: ...


class Ending:
    """commit, rollback and delete of one coordinator's transaction, as steps."""

    def __init__(self, tx: Ended) -> None:
        self.tx = tx

    def commit(self) -> Step[None]:
        """commit + complete, as :meth:`ddbtx.Transaction.commit`."""
        tx, record = self.tx, self.tx.record
        if record.state == s.STATE_COMMITTED:
            yield from self.complete()
            return
        tx.check_pending()
        if not record.created:
            if tx.transaction_id is not None:
                yield from self._commit_empty(tx.transaction_id)
                return
            record.state = s.STATE_COMMITTED
            record.completed = True
            return
        if tx.replay is not None:
            yield from tx.replay.check_complete()
        for _ in range(COMMIT_ROUNDS):
            pending = record.unconfirmed()
            if pending:
                try:
                    yield from tx.catch_up(pending)
                except TransactionCommittedError:
                    return  # another coordinator committed (and completed) it
                continue
            header = yield from record.decide(s.STATE_COMMITTED)
            if header is None:
                raise (yield from tx.gone())
            if header.state == s.STATE_COMMITTED:
                yield from self.complete(header)
                return
            if header.state == s.STATE_ROLLED_BACK:
                raise (yield from tx.decided(header))
            # Still pending at another version: its requests are merged; catch them up.
        raise TransactionError(
            "commit did not converge after repeated concurrent changes", tx_id=tx.id
        )

    def _commit_empty(self, caller_id: str) -> Step[None]:
        """An exactly-once transaction with no request is still recorded committed."""
        tx, record = self.tx, self.tx.record
        resent: list[bool] = []
        records = tx.p.records
        created = yield from records.create_completed(
            tx.id, caller_id, s.STATE_COMMITTED, resent=resent
        )
        if not created:
            header = yield from records.read_header(tx.id)
            # Refused after a resend and gone: maybe our own committed record, deleted.
            record.commit_unanswered |= header is None and any(resent)
            if header is None or header.state == s.STATE_ROLLED_BACK:  # fenced by a retry
                raise (yield from tx.decided(header))
            if header.state != s.STATE_COMMITTED:  # only this object creates it
                raise TransactionError("the record appeared pending", tx_id=tx.id)
        record.state = s.STATE_COMMITTED
        record.created = record.completed = True

    def complete(self, header: Header | None = None) -> Step[None]:
        """complete with this coordinator's knowledge; only strays if others completed first."""
        tx, record = self.tx, self.tx.record
        if record.completed:
            return
        if header is not None and header.completed:
            yield from tx.undo_late_locks()
            record.completed = True
            return
        if header is None:
            header = Header(tx.id, record.state, record.version, 0, False, tail=record.tail)
        # Ours too: the record's, where it names a request, win (a take-over's nonce).
        header.entries = {**record.entries(), **header.entries}
        external = any(loc.external_image or not loc.confirmed for loc in record.requests.values())
        yield from tx.p.complete(header, tx.known(), external_images=external)
        record.completed = True

    def rollback(self) -> Step[None]:
        tx, record = self.tx, self.tx.record
        if record.state == s.STATE_ROLLED_BACK:
            yield from self.complete()
            return
        if record.state == s.STATE_COMMITTED:
            raise TransactionCommittedError("cannot roll back a committed transaction", tx_id=tx.id)
        tx.check_known()
        if not record.created:
            record.state = s.STATE_ROLLED_BACK
            record.completed = True
            return
        header = yield from record.decide(s.STATE_ROLLED_BACK)
        if header is None:
            gone = yield from tx.gone()
            if isinstance(gone, TransactionOutcomeUnknownError):
                raise gone
            return  # a janitor rolled it back and deleted it: as asked
        record.state = header.state
        yield from self.complete(header)
        if header.state == s.STATE_COMMITTED:
            raise TransactionCommittedError("transaction was committed first", tx_id=tx.id)

    def abort(self) -> Step[None]:
        """Roll back after a failed request, keeping the original error for the caller."""
        try:
            yield from self.rollback()
        except TransactionCommittedError:
            raise
        except Exception:  # the original error matters more; the sweeper completes the rest
            logger.exception("rollback of %s after a failed request did not complete", self.tx.id)

    def delete(self) -> Step[None]:
        tx, record = self.tx, self.tx.record
        if not record.created:
            return
        if record.state == s.STATE_PENDING:
            raise TransactionError("commit or roll back before deleting", tx_id=tx.id)
        if record.completed:
            header = Header(
                tx.id, record.state, record.version, 0, True, record.entries(), tail=record.tail
            )
            header.caller_id = tx.transaction_id
            yield from tx.p.delete_record(header)
            return
        current = yield from tx.p.records.read_header(tx.id)
        if current is None:
            return
        if not current.completed:
            yield from tx.p.complete(current, tx.known())
        current.completed = True
        yield from tx.p.delete_record(current)
