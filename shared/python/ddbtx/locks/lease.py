"""The lease lock: heartbeats change a record version number (rvn); a waiter takes
the lock over once the rvn has stayed unchanged for a full lease on the waiter's
own monotonic clock, so no two clocks are ever compared."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from .._dynamo import call
from ..errors import ConditionFailed, LockNotGrantedError
from ._held import Backoff, HeldLock, LockClient, Watch, observe
from ._rows import (
    DATA,
    FENCE,
    HOLD,
    LEASE,
    LEASE_SK,
    RVN,
    Item,
    check_resource,
    check_wait,
    expressions,
    get_bytes,
    get_int,
    get_num,
    get_str,
    key,
    new_id,
)

logger = logging.getLogger(__name__)

# Grant a row nobody holds (new, or released), or replay our own grant whose
# response was lost.
LEASE_GRANT_FREE = "attribute_not_exists(#hold) OR #hold = :hold"
# Take over a holder whose rvn stayed unchanged for its whole lease (or replay
# our own takeover).
LEASE_TAKEOVER = "#rvn = :seen OR #hold = :hold"
# Heartbeat: only while this grant is the one on the row; a takeover replaces
# #hold, and a replayed heartbeat writes the same values again.
LEASE_RENEW = "#hold = :hold"
# Release this grant; "#rel = :hold" accepts the replay of our own applied release.
LEASE_RELEASE = "#hold = :hold OR #rel = :hold"

# A grant also clears the last release's mark: a release replayed after this
# grant (its first attempt applied, its answer lost) must then fail its condition
# instead of removing this grant.
_GRANT = (
    "SET #owner = :owner, #hold = :hold, #rvn = :hold, #lease = :lease, #exp = :exp{data}"
    " ADD #fence :one REMOVE #rel{no_data}"
)
_RENEW = "SET #rvn = :rvn, #exp = :exp"
_RELEASE = "SET #rel = :hold REMOVE #hold, #owner, #rvn, #exp, #data"


@dataclass(frozen=True)
class _Row:
    hold: str | None
    rvn: str
    lease: float


class LeaseLock(HeldLock):
    """A granted lease lock (see :class:`~ddbtx.locks.HeldLock`)."""

    _renew_write = (LEASE_RENEW, _RENEW)
    _release_write = (LEASE_RELEASE, _RELEASE)


class LeaseLockClient(LockClient):
    """Lease locks with heartbeats and record version numbers, like AWS's Java lock
    client, but clock-free, with fencing tokens, and one request per uncontended
    acquire.

    A holder's daemon thread rewrites the row's rvn every ``heartbeat_period``.
    A waiter reads the row and takes it over only after the rvn has stayed the
    same for the holder's full lease (stored in the row) as measured by the
    waiter's own monotonic clock, so a holder whose wall clock is off neither
    loses its lock nor blocks a takeover once dead. Each grant increments a
    fencing counter kept in the lock row itself, which is never deleted and
    never carries a TTL, so tokens never restart.

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

    _default_lease = 10.0
    _default_heartbeat = 3.0
    _kind = "lease"

    def acquire(
        self, resource: str, *, wait: float = math.inf, data: bytes | None = None
    ) -> LeaseLock:
        """Acquire the lease on ``resource``.

        An uncontended acquire is one request. ``wait=0`` tries once;
        ``wait=math.inf`` waits until granted; otherwise waits up to ``wait``
        seconds, then raises :class:`~ddbtx.errors.LockNotGrantedError`.
        A dead holder's lock is taken over one lease after the waiter first
        saw its last heartbeat.
        """
        check_resource(resource)
        wait = check_wait(wait)
        if data is not None and not isinstance(data, bytes):
            raise ValueError(f"data must be bytes or None, not {type(data).__name__}")
        self._check_open()
        hold = new_id()
        deadline = self._clock() + wait
        lock = self._grant(resource, hold, data, LEASE_GRANT_FREE, {})
        if lock is not None:
            return lock
        backoff = Backoff(*self._polls)
        watch: Watch | None = None
        while wait > 0:
            row = self._read(resource)
            if row is None or row.hold is None:
                lock = self._grant(resource, hold, data, LEASE_GRANT_FREE, {})
                if lock is not None:
                    return lock
                continue  # someone else was faster; look at their grant
            now = self._clock()
            fresh = observe(watch, ("lease", 0), row.rvn, row.lease, now)
            if fresh is watch and fresh.remaining(now) <= 0:
                lock = self._grant(resource, hold, data, LEASE_TAKEOVER, {":seen": row.rvn})
                if lock is not None:
                    return lock
                watch = None
                continue
            watch = fresh
            left = deadline - now
            if left <= 0:
                break
            self._sleep(max(0.0, min(backoff.next(), fresh.remaining(now), left)))
        raise LockNotGrantedError(
            f"lease on {resource!r} not granted to {self.owner!r} within {wait}s"
        )

    # -- requests ----------------------------------------------------------------

    def _read(self, resource: str) -> _Row | None:
        item: Item | None = call(
            self.client,
            "get_item",
            TableName=self.table,
            Key=key(resource, LEASE_SK),
            ConsistentRead=True,
        ).get("Item")
        if item is None:
            return None
        return _Row(
            hold=get_str(item, HOLD),
            rvn=get_str(item, RVN) or "",
            lease=get_num(item, LEASE) or self.lease_duration,
        )

    def _grant(
        self,
        resource: str,
        hold: str,
        data: bytes | None,
        condition: str,
        extra: dict[str, object],
    ) -> LeaseLock | None:
        values: dict[str, object] = {
            ":owner": self.owner,
            ":hold": hold,
            ":lease": self.lease_duration,
            ":exp": self._wall() + self.lease_duration,
            ":one": 1,
            **extra,
        }
        if data is not None:
            values[":data"] = data
        with_data = data is not None
        update = _GRANT.format(
            data=", #data = :data" if with_data else "", no_data="" if with_data else ", #data"
        )
        sent = self._clock()
        try:
            item = call(
                self.client,
                "update_item",
                TableName=self.table,
                Key=key(resource, LEASE_SK),
                ReturnValues="ALL_NEW",
                **expressions(values, ConditionExpression=condition, UpdateExpression=update),
            )["Attributes"]
        except ConditionFailed:
            return None
        lock = LeaseLock(
            self,
            hold=hold,
            row_key=key(resource, LEASE_SK),
            resource=resource,
            fencing_token=get_int(item, FENCE) or 0,
            confirmed_at=sent,
            data=get_bytes(item, DATA),
        )
        self._keep(lock)
        return lock
