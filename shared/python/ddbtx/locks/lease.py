"""The lease lock: heartbeats change a record version number (rvn); a waiter takes
the lock over once the rvn has stayed unchanged for a full lease on the waiter's
own monotonic clock, so no two clocks are ever compared."""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from typing import Any

from .._dynamo import call
from ..errors import ConditionFailed, LockNotGrantedError
from ._held import HeldLock, LockClient, Watch, observe
from ._pace import Backoff
from ._rows import (
    CLAIM,
    CLAIM_RVN,
    DATA,
    FENCE,
    HOLD,
    LEASE,
    LEASE_SK,
    RVN,
    Item,
    check_duration,
    check_resource,
    check_wait,
    expressions,
    get_bytes,
    get_int,
    get_num,
    get_str,
    key,
    new_id,
    was_retried,
)

logger = logging.getLogger(__name__)

# Grant a row nobody holds (new, or released) and no other waiter has claimed,
# or replay our own grant whose response was lost.
LEASE_GRANT_FREE = (
    "(attribute_not_exists(#hold) AND (attribute_not_exists(#claim) OR #claim = :hold))"
    " OR #hold = :hold"
)
# Take over a holder whose rvn stayed unchanged for its whole lease, unless
# another waiter's claim stands (or replay our own takeover).
LEASE_TAKEOVER = (
    "(#rvn = :seen AND (attribute_not_exists(#claim) OR #claim = :hold)) OR #hold = :hold"
)
# Claim the next free grant: no claim stands, or the standing one was not renewed
# for its whole lease (its claimer is gone), or replay of our own claim.
LEASE_CLAIM = "attribute_not_exists(#claim) OR #claim = :hold OR #crvn = :seen"
# Renew or drop our claim: only while it is still ours.
LEASE_CLAIMED = "#claim = :hold"
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
    " ADD #fence :one REMOVE #rel{no_data}{claim}"
)
_CLAIM = "SET #claim = :hold, #crvn = :crvn"
_UNCLAIM = "REMOVE #claim, #crvn"
_RENEW = "SET #rvn = :rvn, #exp = :exp"
_RELEASE = "SET #rel = :hold REMOVE #hold, #owner, #rvn, #exp, #data"


@dataclass(frozen=True)
class _Row:
    hold: str | None
    rvn: str
    lease: float
    claim: str | None = None
    crvn: str = ""


