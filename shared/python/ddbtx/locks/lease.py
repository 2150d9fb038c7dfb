"""The lease lock: heartbeats change a record version number (rvn); a waiter takes the lock
over once the rvn stayed unchanged for a full lease on its own monotonic clock."""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from typing import Any, cast

from .._base.effects import Step
from ..errors import ConditionFailed, LockError, LockNotGrantedError
from . import _rows as rows
from ._held import HeldLock, HeldLockSteps, LockClient, LockClientSteps, Watch, observe
from ._line import Entry, LineWaiter, entries, entry_names

logger = logging.getLogger(__name__)

# The fast path: grant a row nobody holds or waits for, or replay our own lost grant.
LEASE_GRANT_FREE = (
    "(attribute_not_exists(#hold) AND (attribute_not_exists(#n) OR #n = :zero)) OR #hold = :hold"
)
# The first in line takes the free lock: its entry is still there (no lower ticket can
# have appeared). No replay branch: the grant also counts the entry out, which a replay
# must not do twice; a retry that fails reads the row instead.
LEASE_GRANT_FIRST = "attribute_not_exists(#hold) AND attribute_exists(#t)"
# Take over a holder whose rvn stayed unchanged for its lease (wait=0: only while nobody
# waits in line); or replay our own takeover.
LEASE_TAKEOVER = "(#rvn = :seen AND (attribute_not_exists(#n) OR #n = :zero)) OR #hold = :hold"
# The same for the first in line (its entry still there).
LEASE_TAKEOVER_FIRST = "#rvn = :seen AND attribute_exists(#t)"
# Heartbeat: only while this grant is the one on the row (a takeover replaces #hold).
LEASE_RENEW = "#hold = :hold"
# Release this grant; "#rel = :hold" accepts the replay of our own applied release.
LEASE_RELEASE = "#hold = :hold OR #rel = :hold"
# Release by handing the lock to the first in line (as our grant showed it): this grant
# is still the one on the row and that entry still in line. No replay branch, as above.
LEASE_HANDOFF = "#hold = :hold AND attribute_exists(#t)"
# Set the data of a grant handed to us (the handoff cannot know it).
LEASE_DATA = "#hold = :hold"
# Enter the line: as LINE_ENTER, and not already handed the lock (a replay of our applied
# entry must not meet the lock handed to us since and queue us behind our own grant).
LEASE_ENTER = "attribute_not_exists(#t) AND (attribute_not_exists(#hold) OR #hold <> :hold)"

# A grant also clears the last release's mark, so that a release replayed after it (its
# answer lost) fails instead of removing this grant.
_GRANT = (
    "SET #owner = :owner, #hold = :hold, #rvn = :hold, #lease = :lease, #exp = :exp{data}"
    " ADD #fence :one{count} REMOVE #rel{no_data}{entry}"
)
_RENEW = "SET #rvn = :rvn, #exp = :exp"
_RELEASE = "SET #rel = :hold REMOVE #hold, #owner, #rvn, #exp, #data"
_HANDOFF = (
    "SET #rel = :hold, #hold = :next, #owner = :nowner, #rvn = :nrvn, #lease = :nlease,"
    " #exp = :nexp ADD #fence :one, #n :minus REMOVE #t, #w, #data"
)


def _holder(item: rows.Item, default_lease: float) -> tuple[str | None, str, float]:
    """The grant on a lease row: its hold id (``None``: free), rvn and lease."""
    return (
        rows.get_str(item, rows.HOLD),
        rows.get_str(item, rows.RVN) or "",
        rows.get_num(item, rows.LEASE) or default_lease,
    )


def _signs_of_life(rvn: str, lease: float, line: list[Entry]) -> tuple[str, float]:
    """Every sign of life (the holder's rvn and each entry's), and the longest lease."""
    signature = " ".join([rvn, *(f"{e.hold}={e.rvn}" for e in line)])
    return signature, max([lease, *(e.lease for e in line)])


