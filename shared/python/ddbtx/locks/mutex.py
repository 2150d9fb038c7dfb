"""The conditional-put mutex: one row, written only if absent, deleted only by its owner."""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from .. import schema
from .._dynamo import call
from ..errors import ConditionFailed
from ._held import Clock
from ._rows import (
    ACQUIRED_AT,
    MUTEX_SK,
    OWNER,
    RVN,
    av,
    check_duration,
    check_owner,
    check_resource,
    expressions,
    key,
    new_id,
    ttl_at,
    was_retried,
)

logger = logging.getLogger(__name__)

# Acquire: the row is absent, or its optional expiry has passed (an expired row
# DynamoDB TTL has not deleted yet counts as absent), or it is this very
# acquire's own row, written by an attempt whose response was lost.
MUTEX_ACQUIRE = "attribute_not_exists(#pk) OR #ttl < :now OR #rvn = :rvn"
# Release: delete only a row this owner holds, never someone else's.
MUTEX_RELEASE = "#owner = :owner"


class Mutex:
    """A non-blocking mutual-exclusion lock: ``acquire`` is one conditional put.

    Unlike the naive design (read, then write) this never lets two owners in,
    and unlike a plain conditional delete, ``release`` never removes another
    owner's lock. The owner name is the identity: two ``Mutex`` objects with the
    same owner may release each other's locks.

    Parameters
    ----------
    client
        A boto3 DynamoDB client.
    table : str
        A table made by :func:`~ddbtx.locks.create_lock_table`.
    owner : str
        Who holds the locks this object acquires.
    expire_after : float, optional
        Seconds after which an acquired lock counts as free, judged by the
        acquirer's wall clock against the row's TTL attribute (so the row is
        also garbage collected). ``None`` (default): held until released.
        Unlike the lease lock this trusts clocks, so keep it far above any
        plausible work time and clock skew.
    wall_clock : callable, optional
        Epoch seconds, for the expiry only.

    Examples
    --------
    >>> m = Mutex(client, "Locks", owner="worker-1")      # doctest: +SKIP
    >>> if m.acquire("invoice-42"):                       # doctest: +SKIP
    ...     try:
    ...         bill("invoice-42")
    ...     finally:
    ...         m.release("invoice-42")
    """

    def __init__(
        self,
        client: Any,
        table: str,
        *,
        owner: str,
        expire_after: float | None = None,
        wall_clock: Clock = time.time,
    ) -> None:
        self.client = client
        self.table = table
        self.owner = check_owner(owner)
        self._expire_after = (
            None if expire_after is None else check_duration(expire_after, "expire_after")
        )
        self._wall = wall_clock
        self._acquired: dict[str, float] = {}  # resource -> expiry (math.inf: none)
        self._mutex = threading.Lock()

    def acquire(self, resource: str) -> bool:
        """Take the lock if it is free: exactly one conditional write.

        Returns ``False`` at once if anyone (this owner included) holds it.
        """
        check_resource(resource)
        rvn = new_id()
        now = self._wall()
        item = {
            **key(resource, MUTEX_SK),
            OWNER: av(self.owner),
            RVN: av(rvn),
            ACQUIRED_AT: av(now),
        }
        if self._expire_after is not None:
            item[schema.LOCK_TTL] = av(ttl_at(now + self._expire_after))
        try:
            call(
                self.client,
                "put_item",
                TableName=self.table,
                Item=item,
                **expressions({":now": now, ":rvn": rvn}, ConditionExpression=MUTEX_ACQUIRE),
            )
        except ConditionFailed:
            return False
        with self._mutex:
            self._acquired[resource] = (
                math.inf if self._expire_after is None else now + self._expire_after
            )
        return True

    def release(self, resource: str) -> bool:
        """Delete the lock if this owner holds it: one conditional delete.

        Returns ``False`` (and deletes nothing) if this owner does not hold it.
        """
        check_resource(resource)
        started = self._wall()
        with self._mutex:
            ours = started < self._acquired.pop(resource, -math.inf)
        try:
            call(
                self.client,
                "delete_item",
                TableName=self.table,
                Key=key(resource, MUTEX_SK),
                **expressions({":owner": self.owner}, ConditionExpression=MUTEX_RELEASE),
            )
        except ConditionFailed as exc:
            # A retried delete that finds the row gone or someone else's: if this
            # object acquired it and it had not expired, the row could only have
            # left through our own first attempt (nobody else deletes or replaces
            # an unexpired row), so the release happened. Without a retry the
            # failure is the truth.
            return ours and was_retried(exc)
        return True
