"""The conditional-write mutex: one row per resource, taken only while nobody holds
it, freed only by its owner, with a fencing counter that never restarts."""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from .._dynamo import call
from ..errors import ConditionFailed
from ._held import Clock, Watch, observe
from ._rows import (
    FENCE,
    MUTEX_SK,
    OWNER,
    RVN,
    Item,
    check_duration,
    check_owner,
    check_resource,
    expressions,
    get_int,
    get_str,
    key,
    new_id,
    was_retried,
)

logger = logging.getLogger(__name__)

# Acquire: nobody holds the row (new, or released), or it is the record this
# object watched unchanged for expire_after on its own monotonic clock (a holder
# that never released), or it is this very acquire's own write, replayed after
# a lost response, or it is a row of the earlier layout (no counter) whose
# wall-clock TTL has passed.
MUTEX_ACQUIRE = (
    "attribute_not_exists(#owner) OR #rvn = :seen OR #rvn = :rvn"
    " OR (attribute_not_exists(#fence) AND #ttl < :now)"
)
_ACQUIRE = "SET #owner = :owner, #rvn = :rvn, #at = :now{exp} ADD #fence :one REMOVE #ttl{no_exp}"
# Release: free the row only while this owner holds it, never someone else's;
# the fencing counter stays in the row.
MUTEX_RELEASE = "#owner = :owner"
_RELEASE = "REMOVE #owner, #rvn, #at, #exp"


