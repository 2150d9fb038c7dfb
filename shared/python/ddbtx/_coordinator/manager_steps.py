"""The manager's protocol as steps: open by exactly-once id, resume, sweep."""

from __future__ import annotations

import typing
from collections.abc import Callable
from datetime import timedelta
from typing import Generic, TypeVar

from .. import schema as s
from .._base.effects import Step
from .._base.requests import KeySchemas
from .._stores.completion import Completion, SweepOutcome
from .._stores.record import Header
from ..errors import TransactionError, TransactionNotFoundError
from .exactly import Replay, Resumed

#: Rounds of "claim, read, act" before giving up on an alias that keeps changing.
RESOLVE_ROUNDS = 8


class Opened(Resumed, typing.Protocol):
    """What opening sets up on a transaction."""

    already_committed: bool
    replay: Replay | None


Tx = TypeVar("Tx", bound=Opened)


class Opener(Generic[Tx]):
    """Opens transactions for one manager: ``make(tx_id, transaction_id)`` makes one."""

    def __init__(
        self, p: Completion, schemas: KeySchemas, make: Callable[[str, str | None], Tx]
    ) -> None:
        self.p = p
        self.schemas = schemas
        self.make = make

    def by_caller_id(self, caller_id: str, fresh: str) -> Step[Tx]:
        """The transaction that carries ``caller_id``: new, resumed, or already committed."""
        aliases, records = self.p.aliases, self.p.records
        for _ in range(RESOLVE_ROUNDS):
            if (yield from aliases.claim(caller_id, fresh)):
                return self.make(fresh, caller_id)
            named = yield from aliases.read(caller_id)
            if named is None:
                continue  # deleted with its expired record since the claim failed: claim again
            if named == fresh:  # our claim or move landed; its answer was lost
                return self.make(fresh, caller_id)
            header = yield from records.read_header(named)
            if header is None:
                # Never created (yet) or removed by TTL: a rolled-back record settles which.
                yield from records.create_completed(named, caller_id, s.STATE_ROLLED_BACK)
                header = yield from records.read_header(named)
                if header is None:
                    continue
            if header.state == s.STATE_ROLLED_BACK:
                if not header.completed:
                    yield from self.p.complete(header)  # its locks would hold up the new attempt
                if (yield from aliases.move(caller_id, named, fresh)):
                    return self.make(fresh, caller_id)
                continue  # another retry started over first: join that one
            tx = yield from self.adopt(header)
            tx.record.caller_id = caller_id
            if header.state == s.STATE_COMMITTED:
                tx.already_committed = True
            else:
                tx.replay = Replay(tx)
            return tx
        raise TransactionError(
            f"the transaction_id {caller_id!r:.80} kept changing hands; try again"
        )

    def resume(self, tx_id: str) -> Step[Tx]:
        header = yield from self.p.records.read_header(tx_id)
        if header is None:
            raise TransactionNotFoundError("no such transaction", tx_id=tx_id)
        return (yield from self.adopt(header))

    def adopt(self, header: Header) -> Step[Tx]:
        """A coordinator for the transaction ``header`` was read from; a decided one completed."""
        tx = self.make(header.tx_id, header.caller_id)
        yield from tx.record.follow(header)
        for table in sorted({entry.table for entry in header.entries.values()}):
            # Further requests on these tables are validated without a call.
            yield from self.schemas.types(table)
        if header.state != s.STATE_PENDING:
            yield from self.p.complete(header)
            tx.record.completed = True
        return tx


def sweep(
    p: Completion, tx_id: str, rollback_after: timedelta, delete_after: timedelta
) -> Step[SweepOutcome]:
    """As :meth:`ddbtx.TransactionManager.sweep`."""
    header = yield from p.records.read_header(tx_id)
    if header is None:
        return SweepOutcome.MISSING
    age_ms = p.now_ms() - header.updated_ms
    if not header.completed:
        if header.state == s.STATE_PENDING and age_ms < rollback_after.total_seconds() * 1000:
            return SweepOutcome.ACTIVE
        return (yield from p.resolve(tx_id, header, expect_version=header.version))
    if age_ms < delete_after.total_seconds() * 1000:
        return SweepOutcome.KEPT
    yield from p.delete_record(header)
    return SweepOutcome.DELETED
