"""Breaking a lock by hand (``ddbtx locks break``, the recovery function's ``break_lock_row``):
one update conditioned on the holder as read, keeping every counter and the waiters, that
writes a ``brk`` mark, which only a break writes (so IAM can deny it to the sweeper)."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .. import schema
from .._base.drive import drive
from .._base.items import as_json
from ..errors import ConditionFailed, LockNotFoundError
from . import _rows as rows
from ._held import Clock, Sleep
from ._line import LEAVE, entries, entry_names

logger = logging.getLogger(__name__)

Kind = Literal["mutex", "lease", "fifo"]
Outcome = Literal["broken", "refused", "not_held", "observing"]
KINDS: tuple[Kind, ...] = ("mutex", "lease", "fifo")

# Break a mutex: the same owner and acquire (rvn) as read.
BREAK_MUTEX = "#owner = :owner AND #rvn = :rvn"
_BREAK_MUTEX = "SET #brk = :mark REMOVE #owner, #rvn, #at, #exp"
# Break a lease: the same grant and heartbeat (rvn) as read; the line stays.
BREAK_LEASE = "#hold = :hold AND #rvn = :rvn"
_BREAK_LEASE = "SET #brk = :mark REMOVE #hold, #owner, #rvn, #exp, #data"
# Break a FIFO lock: the holder's entry with the ticket and rvn as read (still the lowest).
BREAK_FIFO = "#t = :ticket AND #w.#rvn = :rvn"
_BREAK_FIFO = f"SET #brk = :mark {LEAVE}"

_BREAKS: dict[Kind, tuple[str, str]] = {
    "mutex": (BREAK_MUTEX, _BREAK_MUTEX),
    "lease": (BREAK_LEASE, _BREAK_LEASE),
    "fifo": (BREAK_FIFO, _BREAK_FIFO),
}


@dataclass(frozen=True)
class Seen:
    """What a break saw of a holder (``at``: epoch seconds): pass it back a lease later."""

    hold: str
    rvn: str
    at: float


@dataclass(frozen=True)
class BreakResult:
    """The outcome of :func:`break_lock`.

    Attributes
    ----------
    resource, kind, namespace
        Which lock (``namespace`` for FIFO locks only).
    outcome : {"broken", "refused", "not_held", "observing"}
        ``observing``: call again with ``seen`` a lease or more later.
    owner, fencing_token
        The holder as read (FIFO: its ticket).
    reason : str
        Why it was refused, or what to do next.
    before : dict
        The holder's part of the row as read (DynamoDB JSON, binary as base64).
    seen : Seen or None
        With ``observing``.
    """

    resource: str
    kind: Kind
    namespace: str | None
    outcome: Outcome
    owner: str | None = None
    fencing_token: int | None = None
    reason: str = ""
    before: dict[str, Any] = field(default_factory=dict)
    seen: Seen | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data."""
        return asdict(self)


@dataclass(frozen=True)
class _Holder:
    hold: str  # lease: the grant's id; FIFO: the entry's; mutex: the rvn
    owner: str | None
    rvn: str
    token: int | None
    lease: float | None  # None: a mutex (no heartbeats)
    expires: float | None
    before: dict[str, Any]


def break_lock(
    client: Any,
    table: str,
    resource: str,
    *,
    by: str,
    kind: Kind | None = None,
    namespace: str | None = None,
    force: bool = False,
    seen: Seen | None = None,
    max_wait: float = math.inf,
    clock: Clock = time.monotonic,
    wall_clock: Clock = time.time,
    sleep: Sleep = time.sleep,
) -> BreakResult:
    """Free the lock on ``resource`` whose holder is gone, keeping every counter.

    Parameters
    ----------
    client, table
        A boto3 DynamoDB client and the locks table.
    resource : str
        The locked resource.
    by : str
        Who breaks it (written into the row's ``brk`` mark and the audit log).
    kind : {"mutex", "lease", "fifo"}, optional
        Needed only when the resource has several lock rows.
    namespace : str, optional
        The FIFO namespace (implies ``kind="fifo"``).
    force : bool
        Break without watching for heartbeats (the write still needs the holder as read).
    seen : Seen, optional
        What an earlier ``observing`` answer saw.
    max_wait : float
        Seconds this call may spend watching (a longer lease: ``observing``).
    clock, wall_clock, sleep
        Monotonic seconds (the watch), epoch seconds (mark, ``seen``, expiry), its sleep.

    Raises
    ------
    ValueError
        A bad argument, or several lock rows and no ``kind`` or ``namespace``.
    LockNotFoundError
        No lock row matches.

    Examples
    --------
    >>> result = break_lock(client, "Locks", "Moe", by="alice@ops")   # doctest: +SKIP
    >>> result.outcome, result.owner, result.fencing_token             # doctest: +SKIP
    ('broken', 'host-a', 17)
    """
    rows.check_resource(resource)
    rows.check_name(by, "by", rows.MAX_OWNER_BYTES)
    kind = _check_kind(kind, namespace)
    if not isinstance(force, bool):
        raise ValueError(f"force must be a bool, not {type(force).__name__}")
    if seen is not None:
        _check_seen(seen)
    if (
        isinstance(max_wait, bool)
        or not isinstance(max_wait, int | float)
        or math.isnan(max_wait)
        or max_wait < 0
    ):
        raise ValueError(f"max_wait must be a number of seconds >= 0, not {max_wait!r}")
    breaker = _Breaker(client, table, resource, by, clock, wall_clock, sleep)
    return breaker.run(kind, namespace, force=force, seen=seen, max_wait=float(max_wait))


