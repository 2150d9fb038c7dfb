"""The conditional-write mutex as steps, for :class:`ddbtx.locks.Mutex` and its aio twin."""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from .._base.effects import Step
from ..errors import ConditionFailed
from . import _rows as rows
from ._held import Clock, Watch, observe

logger = logging.getLogger(__name__)

# Acquire: nobody holds the row, or it is the record this object watched unchanged for
# expire_after (a holder that never released), or our own write replayed after a lost
# response, or a row of the earlier layout (no counter) whose TTL has passed.
MUTEX_ACQUIRE = (
    "attribute_not_exists(#owner) OR #rvn = :seen OR #rvn = :rvn"
    " OR (attribute_not_exists(#fence) AND #ttl < :now)"
)
_ACQUIRE = "SET #owner = :owner, #rvn = :rvn, #at = :now{exp} ADD #fence :one REMOVE #ttl{no_exp}"
# Release: free the row only while this owner holds it (the fencing counter stays).
MUTEX_RELEASE = "#owner = :owner"
_RELEASE = "REMOVE #owner, #rvn, #at, #exp"


class MutexSteps:
    """A mutex's settings, grants and steps (parameters: :class:`ddbtx.locks.Mutex`'s)."""

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
        self.owner = rows.check_owner(owner)
        self._expire_after = (
            None if expire_after is None else rows.check_duration(expire_after, "expire_after")
        )
        self._clock = clock
        self._wall = wall_clock
        self._acquired: dict[str, tuple[float, int]] = {}  # resource -> (sent, token)
        self._seen: dict[str, Watch] = {}
        # Guards the two dicts between yields only, for threads or tasks sharing the object.
        self._mutex = threading.Lock()

    def is_held(self, resource: str) -> bool:
        """Whether this object holds ``resource`` and its ``expire_after`` has not passed."""
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

    def _acquire_token(self, resource: str) -> Step[int | None]:
        rows.check_resource(resource)
        sent = self._clock()
        now = self._wall()
        expired_rvn = self._expired(resource, sent)
        values = {
            ":owner": self.owner,
            ":rvn": rows.new_id(),
            # A fresh id as ":seen" matches no record: only free rows (or our replay) pass.
            ":seen": expired_rvn if expired_rvn is not None else rows.new_id(),
            ":now": now,
            ":one": 1,
            ":exp": now + (self._expire_after or 0.0),
        }
        update = _ACQUIRE.format(
            exp="" if self._expire_after is None else ", #exp = :exp",
            no_exp=", #exp" if self._expire_after is None else "",
        )
        try:
            row = yield from rows.update_row(
                self.table,
                rows.key(resource, rows.MUTEX_SK),
                MUTEX_ACQUIRE,
                update,
                values,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ConditionFailed as exc:
            yield from self._watch(resource, exc)
            return None
        token = rows.get_int(row, rows.FENCE) or 0
        with self._mutex:
            self._seen.pop(resource, None)
            self._acquired[resource] = (sent, token)
        if expired_rvn is not None:
            logger.info("took over mutex %r after %ss unreleased", resource, self._expire_after)
        return token

    def _expired(self, resource: str, now: float) -> str | None:
        """The rvn of a record we watched unchanged for ``expire_after`` until ``now``."""
        with self._mutex:
            watched = self._seen.get(resource)
        if watched is None or self._expire_after is None:
            return None
        return watched.rvn if now - watched.since >= self._expire_after else None

    def _watch(self, resource: str, exc: ConditionFailed) -> Step[None]:
        """Remember the record that refused us, if we may ever take it over."""
        if self._expire_after is None:
            return
        item = rows.returned_row(exc)
        if not item:  # dynalite does not return the row with the failure: read it
            item = yield from rows.read_row(self.table, rows.key(resource, rows.MUTEX_SK))
        rvn = rows.get_str(item, rows.RVN)
        with self._mutex:
            if rvn is None or rows.get_str(item, rows.OWNER) is None:
                self._seen.pop(resource, None)  # freed meanwhile: nothing to watch
                return
            self._seen[resource] = observe(
                self._seen.pop(resource, None), ("mutex", 0), rvn, self._expire_after, self._clock()
            )
            while len(self._seen) > self._seen_limit:
                self._seen.pop(next(iter(self._seen)))

    def _release(self, resource: str) -> Step[bool]:
        rows.check_resource(resource)
        ours = self.is_held(resource)
        with self._mutex:
            self._acquired.pop(resource, None)
        try:
            yield from rows.update_row(
                self.table,
                rows.key(resource, rows.MUTEX_SK),
                MUTEX_RELEASE,
                _RELEASE,
                {":owner": self.owner},
            )
        except ConditionFailed as exc:
            # Only our own first attempt can have freed a row we held unexpired.
            return ours and rows.was_retried(exc)
        return True