class LeaseLockSteps(HeldLockSteps):
    """A granted lease lock's steps: its heartbeat learns the first in line, whom its
    release hands the lock to."""

    _renew_write = (LEASE_RENEW, _RENEW)
    _release_write = (LEASE_RELEASE, _RELEASE)
    _next: Entry | None = None

    def _renew(self, **params: Any) -> Step[rows.Item]:
        row = yield from super()._renew(ReturnValues="ALL_NEW")
        line = entries(row, self.lease_duration)
        self._next = line[0] if line else None
        return row

    def _end(self) -> Step[None]:
        following = self._next
        if following is not None:
            values: dict[str, object] = {
                ":next": following.hold,
                ":nowner": following.owner or "",
                ":nrvn": rows.new_id(),
                ":nlease": following.lease,
                ":nexp": self._lc._wall() + following.lease,
                ":one": 1,
                ":minus": -1,
            }
            sent = self._clock()
            try:
                yield from self._write(
                    (LEASE_HANDOFF, _HANDOFF), values, entry_names(following.hold)
                )
                return
            except ConditionFailed as exc:
                # Within our lease nobody else takes it: a retried handoff applied the first time.
                if rows.was_retried(exc) and sent - self._confirmed < self.lease_duration:
                    row = yield from rows.read_row(self._lc.table, self._key)
                    if rows.get_str(row, rows.HOLD) != self._hold:
                        return
                # That waiter left the line (or this grant is gone: the release finds it).
        yield from super()._end()


class LeaseLock(LeaseLockSteps, HeldLock):
    """A granted lease lock (see :class:`~ddbtx.locks.HeldLock`)."""