def _check_kind(kind: Kind | None, namespace: str | None) -> Kind | None:
    """The kind of lock row asked for: ``kind``, which a namespace makes ``fifo``."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if namespace is None:
        return kind
    rows.check_namespace(namespace)
    if kind not in (None, "fifo"):
        raise ValueError(f"a namespace names a FIFO lock, not a {kind}")
    return "fifo"


@dataclass
class _Breaker:
    client: Any
    table: str
    resource: str
    by: str
    clock: Clock
    wall: Clock
    sleep: Sleep
    kind: Kind = "mutex"
    namespace: str | None = None

    def run(
        self, kind: Kind | None, namespace: str | None, *, force: bool, seen: Seen | None,
        max_wait: float,
    ) -> BreakResult:  # fmt: skip
        self.kind, self.namespace, row = self.find(kind, namespace)
        holder = self.holder(row)
        if holder is None:
            return self.result("not_held", reason="nobody holds it")
        if not force:
            verdict = self.judge(holder, seen, max_wait)
            if verdict is not None:
                logger.info("did not break %s: %s", self.what, verdict.reason)
                return verdict
        return self.write(holder, force)

    def find(self, kind: Kind | None, namespace: str | None) -> tuple[Kind, str | None, rows.Item]:
        found = self.lock_rows()
        wanted = [r for r in found if kind in (None, r[0]) and namespace in (None, r[1])]
        if not wanted:
            there = ", ".join(_name(k, ns) for k, ns, _ in found) or "none"
            raise LockNotFoundError(
                f"no {_asked(kind, namespace)}lock row for resource {self.resource!r} in "
                f"{self.table!r} (its lock rows: {there})"
            )
        if len(wanted) > 1:
            there = ", ".join(_name(k, ns) for k, ns, _ in wanted)
            raise ValueError(
                f"resource {self.resource!r} has several lock rows ({there}): name one by its "
                "kind or namespace"
            )
        return wanted[0]

    def lock_rows(self) -> list[tuple[Kind, str | None, rows.Item]]:
        """The resource's lock rows: each one's kind, namespace (FIFO only) and item."""
        query = rows.expressions({":pk": self.resource}, KeyConditionExpression="#pk = :pk")
        found: list[tuple[Kind, str | None, rows.Item]] = []
        for item in rows.all_items(self.client, "query", TableName=self.table, **query):
            sort_key = rows.get_str(item, schema.LOCK_SK) or ""
            parsed = rows.parse_fifo_sk(sort_key)
            if sort_key in (rows.MUTEX_SK, rows.LEASE_SK):
                found.append(("mutex" if sort_key == rows.MUTEX_SK else "lease", None, item))
            elif parsed is not None and parsed[1] is None:
                found.append(("fifo", parsed[0], item))
        return found

    def holder(self, item: rows.Item) -> _Holder | None:
        if self.kind == "fifo":
            return _first_in_line(item)
        owner = rows.get_str(item, rows.OWNER)
        rvn = rows.get_str(item, rows.RVN) or ""
        before = {k: as_json(v) for k, v in item.items() if k != rows.BROKEN}
        token = rows.get_int(item, rows.FENCE)
        if self.kind == "mutex":
            if owner is None:
                return None
            return _Holder(rvn, owner, rvn, token, None, rows.get_num(item, rows.EXPIRES), before)
        hold = rows.get_str(item, rows.HOLD)
        if hold is None:
            return None
        return _Holder(
            hold,
            owner,
            rvn,
            token,
            rows.get_num(item, rows.LEASE) or 0.0,
            rows.get_num(item, rows.EXPIRES),
            before,
        )

    def read(self) -> rows.Item:
        return drive(rows.read_row(self.table, self.key()), self.client)

    def key(self) -> rows.Item:
        sort_key = {"mutex": rows.MUTEX_SK, "lease": rows.LEASE_SK}.get(self.kind)
        return rows.key(self.resource, sort_key or rows.fifo_head_sk(self.namespace or ""))

    def judge(self, holder: _Holder, seen: Seen | None, max_wait: float) -> BreakResult | None:
        """``None`` if the holder is dead (so the break may go ahead), else why not."""
        if holder.lease is None:  # a mutex: no heartbeats to watch
            return self.judge_mutex(holder)
        if seen is not None:
            if (seen.hold, seen.rvn) != (holder.hold, holder.rvn):
                return self.refused(holder, "its record version moved since it was seen: alive")
            waited = self.wall() - seen.at
            if waited < holder.lease:
                return self.observing(holder, seen, holder.lease - waited)
            return None
        if holder.lease > max_wait:
            return self.observing(holder, Seen(holder.hold, holder.rvn, self.wall()), holder.lease)
        started = self.clock()
        while (left := started + holder.lease - self.clock()) > 0:
            self.sleep(left)
        now = self.holder(self.read())
        if now is None:
            return self.result("not_held", holder, "released while it was watched")
        if now.hold != holder.hold:
            return self.refused(holder, "it changed hands while it was watched")
        if now.rvn != holder.rvn:
            return self.refused(
                holder,
                f"its record version moved within one lease ({holder.lease:g} s): alive",
            )
        return None

    def judge_mutex(self, holder: _Holder) -> BreakResult | None:
        """``None`` once a mutex holder's own expiry has passed, else why not."""
        if holder.expires is not None and holder.expires < self.wall():
            return None
        until = "no expire_after" if holder.expires is None else "expire_after not over"
        return self.refused(
            holder,
            f"a mutex holder never heartbeats, so a live one cannot be told from a dead one "
            f"({until}); break it with force if you know it is gone",
        )

    def write(self, holder: _Holder, force: bool) -> BreakResult:
        mark_id = rows.new_id()
        owner, token = holder.owner or "", holder.token or 0
        mark = {
            "id": mark_id, "by": self.by, "at": self.wall(), "owner": owner, "token": token,
            "forced": force,
        }  # fmt: skip
        # Each break's texts take the values they name (expressions() picks them).
        values = {
            ":mark": mark, ":rvn": holder.rvn, ":owner": owner, ":hold": holder.hold,
            ":ticket": token, ":minus": -1,
        }  # fmt: skip
        condition, update = _BREAKS[self.kind]
        names = entry_names(holder.hold) if self.kind == "fifo" else None
        try:
            drive(
                rows.update_row(self.table, self.key(), condition, update, values, names),
                self.client,
            )
        except ConditionFailed as exc:
            if not (rows.was_retried(exc) and self.marked(mark_id)):
                return self.refused(holder, "the row changed since it was read: look again")
        logger.warning(
            "lock broken by %s: %s held by %s (token %s)%s; row before: %s",
            self.by, self.what, holder.owner, holder.token, " (forced)" if force else "",
            holder.before,
        )  # fmt: skip
        return self.result("broken", holder)

    def marked(self, mark_id: str) -> bool:
        """Whether the row carries our own break's mark (a retry after a lost answer)."""
        mark = self.read().get(rows.BROKEN, {}).get("M", {})
        return rows.get_str(mark, "id") == mark_id

    @property
    def what(self) -> str:
        return f"the {_name(self.kind, self.namespace)} lock on {self.resource!r}"

    def result(
        self, outcome: Outcome, holder: _Holder | None = None, reason: str = "",
        seen: Seen | None = None,
    ) -> BreakResult:  # fmt: skip
        return BreakResult(
            self.resource, self.kind, self.namespace, outcome,
            owner=holder.owner if holder else None,
            fencing_token=holder.token if holder else None,
            reason=reason, before=holder.before if holder else {}, seen=seen,
        )  # fmt: skip

    def refused(self, holder: _Holder, reason: str) -> BreakResult:
        return self.result("refused", holder, reason)

    def observing(self, holder: _Holder, seen: Seen, left: float) -> BreakResult:
        reason = f"watching for one lease: call again with seen in {math.ceil(left)} s or later"
        return self.result("observing", holder, reason, seen)


