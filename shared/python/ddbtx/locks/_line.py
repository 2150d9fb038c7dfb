"""The line of waiters on one lock row: entries ``t_<id>`` (ticket) and ``w_<id>``."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, TypeVar

from .._base.effects import Step, pause
from ..errors import ConditionFailed, LockError, LockNotGrantedError, ValidationFailed
from ._held import HeldLockSteps, LockClientSteps, Watch, observe
from ._pace import Polls
from ._rows import (
    ENTRY,
    ENTRY_TICKET,
    EXPIRES,
    GC_MARGIN,
    HOLD,
    LEASE,
    OWNER,
    RVN,
    Item,
    get_int,
    get_num,
    get_str,
    new_id,
    read_row,
    update_row,
    was_retried,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Enter the line: take ticket next+1 and write our entry at once (no ticket without its
# entry); a replay of our own applied entry fails here instead of taking a second ticket.
LINE_ENTER = "attribute_not_exists(#t)"
_ENTER = (
    "SET #next = if_not_exists(#next, :zero) + :one, #t = if_not_exists(#next, :zero) + :one,"
    " #w = :entry ADD #n :one"
)
# Heartbeat of an entry: only while it is still there (one judged dead must not return).
LINE_RENEW = "#t = :ticket"
RENEW = "SET #w.#rvn = :rvn, #w.#exp = :exp"
# Leave the line (or, on a FIFO head, release): remove our own entry, still ours.
LINE_LEAVE = "#t = :ticket"
LEAVE = "REMOVE #t, #w ADD #n :minus"
# Skip a dead entry directly ahead: only if its rvn is still the one we watched for a lease.
LINE_SKIP = "#w.#rvn = :seen"


def entry_names(hold: str) -> dict[str, str]:
    return {"#t": f"{ENTRY_TICKET}{hold}", "#w": f"{ENTRY}{hold}"}


@dataclass(frozen=True)
class Entry:
    """A waiter in a line (or, on a FIFO head, the holder: the lowest ticket)."""

    hold: str
    ticket: int
    owner: str | None
    rvn: str
    lease: float
    expires: float | None


def entries(item: Item, default_lease: float = 0.0) -> list[Entry]:
    found = []
    for name in item:
        ticket = get_int(item, name) if name.startswith(ENTRY_TICKET) else None
        if ticket is None:
            continue
        hold = name[len(ENTRY_TICKET) :]
        body = item.get(f"{ENTRY}{hold}", {}).get("M", {})
        rvn, lease = get_str(body, RVN) or "", get_num(body, LEASE) or default_lease
        found.append(Entry(hold, ticket, get_str(body, OWNER), rvn, lease, get_num(body, EXPIRES)))
    found.sort(key=lambda e: e.ticket)
    return found


class LineWaiter:
    """One acquire call's place in the line on one row."""

    def __init__(
        self, lc: LockClientSteps, resource: str, row_key: Item, pace_key: str, deadline: float
    ) -> None:
        self.lc = lc
        self.resource = resource
        self.row_key = row_key
        self.pace = lc._pace(resource, pace_key)
        self.deadline = deadline
        self.hold = new_id()
        self.names = entry_names(self.hold)
        self.ticket = 0
        self.entered = False
        self.renewed_at = 0.0  # send time of our last rvn write (entry or renewal)

    def at_front(self, row: Item, now: float) -> Step[HeldLockSteps | Item | float]:
        """First in line: the lock, the row to look at again, or how long to sleep."""
        raise NotImplementedError

    def counter(self, row: Item, line: list[Entry]) -> int:
        raise NotImplementedError

    def not_granted(self) -> LockNotGrantedError:
        raise NotImplementedError

    def leaving(self, step: Step[T]) -> Step[T]:
        """Run ``step``; if it fails, remove our entry (if any) and raise its error."""
        try:
            return (yield from step)
        except BaseException as exc:
            if isinstance(exc, GeneratorExit):  # a step closed early sends nothing
                raise
            try:
                yield from self.leave()
            except Exception:  # the one behind skips it after a lease
                logger.warning(
                    "could not remove the entry of ticket %d", self.ticket, exc_info=True
                )
            raise

    def handed(self, row: Item) -> Step[HeldLockSteps | None]:
        """Our entry is gone from ``row``: the lock if a release handed it to us."""
        return None
        yield  # a step that sends nothing here

    def left_too_late(self) -> Step[None]:
        """Leaving found our entry gone: undo a handoff to us, if that is why."""
        return
        yield  # a step that sends nothing here

    def wait_in_line(self, row: Item) -> Step[HeldLockSteps]:
        """Wait from ``row`` (as our entering write returned it) until granted."""
        lc = self.lc
        polls = Polls(self.pace, *lc._polls)
        watch: Watch | None = None
        step: tuple[int | None, int] | None = None
        while True:
            now = lc._clock()
            line = entries(row, lc.lease_duration)
            mine = next((e for e in line if e.hold == self.hold), None)
            if mine is None:  # hold ids are unique: our entry is gone
                handed = yield from self.handed(row)
                if handed is not None:
                    return handed
                row = yield from self.reenter()  # judged dead while alive (paused for a lease)
                watch = None
                continue
            ahead = [e for e in line if e.ticket < self.ticket]
            stale = next((e for e in ahead if self.expired(e)), None)
            if stale is not None:
                yield from self.skip(stale)  # past its garbage-collection time: gone
                row = yield from self.read()
                continue
            counter = self.counter(row, line)
            self.pace.observe(counter, now)
            limit = math.inf
            if ahead:
                target = ahead[-1]
                fresh = observe(watch, ("entry", target.ticket), target.rvn, target.lease, now)
                if fresh is watch and fresh.remaining(now) <= 0:
                    yield from self.skip(target)
                    watch = None
                    row = yield from self.read()
                    continue
                watch, limit = fresh, fresh.remaining(now)
            else:
                watch = None
                front = yield from self.at_front(row, now)
                if isinstance(front, HeldLockSteps):
                    return front
                if isinstance(front, dict):
                    row = front
                    continue
                limit = front
            place = (ahead[-1].ticket if ahead else None, counter)
            if place != step:
                # A new entry right ahead or a new holder: our turn may be near, look soon.
                polls.progress()
                step = place
            renew_due = self.renewed_at + lc.heartbeat_period
            if now >= renew_due:
                if not (yield from self.renew()):
                    row = yield from self.reenter()
                    watch = None
                    continue
                renew_due = self.renewed_at + lc.heartbeat_period
            left = self.deadline - now
            if left <= 0:
                yield from self.leave()
                raise self.not_granted()
            # A lease row's holder is one more grant ahead (a FIFO head has none).
            delay = polls.next(len(ahead) + int(HOLD in row), now)
            yield from pause(max(0.0, min(delay, limit, renew_due - now, left)))
            row = yield from self.read()

    def enter(
        self, condition: str = LINE_ENTER, values: dict[str, object] | None = None
    ) -> Step[Item | None]:
        """Take a ticket and enter the line: the row after it (``None``: condition failed)."""
        lc = self.lc
        sent = lc._clock()
        lease = lc.lease_duration
        entry = {OWNER: lc.owner, RVN: new_id(), LEASE: lease, EXPIRES: lc._wall() + lease}
        values = {":zero": 0, ":one": 1, ":entry": entry, **(values or {})}
        try:
            row = yield from self.update(
                condition, _ENTER, values, self.names, ReturnValues="ALL_NEW"
            )
        except ConditionFailed as exc:
            if not was_retried(exc):
                return None
            # The first attempt may have applied: our entry (or the lock handed to us) says so.
            row = yield from self.read()
            if get_int(row, self.names["#t"]) is None and get_str(row, HOLD) != self.hold:
                return None
        except ValidationFailed as exc:
            raise LockError(
                f"the line of {self.resource!r} is full: DynamoDB refused one more waiter ({exc})"
            ) from exc
        # Without our entry the grant is ours: wait_in_line takes it as handed.
        self.ticket = get_int(row, self.names["#t"]) or self.ticket
        self.entered = True
        self.renewed_at = sent
        return row

    def reenter(self) -> Step[Item]:
        self.hold = new_id()
        self.names = entry_names(self.hold)
        row = yield from self.enter()
        if row is None:  # a fresh id cannot meet an entry of its own
            raise LockError(f"could not queue for {self.resource!r}")
        return row

    def renew(self) -> Step[bool]:
        lc = self.lc
        sent = lc._clock()
        values = {
            ":ticket": self.ticket,
            ":rvn": new_id(),
            ":exp": lc._wall() + lc.lease_duration,
        }
        try:
            yield from self.update(LINE_RENEW, RENEW, values, self.names)
        except ConditionFailed:
            self.entered = False
            return False
        self.renewed_at = sent
        return True

    def leave(self) -> Step[None]:
        if not self.entered:
            return
        self.entered = False
        try:
            yield from self.update(
                LINE_LEAVE, LEAVE, {":ticket": self.ticket, ":minus": -1}, self.names
            )
        except ConditionFailed:  # removed meanwhile: judged dead, or handed the lock
            yield from self.left_too_late()

    def skip(self, dead: Entry) -> Step[bool]:
        """Remove ``dead`` if it is still as we watched it; whether it was removed."""
        values = {":seen": dead.rvn, ":minus": -1}
        try:
            yield from self.update(LINE_SKIP, LEAVE, values, entry_names(dead.hold))
        except ConditionFailed:
            return False
        logger.info("removed the entry of ticket %d (%s): no heartbeat", dead.ticket, dead.owner)
        return True

    def update(
        self,
        condition: str,
        update: str,
        values: dict[str, object],
        names: dict[str, str],
        **params: Any,
    ) -> Step[Item]:
        """One conditional write of our row; the row after it, if ``params`` ask for it."""
        return update_row(self.lc.table, self.row_key, condition, update, values, names, **params)

    def read(self) -> Step[Item]:
        return read_row(self.lc.table, self.row_key)

    def expired(self, entry: Entry) -> bool:
        return entry.expires is not None and entry.expires + GC_MARGIN < self.lc._wall()