def _row(item: Item, default_lease: float) -> _Row:
    return _Row(
        hold=get_str(item, HOLD),
        rvn=get_str(item, RVN) or "",
        lease=get_num(item, LEASE) or default_lease,
        claim=get_str(item, CLAIM),
        crvn=get_str(item, CLAIM_RVN) or "",
    )


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
    defaults to 10 s with a heartbeat every 3 s. Besides:

    claim_after : float, optional
        Seconds a waiter waits before it claims the next free grant (default:
        ``max_poll``, so 1 s). Until that grant, a free lock is granted to the
        claimer only; a claimer that stops renewing its claim (every heartbeat
        period) loses it after a lease.

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
    #: Resources whose ``wait=0`` view a client keeps (the oldest go first).
    _seen_limit = 10_000

    def __init__(
        self, client: Any, table: str, *, claim_after: float | None = None, **options: Any
    ) -> None:
        super().__init__(client, table, **options)
        self.claim_after = (
            self._polls[1] if claim_after is None else check_duration(claim_after, "claim_after")
        )
        self._seen: dict[str, Watch] = {}
        self._seen_guard = threading.Lock()

    def acquire(
        self, resource: str, *, wait: float = math.inf, data: bytes | None = None
    ) -> LeaseLock:
        """Acquire the lease on ``resource``.

        An uncontended acquire is one request. ``wait=math.inf`` waits until
        granted; otherwise waits up to ``wait`` seconds, then raises
        :class:`~ddbtx.errors.LockNotGrantedError`. A dead holder's lock is
        taken over one lease after the waiter first saw its last heartbeat.

        A waiter that has waited ``claim_after`` seconds claims the next free
        grant (one write), which every other acquirer then respects, so no
        waiter starves behind faster ones.

        ``wait=0`` tries once and remembers what it saw of a held lock (its
        record version, and when on this client's monotonic clock), so that a
        later ``wait=0`` call a lease or more later takes the lock over if the
        record has not changed meanwhile: a function run every minute can take
        over a dead holder's lock without ever sleeping through a lease. A new
        client (a cold start) has seen nothing, so its first call only looks.
        """
        check_resource(resource)
        wait = check_wait(wait)
        if data is not None and not isinstance(data, bytes):
            raise ValueError(f"data must be bytes or None, not {type(data).__name__}")
        self._check_open()
        return _Acquire(self, resource, data, wait).run()

    def _remember(self, resource: str, watch: Watch | None) -> Watch | None:
        """Store (or with ``None`` forget) what a ``wait=0`` call saw; the previous view."""
        with self._seen_guard:
            previous = self._seen.pop(resource, None)
            if watch is not None:
                self._seen[resource] = watch
                while len(self._seen) > self._seen_limit:  # oldest first
                    self._seen.pop(next(iter(self._seen)))
            return previous

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
        return _row(item, self.lease_duration)

    def _grant(
        self,
        resource: str,
        hold: str,
        data: bytes | None,
        condition: str,
        extra: dict[str, object],
        *,
        claimed: bool = False,
    ) -> LeaseLock | _Row | None:
        """The lock, or when the condition failed the row as it was (where DynamoDB
        returns it with the failure: AWS and moto, not dynalite), else ``None``."""
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
            data=", #data = :data" if with_data else "",
            no_data="" if with_data else ", #data",
            claim=", #claim, #crvn" if claimed else "",
        )
        sent = self._clock()
        try:
            item = call(
                self.client,
                "update_item",
                TableName=self.table,
                Key=key(resource, LEASE_SK),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **expressions(values, ConditionExpression=condition, UpdateExpression=update),
            )["Attributes"]
        except ConditionFailed as exc:
            response = getattr(exc.__cause__, "response", None)
            old = response.get("Item") if isinstance(response, dict) else None
            if old and not was_retried(exc):  # a retry's answer may show our own grant
                return _row(old, self.lease_duration)
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