def _first_in_line(item: rows.Item) -> _Holder | None:
    """Who holds a FIFO lock: the first entry in its head row's line."""
    line = entries(item)
    if not line:
        return None
    first = line[0]
    names = (rows.NEXT, rows.COUNT, *entry_names(first.hold).values())
    before = {n: as_json(item[n]) for n in names if n in item}
    return _Holder(
        first.hold, first.owner, first.rvn, first.ticket, first.lease, first.expires, before
    )


def _check_seen(seen: object) -> None:
    """A ``seen`` passed back: a NaN or infinite time would make any lease look watched."""
    if not isinstance(seen, Seen):
        raise ValueError(f"seen must be a Seen, not {type(seen).__name__}")
    if not (isinstance(seen.hold, str) and isinstance(seen.rvn, str)):
        raise ValueError("seen.hold and seen.rvn must be str, as the observing answer gave them")
    at = seen.at
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        raise ValueError(f"seen.at must be a finite number of epoch seconds, not {at!r}")


def _name(kind: Kind, namespace: str | None) -> str:
    return kind if namespace is None else f"{kind}/{namespace}"


def _asked(kind: Kind | None, namespace: str | None) -> str:
    """The lock row asked for, as a message names it before "lock row" (or nothing)."""
    parts = (kind or "", f"namespace {namespace!r}" if namespace else "")
    asked = " ".join(part for part in parts if part)
    return asked + " " if asked else ""
