"""The fair FIFO lock: one head row per resource and namespace carries the ticket counter
and every live ticket (waiters and holder); the lowest ticket holds the lock."""

from __future__ import annotations

import math
from typing import cast

from .._base.effects import Step
from ..errors import LockNotGrantedError
from . import _rows as rows
from ._held import HeldLock, HeldLockSteps, LockClient, LockClientSteps
from ._line import (
    LEAVE,
    LINE_ENTER,
    LINE_LEAVE,
    LINE_RENEW,
    LINE_SKIP,
    RENEW,
    Entry,
    LineWaiter,
    entries,
)

# The head's line (see ``_line``): entering is taking a ticket.
FIFO_ENTER = LINE_ENTER
# Try once (wait=0): enter only when the head has no entry, so the new ticket holds.
FIFO_TRY = "(attribute_not_exists(#n) OR #n = :zero) AND attribute_not_exists(#t)"
# Release is leaving the line (the next ticket holds); a heartbeat renews the entry.
FIFO_LEAVE = LINE_LEAVE
FIFO_SKIP = LINE_SKIP


class FifoHeldSteps(HeldLockSteps):
    """A granted FIFO lock's writes, for both drivers: its entry is the holder."""

    _renew_write = (LINE_RENEW, RENEW)
    _release_write = (FIFO_LEAVE, LEAVE)


class FifoHeldLock(FifoHeldSteps, HeldLock):
    """A granted FIFO lock; ``fencing_token`` is its ticket."""


class FifoSteps(LockClientSteps):
    """A FIFO lock client's steps, for both drivers (documented by :class:`FifoLock`)."""

    _default_lease = 60.0
    _default_heartbeat = 30.0
    _kind = "fifo"
    _lock_type: type[FifoHeldSteps]  # the driver's

    def _acquire(self, resource: str, namespace: str, wait: float) -> Step[FifoHeldSteps]:
        """The acquire step, its arguments checked now (before any driver runs it)."""
        rows.check_resource(resource)
        rows.check_namespace(namespace)
        wait = rows.check_wait(wait)
        self._check_open()
        waiter = _Waiter(self, resource, namespace, self._clock() + wait, self._lock_type)
        return waiter.leaving(waiter.run(try_once=wait == 0))


class FifoLock(FifoSteps, LockClient):
    """A fair lock: the holder is the lowest ticket on one head row (its fencing token), so
    a handoff needs no write. An entry that stops heartbeating for a lease is removed.

    Parameters are those of :class:`~ddbtx.locks.LockClient`; the lease
    defaults to 60 s with a heartbeat every 30 s, and polls start at 10 ms.

    Examples
    --------
    >>> fifo = FifoLock(client, "Locks", owner="p1",
    ...                 lease_duration=60.0, heartbeat_period=30.0)        # doctest: +SKIP
    >>> with fifo.acquire("order-history", namespace="sum") as lock:       # doctest: +SKIP
    ...     total = sum_orders(fence=lock.fencing_token)
    """

    _lock_type = FifoHeldLock

    def acquire(
        self, resource: str, *, namespace: str = rows.DEFAULT_NAMESPACE, wait: float = math.inf
    ) -> FifoHeldLock:
        """Acquire ``resource`` in ``namespace`` after every earlier live ticket; a waiter
        whose ``wait`` runs out raises :class:`~ddbtx.errors.LockNotGrantedError`."""
        return cast(FifoHeldLock, self._run(self._acquire(resource, namespace, wait)))


class _Waiter(LineWaiter):
    """One acquire call: its ticket and entry on the head; the lowest ticket holds."""

    lc: FifoSteps

    def __init__(
        self,
        fifo: FifoSteps,
        resource: str,
        namespace: str,
        deadline: float,
        lock_type: type[FifoHeldSteps],
    ) -> None:
        head_sk = rows.fifo_head_sk(namespace)
        super().__init__(fifo, resource, rows.key(resource, head_sk), head_sk, deadline)
        self.namespace = namespace
        self.lock_type = lock_type  # the driver's held-lock class

    def run(self, *, try_once: bool) -> Step[FifoHeldSteps]:
        head = yield from self.enter(FIFO_TRY if try_once else FIFO_ENTER)
        if head is None:
            raise self.not_granted()
        if try_once:
            line = entries(head)
            lock = (yield from self._granted()) if line and line[0].hold == self.hold else None
            if lock is not None:
                return lock
            yield from self.leave()  # a lost response let someone in between: not ours
            raise self.not_granted()
        return cast(FifoHeldSteps, (yield from self.wait_in_line(head)))

    def at_front(self, row: rows.Item, now: float) -> Step[HeldLockSteps | rows.Item | float]:
        lock = yield from self._granted()  # the lowest ticket holds the lock
        return lock if lock is not None else (yield from self.read())

    def counter(self, row: rows.Item, line: list[Entry]) -> int:
        return line[0].ticket

    def not_granted(self) -> LockNotGrantedError:
        return LockNotGrantedError(
            f"FIFO lock on {self.resource!r}/{self.namespace} not granted to "
            f"{self.lc.owner!r} in time (ticket {self.ticket or 'none'})"
        )

    def _granted(self) -> Step[FifoHeldSteps | None]:
        """Our entry is the lowest: the lock (``None``: removed as dead before we noticed)."""
        fifo = self.lc
        lock = self.lock_type(
            fifo,
            hold=self.hold,
            row_key=self.row_key,
            resource=self.resource,
            namespace=self.namespace,
            fencing_token=self.ticket,
            # Whoever watches our entry started after our last rvn write: count from it.
            confirmed_at=self.renewed_at,
        )
        lock._extra_values = {":ticket": self.ticket, ":minus": -1}
        lock._extra_names = dict(self.names)
        if not (yield from lock._confirm(fifo.heartbeat_period)):
            return None
        self.entered = False  # the entry is the lock's now: release removes it
        fifo._keep(lock)
        return lock
