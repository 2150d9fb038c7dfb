"""Contention: wound-wait by start order (an older transaction rolls a younger holder back,
a younger one waits up to ``lock_wait``); a holder stale for ``stale_after`` is rolled back."""

from __future__ import annotations

import enum
import random
import typing
from collections.abc import Callable

from .. import schema as s
from .._base.effects import Step, pause
from .._base.items import lock_owner
from .._base.requests import Request
from .._stores.completion import Completion
from .._stores.record import Header
from ..errors import TransactionConflictError
from .view import RecordView


class Contention(enum.Enum):
    """What a transaction does when an item it needs is locked by a pending one."""

    #: The older transaction (smaller id) rolls the younger back; the younger waits.
    WOUND_WAIT = "wound-wait"
    #: Always roll the lock holder back (the Java library's policy; for comparison).
    ROLLBACK_HOLDER = "rollback-holder"


class Patience(typing.Protocol):
    """The settings a wait reads from its :class:`~ddbtx.TransactionManager`."""

    @property
    def contention(self) -> Contention: ...
    @property
    def lock_wait(self) -> float: ...
    @property
    def stale_after(self) -> float: ...
    @property
    def wound_patience(self) -> float: ...
    @property
    def rng(self) -> random.Random: ...
    @property
    def monotonic(self) -> Callable[[], float]: ...


class Contending(typing.Protocol):
    """What contention uses of its transaction (:class:`ddbtx.Transaction`)."""

    @property
    def id(self) -> str: ...
    @property
    def p(self) -> Completion: ...
    @property
    def record(self) -> RecordView: ...
    @property
    def manager(self) -> Patience: ...


class ItemContention:
    """One request's wait for an item another transaction holds (on the monotonic clock)."""

    #: Seconds a decided holder gets to release its items before a waiter completes it.
    DECIDED_GRACE = 0.25

    def __init__(self, tx: Contending, req: Request) -> None:
        self.tx = tx
        self.req = req
        self.p = tx.p
        self.m = tx.manager
        self.start = self.m.monotonic()
        self.delay = 0.01
        self.seen: tuple[str, int] | None = None
        self.seen_at = self.start
        self.decided = False  # the holder in ``seen`` was decided when last read
        self.decided_at = self.start

    def holder_is_stale(self, owner: str, version: int, *, decided: bool = False) -> bool:
        now = self.m.monotonic()
        if decided and not (self.decided and self.seen is not None and self.seen[0] == owner):
            self.decided_at = now
        self.decided = decided
        if self.seen != (owner, version):
            self.seen, self.seen_at = (owner, version), now
            return False
        return now - self.seen_at >= self.m.stale_after

    def watching(self, owner: str) -> bool:
        """Waiting on ``owner``, and nothing a new read of its record could change yet."""
        if self.seen is None or self.seen[0] != owner:
            return False
        now = self.m.monotonic()
        if self.decided and now - self.decided_at >= self.grace():
            return False
        return now - self.seen_at < self.m.stale_after

    def grace(self) -> float:
        return min(self.DECIDED_GRACE, self.m.lock_wait)

    def grace_over(self) -> bool:
        return self.decided and self.m.monotonic() - self.decided_at >= self.grace()

    def expired(self) -> bool:
        return self.m.monotonic() - self.start >= self.m.lock_wait

    def impatient(self) -> bool:
        """An older transaction has waited long enough for younger holders of this item."""
        return self.m.monotonic() - self.start >= self.m.wound_patience

    def pause(self) -> Step[None]:
        yield from pause(self.delay * (0.5 + self.m.rng.random()))
        self.delay = min(self.delay * 2, 0.5)

    def contend(self, owner: str) -> Step[bool]:
        """The item is locked by ``owner``: wound it, wait, or help it complete. True after
        a wait: the caller reads the item next instead of retrying its lock."""
        if self.watching(owner):
            # Its record is read again only once it may be stale or the wait is over.
            if not self.expired():
                yield from self.pause()
                return True
            if not self.decided:
                raise self._waited_too_long(owner)
        header = yield from self.p.records.read_header(owner)
        if header is None or header.completed:
            yield from self._undo_stray(owner)
            return False
        if header.state != s.STATE_PENDING:
            return (yield from self._wait_for_decided(owner, header))
        if self.tx.manager.contention is Contention.ROLLBACK_HOLDER:
            yield from self.p.resolve(owner, by=self.tx.id)
            return False
        if self.tx.id < owner:
            return (yield from self._outwait_younger(owner, header))
        return (yield from self._wait_for_older(owner, header))

    def _undo_stray(self, owner: str) -> Step[None]:
        """No record, or a completed one: any lock of it left on the item is stray."""
        req = self.req
        item = yield from self.p.read_item(req.table, req.key)
        if item is not None and lock_owner(item) == owner:
            yield from self.p.undo(owner, req.table, req.key, item)

    def _wait_for_decided(self, owner: str, header: Header) -> Step[bool]:
        """A decided holder is likely releasing its items: completed here only after a wait."""
        stale = self.holder_is_stale(owner, header.version, decided=True)
        if stale or self.expired() or self.grace_over():
            yield from self.p.complete(header)
            return False
        yield from self.pause()
        return True

    def _wait_for_older(self, owner: str, header: Header) -> Step[bool]:
        """Wound-wait: a younger transaction waits for an older, pending holder."""
        if self.holder_is_stale(owner, header.version):
            yield from self.p.resolve(owner, expect_version=header.version, by=self.tx.id)
            return False
        if self.expired():
            raise self._waited_too_long(owner)
        if not self.tx.record.marked:
            # Blocked on an older holder: older contenders must wound it (they could deadlock).
            yield from self.tx.record.mark_waiting(owner)
        yield from self.pause()
        return True

    def _outwait_younger(self, owner: str, header: Header) -> Step[bool]:
        """Wound-wait, patiently: a running younger holder will likely commit soon."""
        current: Header | None = header
        while current is not None and current.state == s.STATE_PENDING and not current.completed:
            # wound: a younger holder that is blocked (could deadlock), or past its patience.
            if current.waiting or self.impatient():
                yield from self.p.resolve(owner, by=self.tx.id)
                return False
            yield from self.pause()
            current = yield from self.p.records.read_header(owner)
        return True

    def _waited_too_long(self, owner: str) -> TransactionConflictError:
        return TransactionConflictError(
            f"item stayed locked by older transaction {owner}",
            tx_id=self.tx.id,
            table=self.req.table,
            key=self.req.key,
            other_tx_id=owner,
        )