class LeaseClientSteps(LockClientSteps):
    """A lease lock client's steps, for both drivers (documented by :class:`LeaseLockClient`)."""

    _kind = "lease"
    #: Resources whose ``wait=0`` view a client keeps (the oldest go first).
    _seen_limit = 10_000
    #: The held-lock class of this client's driver.
    _lock_type: type[LeaseLockSteps]

    def __init__(self, client: Any, table: str, **options: Any) -> None:
        super().__init__(client, table, **options)
        self._seen: dict[str, Watch] = {}
        self._seen_guard = threading.Lock()

    def _acquire(self, resource: str, wait: float, data: bytes | None) -> Step[LeaseLockSteps]:
        """The acquire step, its arguments checked now (before any driver runs it)."""
        rows.check_resource(resource)
        wait = rows.check_wait(wait)
        if data is not None and not isinstance(data, bytes):
            raise ValueError(f"data must be bytes or None, not {type(data).__name__}")
        self._check_open()
        acquire = _Acquire(self, resource, data, wait)
        return acquire.leaving(acquire.run())

    def _remember(self, resource: str, watch: Watch | None) -> Watch | None:
        """Store (or with ``None`` forget) what a ``wait=0`` call saw; the previous view."""
        with self._seen_guard:
            previous = self._seen.pop(resource, None)
            if watch is not None:
                self._seen[resource] = watch
                while len(self._seen) > self._seen_limit:  # oldest first
                    self._seen.pop(next(iter(self._seen)))
            return previous

    def _grant(
        self,
        resource: str,
        hold: str,
        data: bytes | None,
        condition: str,
        values: dict[str, object],
        entry: dict[str, str] | None = None,
    ) -> Step[LeaseLockSteps | rows.Item | None]:
        """The lock, else the row a failed condition found (or ``None``); ``entry`` removed."""
        values = {
            ":owner": self.owner,
            ":hold": hold,
            ":lease": self.lease_duration,
            ":exp": self._wall() + self.lease_duration,
            ":one": 1,
            ":minus": -1,
            ":data": data,  # sent only where the update names it
            **values,
        }
        update = _GRANT.format(
            data="" if data is None else ", #data = :data",
            no_data=", #data" if data is None else "",
            count="" if entry is None else ", #n :minus",
            entry="" if entry is None else ", #t, #w",
        )
        row_key = rows.key(resource, rows.LEASE_SK)
        sent = self._clock()
        try:
            item = yield from rows.update_row(
                self.table,
                row_key,
                condition,
                update,
                values,
                entry,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ConditionFailed as exc:
            if rows.was_retried(exc):  # the first attempt may have been applied
                item = yield from rows.read_row(self.table, row_key)
                if rows.get_str(item, rows.HOLD) != hold:
                    return item
            else:
                return rows.returned_row(exc) or None
        return (yield from self._held(resource, hold, item, sent))

    def _held(
        self, resource: str, hold: str, item: rows.Item, confirmed_at: float
    ) -> Step[LeaseLockSteps | None]:
        """The handle of our grant ``hold`` (``None``: taken over before we knew of it)."""
        line = entries(item, self.lease_duration)
        self._pace(resource, rows.LEASE_SK).crowded = bool(line)
        lock = self._lock_type(
            self,
            hold=hold,
            row_key=rows.key(resource, rows.LEASE_SK),
            resource=resource,
            fencing_token=rows.get_int(item, rows.FENCE) or 0,
            confirmed_at=confirmed_at,
            data=rows.get_bytes(item, rows.DATA),
        )
        lock._next = line[0] if line else None
        if not (yield from lock._confirm(self.heartbeat_period)):
            return None  # handed to us, then taken over while we slept past its lease
        self._keep(lock)
        return lock


class LeaseLockClient(LeaseClientSteps, LockClient):
    """Lease locks with heartbeats: clock-free, fair, with fencing tokens and one request
    per uncontended acquire. A waiter takes the lock over once the holder's rvn stayed
    the same for its lease on the waiter's monotonic clock; waiters queue on the row.

    Parameters are those of :class:`~ddbtx.locks.LockClient`; the lease
    defaults to 10 s with a heartbeat every 3 s.

    Examples
    --------
    >>> lc = LeaseLockClient(client, "Locks", owner="host-a",
    ...                      lease_duration=10.0, heartbeat_period=3.0)   # doctest: +SKIP
    >>> with lc.acquire("Moe", wait=30.0) as lock:                        # doctest: +SKIP
    ...     update_customer("Moe", fence=lock.fencing_token)
    >>> lc.close()                                                        # doctest: +SKIP
    """

    _lock_type = LeaseLock

    def acquire(
        self, resource: str, *, wait: float = math.inf, data: bytes | None = None
    ) -> LeaseLock:
        """Acquire the lease on ``resource``, waiting in line up to ``wait`` seconds, then
        raise :class:`~ddbtx.errors.LockNotGrantedError`. ``wait=0`` tries once, and takes
        over a lock that an earlier ``wait=0`` call saw unchanged a lease or more ago.
        """
        return cast(LeaseLock, self._run(self._acquire(resource, wait, data)))


class _Acquire(LineWaiter):
    """One acquire call: its hold id (its grant's, and its entry's in line)."""

    lc: LeaseClientSteps

    def __init__(
        self, lc: LeaseClientSteps, resource: str, data: bytes | None, wait: float
    ) -> None:
        super().__init__(
            lc, resource, rows.key(resource, rows.LEASE_SK), rows.LEASE_SK, lc._clock() + wait
        )
        self.data = data
        self.wait = wait
        self.holder: Watch | None = None

    def grant(
        self, condition: str, values: dict[str, object], *, in_line: bool = False
    ) -> Step[LeaseLockSteps | rows.Item | None]:
        lock = yield from self.lc._grant(
            self.resource,
            self.hold,
            self.data,
            condition,
            values,
            entry=self.names if in_line else None,
        )
        if isinstance(lock, LeaseLockSteps):
            self.entered = False  # the grant removed our entry
        return lock

    def run(self) -> Step[LeaseLockSteps]:
        # Others were in line when this client last got the lock: queue at once.
        if not (self.pace.crowded and self.wait > 0):
            first = yield from self.grant(LEASE_GRANT_FREE, {":zero": 0})
            if isinstance(first, LeaseLockSteps):
                return first
            if self.wait == 0:
                return (yield from self.try_once(first))
        row = yield from self.enter(LEASE_ENTER, {":hold": self.hold})
        if row is None:  # a fresh id cannot meet an entry of its own
            raise LockError(f"could not queue for {self.resource!r}")
        return cast(LeaseLockSteps, (yield from self.wait_in_line(row)))

    def at_front(self, row: rows.Item, now: float) -> Step[HeldLockSteps | rows.Item | float]:
        """First in line: take the free lock, or take over a holder whose rvn we
        watched unchanged for its lease; else sleep at most until then."""
        hold, rvn, lease = _holder(row, self.lc.lease_duration)
        if hold is None:
            lock = yield from self.grant(LEASE_GRANT_FIRST, {}, in_line=True)
            return lock if lock is not None else (yield from self.read())
        fresh = observe(self.holder, ("lease", 0), rvn, lease, now)
        if fresh is self.holder and fresh.remaining(now) <= 0:
            lock = yield from self.grant(LEASE_TAKEOVER_FIRST, {":seen": rvn}, in_line=True)
            if isinstance(lock, LeaseLockSteps):
                logger.info("took over %r after %.3fs unchanged", lock, now - fresh.since)
                return lock
            self.holder = None
            return lock if lock is not None else (yield from self.read())
        self.holder = fresh
        return fresh.remaining(now)

    def counter(self, row: rows.Item, line: list[Entry]) -> int:
        return rows.get_int(row, rows.FENCE) or 0

    def handed(self, row: rows.Item) -> Step[HeldLockSteps | None]:
        """The holder's release handed us the lock (and removed our entry)."""
        if rows.get_str(row, rows.HOLD) != self.hold:
            return None
        self.entered = False
        lc = self.lc
        if self.data is not None:  # the handoff could not know it
            values: dict[str, object] = {":hold": self.hold, ":data": self.data}
            try:
                row = yield from self.update(
                    LEASE_DATA, "SET #data = :data", values, {}, ReturnValues="ALL_NEW"
                )
            except ConditionFailed:  # taken over before we noticed: go on waiting
                return None
        # Whoever watches the new holder started after our last entry write: count from it.
        return (yield from lc._held(self.resource, self.hold, row, self.renewed_at))

    def left_too_late(self) -> Step[None]:
        """Our wait ran out while a release handed us the lock: release it."""
        if rows.get_str((yield from self.read()), rows.HOLD) != self.hold:
            return
        with contextlib.suppress(ConditionFailed):
            yield from self.update(LEASE_RELEASE, _RELEASE, {":hold": self.hold}, {})
        logger.info("released %r: handed over after the wait ran out", self.resource)

    def not_granted(self) -> LockNotGrantedError:
        return LockNotGrantedError(
            f"lease on {self.resource!r} not granted to {self.lc.owner!r} within {self.wait}s"
        )

    def try_once(self, item: rows.Item | None) -> Step[LeaseLockSteps]:
        """``wait=0``: take over what an earlier ``wait=0`` call saw unchanged a lease ago
        (dead entries in line removed first); else remember what is there and give up."""
        lc = self.lc
        if not item:
            item = yield from self.read()
        hold, rvn, lease = _holder(item, lc.lease_duration)
        line = entries(item, lc.lease_duration)
        previous = lc._remember(self.resource, None)
        if hold is None and not line:
            raise self.not_granted()  # just released: somebody else was faster
        now = lc._clock()
        fresh = observe(previous, ("lease", 0), *_signs_of_life(rvn, lease, line), now)
        if fresh is not previous or fresh.remaining(now) > 0:
            lc._remember(self.resource, fresh)
            raise self.not_granted()
        for dead in line:
            if not (yield from self.skip(dead)):
                raise self.not_granted()  # one came back to life: look afresh next time
        if hold is None:
            lock = yield from self.grant(LEASE_GRANT_FREE, {":zero": 0})
        else:
            lock = yield from self.grant(LEASE_TAKEOVER, {":seen": rvn, ":zero": 0})
        if not isinstance(lock, LeaseLockSteps):
            raise self.not_granted()  # it moved after all: look afresh next time
        logger.info("took over %r after %.3fs unchanged", lock, now - fresh.since)
        return lock