class _Acquire:
    """One acquire call: its hold id, its claim, and what it watches."""

    def __init__(self, lc: LeaseLockClient, resource: str, data: bytes | None, wait: float) -> None:
        self.lc = lc
        self.resource = resource
        self.data = data
        self.wait = wait
        self.hold = new_id()
        self.started = lc._clock()
        self.claimed = False
        self.claim_renewed = 0.0

    def grant(self, condition: str, extra: dict[str, object]) -> LeaseLock | _Row | None:
        return self.lc._grant(
            self.resource, self.hold, self.data, condition, extra, claimed=self.claimed
        )

    def run(self) -> LeaseLock:
        first = self.grant(LEASE_GRANT_FREE, {})
        if isinstance(first, LeaseLock):
            return first
        try:
            if self.wait == 0:
                return self.try_once(first)
            return self.wait_for_it(first)
        except BaseException:
            self.unclaim_quietly()
            raise

    def denied(self) -> LockNotGrantedError:
        return LockNotGrantedError(
            f"lease on {self.resource!r} not granted to {self.lc.owner!r} within {self.wait}s"
        )

    def try_once(self, row: _Row | None) -> LeaseLock:
        """``wait=0``: take over what an earlier ``wait=0`` call of this client saw
        unchanged a lease ago; else remember what is there now and give up."""
        lc = self.lc
        if row is None:
            row = lc._read(self.resource)
        if row is None or row.hold is None:
            lc._remember(self.resource, None)
            raise self.denied()  # free but claimed by a waiter, or just released
        now = lc._clock()
        previous = lc._remember(self.resource, None)
        fresh = observe(previous, ("lease", 0), row.rvn, row.lease, now)
        if fresh is previous and fresh.remaining(now) <= 0:
            lock = self.grant(LEASE_TAKEOVER, {":seen": row.rvn})
            if isinstance(lock, LeaseLock):
                logger.info("took over %r after %.3fs unchanged", lock, now - fresh.since)
                return lock
            raise self.denied()  # it moved after all (or a claim stands): look afresh next time
        lc._remember(self.resource, fresh)
        raise self.denied()

    def wait_for_it(self, row: _Row | None) -> LeaseLock:
        lc = self.lc
        deadline = self.started + self.wait
        backoff = Backoff(*lc._polls)
        holder: Watch | None = None
        claim: Watch | None = None
        while True:
            if row is None:
                row = lc._read(self.resource)
            now = lc._clock()
            if self.claimed and row is not None and row.claim != self.hold:
                self.claimed = False  # judged gone while alive: claim again later
            if row is None or row.hold is None:
                if row is None or row.claim in (None, self.hold):
                    lock = self.grant(LEASE_GRANT_FREE, {})
                    if isinstance(lock, LeaseLock):
                        return lock
                    row = lock
                    continue  # someone else was faster; look at their grant
            else:
                fresh = observe(holder, ("lease", 0), row.rvn, row.lease, now)
                if fresh is holder and fresh.remaining(now) <= 0:
                    lock = self.grant(LEASE_TAKEOVER, {":seen": row.rvn})
                    if isinstance(lock, LeaseLock):
                        return lock
                    holder, row = None, lock
                    continue
                holder = fresh
            if row is not None and row.claim not in (None, self.hold):
                claim = observe(claim, ("claim", 0), row.crvn, row.lease, now)
            else:
                claim = None
            if self.claimed and now - self.claim_renewed >= lc.heartbeat_period:
                self.renew_claim()
            elif not self.claimed and now - self.started >= lc.claim_after:
                dead = claim is not None and claim.remaining(now) <= 0
                if claim is None or dead:
                    self.make_claim(claim.rvn if dead and claim else "")
                    backoff.reset()
            left = deadline - now
            if left <= 0:
                self.unclaim_quietly()
                raise self.denied()
            limits = [backoff.next(), left]
            limits += [w.remaining(now) for w in (holder, claim) if w is not None]
            if self.claimed:
                limits.append(self.claim_renewed + lc.heartbeat_period - now)
            lc._sleep(max(0.0, min(limits)))
            row = None

    # -- the claim -------------------------------------------------------------------

    def _claim_write(self, condition: str, update: str, values: dict[str, object]) -> bool:
        lc = self.lc
        try:
            call(
                lc.client,
                "update_item",
                TableName=lc.table,
                Key=key(self.resource, LEASE_SK),
                **expressions(
                    {":hold": self.hold, **values},
                    ConditionExpression=condition,
                    UpdateExpression=update,
                ),
            )
        except ConditionFailed:
            return False
        return True

    def make_claim(self, seen: str) -> None:
        sent = self.lc._clock()
        # ":seen" never matches a live claim's crvn unless that claim went unrenewed
        # for a lease; with no claim there it is a fresh id that matches nothing.
        values: dict[str, object] = {":crvn": new_id(), ":seen": seen or new_id()}
        if self._claim_write(LEASE_CLAIM, _CLAIM, values):
            self.claimed, self.claim_renewed = True, sent

    def renew_claim(self) -> None:
        sent = self.lc._clock()
        if self._claim_write(LEASE_CLAIMED, "SET #crvn = :crvn", {":crvn": new_id()}):
            self.claim_renewed = sent
        else:
            self.claimed = False

    def unclaim_quietly(self) -> None:
        if not self.claimed:
            return
        self.claimed = False
        try:
            self._claim_write(LEASE_CLAIMED, _UNCLAIM, {})
        except Exception:  # the claim lapses after a lease without renewals
            logger.warning("could not drop the claim on %r", self.resource, exc_info=True)