class Mutex:
    """A non-blocking mutual-exclusion lock: ``acquire`` is one conditional write.

    Unlike the naive design (read, then write) this never lets two owners in,
    and unlike a plain conditional delete, ``release`` never frees another
    owner's lock. The owner name is the identity: two ``Mutex`` objects with the
    same owner may release each other's locks. Each grant increments a fencing
    counter kept in the row, which is never deleted, so tokens never restart.

    Parameters
    ----------
    client
        A boto3 DynamoDB client.
    table : str
        A table made by :func:`~ddbtx.locks.create_lock_table`.
    owner : str
        Who holds the locks this object acquires.
    expire_after : float, optional
        Seconds after which a lock nobody released may be taken. Judged without
        comparing clocks: an ``acquire`` that finds the lock held remembers the
        row's record version and when it saw it (this object's monotonic
        clock); a later ``acquire`` takes the lock once that record has stayed
        unchanged for ``expire_after``. The holder's own view is
        :meth:`is_held`. ``None`` (default): held until released.
    clock, wall_clock : callable, optional
        Monotonic seconds (expiry) and epoch seconds (the display-only
        acquire time).

    Examples
    --------
    >>> m = Mutex(client, "Locks", owner="worker-1")      # doctest: +SKIP
    >>> token = m.acquire_token("invoice-42")             # doctest: +SKIP
    >>> if token is not None:                             # doctest: +SKIP
    ...     try:
    ...         bill("invoice-42", fence=token)
    ...     finally:
    ...         m.release("invoice-42")
    """

    #: Resources whose held record an object keeps watching (the oldest go first).
    _seen_limit = 10_000

    def __init__(
        self,
        client: Any,
        table: str,
        *,
        owner: str,
        expire_after: float | None = None,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
    ) -> None:
        self.client = client
        self.table = table
        self.owner = check_owner(owner)
        self._expire_after = (
            None if expire_after is None else check_duration(expire_after, "expire_after")
        )
        self._clock = clock
        self._wall = wall_clock
        self._acquired: dict[str, tuple[float, int]] = {}  # resource -> (sent, token)
        self._seen: dict[str, Watch] = {}
        self._mutex = threading.Lock()

    def acquire(self, resource: str) -> bool:
        """Take the lock if it is free (or expired): exactly one conditional write.

        Returns ``False`` at once if anyone (this owner included) holds it.
        """
        return self.acquire_token(resource) is not None

    def acquire_token(self, resource: str) -> int | None:
        """Like :meth:`acquire`, returning the grant's fencing token (``None``: not
        granted). Pass the token to the writes the lock protects."""
        check_resource(resource)
        rvn = new_id()
        sent = self._clock()
        now = self._wall()
        with self._mutex:
            watched = self._seen.get(resource)
        expired = (
            watched is not None
            and self._expire_after is not None
            and sent - watched.since >= self._expire_after
        )
        # A fresh id as ":seen" matches no record: only free rows (or our replay) pass.
        seen = watched.rvn if expired and watched is not None else new_id()
        try:
            item = call(
                self.client,
                "update_item",
                TableName=self.table,
                Key=key(resource, MUTEX_SK),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **expressions(
                    {
                        ":owner": self.owner,
                        ":rvn": rvn,
                        ":seen": seen,
                        ":now": now,
                        ":one": 1,
                        ":exp": now + (self._expire_after or 0.0),
                    },
                    ConditionExpression=MUTEX_ACQUIRE,
                    UpdateExpression=_ACQUIRE.format(
                        exp="" if self._expire_after is None else ", #exp = :exp",
                        no_exp=", #exp" if self._expire_after is None else "",
                    ),
                ),
            )["Attributes"]
        except ConditionFailed as exc:
            self._watch(resource, exc)
            return None
        token = get_int(item, FENCE) or 0
        with self._mutex:
            self._seen.pop(resource, None)
            self._acquired[resource] = (sent, token)
        if expired:
            logger.info("took over mutex %r after %ss unreleased", resource, self._expire_after)
        return token

    def _watch(self, resource: str, exc: ConditionFailed) -> None:
        """Remember the record that refused us, if we may ever take it over."""
        if self._expire_after is None:
            return
        response = getattr(exc.__cause__, "response", None)
        item: Item | None = response.get("Item") if isinstance(response, dict) else None
        if not item:  # dynalite does not return the row with the failure: read it
            item = call(
                self.client, "get_item", TableName=self.table, Key=key(resource, MUTEX_SK),
                ConsistentRead=True,
            ).get("Item")  # fmt: skip
        rvn = get_str(item or {}, RVN)
        with self._mutex:
            if rvn is None or get_str(item or {}, OWNER) is None:
                self._seen.pop(resource, None)  # freed meanwhile: nothing to watch
                return
            previous = self._seen.pop(resource, None)
            self._seen[resource] = observe(
                previous, ("mutex", 0), rvn, self._expire_after, self._clock()
            )
            while len(self._seen) > self._seen_limit:
                self._seen.pop(next(iter(self._seen)))

    def is_held(self, resource: str) -> bool:
        """Whether this object holds ``resource`` and, with ``expire_after``, its
        expiry (counted from the acquire's send time) has not come: past it,
        another object may take the lock, so stop writing."""
        with self._mutex:
            acquired = self._acquired.get(resource)
        if acquired is None:
            return False
        limit = math.inf if self._expire_after is None else self._expire_after
        return self._clock() - acquired[0] < limit

    def fencing_token(self, resource: str) -> int | None:
        """The token of this object's grant on ``resource``, if it holds one."""
        with self._mutex:
            acquired = self._acquired.get(resource)
        return None if acquired is None else acquired[1]

    def release(self, resource: str) -> bool:
        """Free the lock if this owner holds it: one conditional write.

        Returns ``False`` (and changes nothing) if this owner does not hold it.
        """
        check_resource(resource)
        ours = self.is_held(resource)
        with self._mutex:
            self._acquired.pop(resource, None)
        try:
            call(
                self.client,
                "update_item",
                TableName=self.table,
                Key=key(resource, MUTEX_SK),
                **expressions(
                    {":owner": self.owner},
                    ConditionExpression=MUTEX_RELEASE,
                    UpdateExpression=_RELEASE,
                ),
            )
        except ConditionFailed as exc:
            # A retried release that finds the row free or someone else's: if this
            # object acquired it and it had not expired, the row could only have
            # been freed by our own first attempt (nobody else frees or takes an
            # unexpired row), so the release happened. Without a retry the
            # failure is the truth.
            return ours and was_retried(exc)
        return True
