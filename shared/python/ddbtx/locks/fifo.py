"""The fair FIFO lock: a ticket counter, a queue of waiters, and a now-serving
pointer on the same head row, so that a grant is one conditional write.

Why the pointer: in the seed design a client that takes ticket 41 and stalls
before writing its queue row lets ticket 42 see an empty queue and enter; when
41 then writes its row it sees nobody ahead either, and enters too. Here the
lock is held by the ticket in ``serving`` while ``held`` is true, and a ticket
can only move ``serving`` forward, with a condition that nobody holds and that
the pointer is still behind it. 41 finds ``serving`` = 42 ahead of its own
ticket, so it knows it was passed over and queues again.

Rows (hash = resource):

* head ``fifo#<ns>#``: ``next`` (last ticket issued), ``serving``, ``held``,
  and the holder's ``hold``/``owner``/``rvn``/``lease``. Never a TTL.
* queue ``fifo#<ns>#<ticket>``: one waiting ticket, its ``hold``, ``rvn``
  (renewed by heartbeats while it waits), ``lease`` and a TTL.

A waiter watches only the nearest row ahead of its ticket: one ``Query``
reading backwards from its own sort key with ``Limit=2`` returns that row (or
the head, when no queue row is ahead) and the row before it, so a waiter also
knows when it is second in line.
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass

from .. import schema
from .._dynamo import call
from ..errors import ConditionFailed, LockNotGrantedError
from ._held import Backoff, HeldLock, LockClient, Watch, observe
from ._rows import (
    DEFAULT_NAMESPACE,
    EXPIRES,
    GC_MARGIN,
    HELD,
    HOLD,
    LEASE,
    NEXT,
    OWNER,
    RVN,
    SERVING,
    TICKET,
    Item,
    av,
    check_namespace,
    check_resource,
    check_wait,
    expressions,
    fifo_head_sk,
    fifo_queue_sk,
    get_bool,
    get_int,
    get_num,
    get_str,
    key,
    new_id,
    parse_fifo_sk,
    ttl_at,
)

logger = logging.getLogger(__name__)

_HOLDER = (
    "#held = :true, #hold = :hold, #owner = :owner, #rvn = :hold, #lease = :lease, #exp = :exp"
)

# Fast path: nobody holds and no ticket was issued since the last grant, so
# taking ticket next+1 and the grant in one write jumps nobody (or: replay of
# our own fast path after a lost response).
FIFO_FAST = "attribute_not_exists(#pk) OR (#held = :false AND #next = #serving) OR #hold = :hold"
_FAST = (
    "SET #next = if_not_exists(#next, :zero) + :one,"
    " #serving = if_not_exists(#next, :zero) + :one, " + _HOLDER
)
# Taking a ticket is an unconditional counter increment that also creates the head.
_TICKET = (
    "SET #next = if_not_exists(#next, :zero) + :one,"
    " #serving = if_not_exists(#serving, :zero), #held = if_not_exists(#held, :false)"
)
# The grant: nobody holds and the pointer has not passed our ticket (or replay
# of our own grant). This single write is what makes two holders impossible.
FIFO_GRANT = "(#held = :false AND #serving < :ticket) OR #hold = :hold"
_GRANT = "SET #serving = :ticket, " + _HOLDER
# Takeover by the first waiter: the holder's rvn stayed unchanged for its whole
# lease (or replay of our own takeover).
FIFO_TAKEOVER = "(#serving = :serving AND #rvn = :seen) OR #hold = :hold"
# Holder heartbeat: only while this grant holds; a takeover replaces #hold.
FIFO_RENEW = "#hold = :hold AND #held = :true"
_RENEW = "SET #rvn = :rvn, #exp = :exp"
# Release this grant; #hold stays, so a replay of our applied release passes.
FIFO_RELEASE = "#hold = :hold"
_RELEASE = "SET #held = :false REMOVE #owner, #rvn, #exp"
# Join the queue under a fresh ticket (or replay of our own join).
QUEUE_JOIN = "attribute_not_exists(#pk) OR #hold = :hold"
# Waiter heartbeat: only while our row is still there; a waiter judged dead
# has had its row deleted and must not bring it back.
QUEUE_RENEW = "#hold = :hold"
_QUEUE_RENEW = "SET #rvn = :rvn, #ttl = :ttl, #exp = :exp"
# Skip a dead waiter ahead: delete its row only if it has not heartbeated
# since we judged it.
QUEUE_SKIP = "#rvn = :seen"


@dataclass(frozen=True)
class _Head:
    serving: int
    held: bool
    rvn: str
    lease: float


@dataclass(frozen=True)
class _Ahead:
    ticket: int
    rvn: str
    lease: float
    sort_key: str


class FifoHeldLock(HeldLock):
    """A granted FIFO lock; ``fencing_token`` is its ticket."""

    _renew_write = (FIFO_RENEW, _RENEW)
    _release_write = (FIFO_RELEASE, _RELEASE)


class FifoLock(LockClient):
    """A fair lock: grants follow ticket order, and the grant is one conditional
    write on a now-serving pointer, so two holders are impossible.

    Waiters poll with backoff and read only the nearest row ahead of them.
    A waiter or holder that stops heartbeating is skipped once its rvn has
    stayed unchanged for its lease on the watching waiter's monotonic clock;
    the waiters behind keep their order. Queue rows carry a TTL (garbage
    collection only; rows past it are treated as gone); the head row with the
    counters never does. The fencing token is the grant's ticket.

    Parameters are those of :class:`~ddbtx.locks.LockClient`; the lease
    defaults to 60 s with a heartbeat every 30 s.

    Examples
    --------
    >>> fifo = FifoLock(client, "Locks", owner="p1",
    ...                 lease_duration=60.0, heartbeat_period=30.0)        # doctest: +SKIP
    >>> with fifo.acquire("order-history", namespace="sum") as lock:       # doctest: +SKIP
    ...     total = sum_orders(fence=lock.fencing_token)
    """

    _default_lease = 60.0
    _default_heartbeat = 30.0
    _kind = "fifo"

    def acquire(
        self, resource: str, *, namespace: str = DEFAULT_NAMESPACE, wait: float = math.inf
    ) -> FifoHeldLock:
        """Acquire ``resource`` in ``namespace`` after every earlier live ticket.

        An uncontended acquire (nobody holds, nobody queued) is one request.
        ``wait=0`` tries once and never leaves a queue row; a waiter whose
        ``wait`` runs out removes its row and raises
        :class:`~ddbtx.errors.LockNotGrantedError`.
        """
        check_resource(resource)
        check_namespace(namespace)
        wait = check_wait(wait)
        self._check_open()
        waiter = _Waiter(self, resource, namespace, self._clock() + wait)
        try:
            return waiter.run(try_once=wait == 0)
        except BaseException:
            waiter.leave_quietly()
            raise


class _Waiter:
    """One acquire call: its ticket, its queue row, and what it watches."""

    def __init__(self, fifo: FifoLock, resource: str, namespace: str, deadline: float) -> None:
        self.fifo = fifo
        self.resource = resource
        self.namespace = namespace
        self.deadline = deadline
        self.hold = new_id()
        self.ticket = 0
        self.joined = False
        self.renew_due = math.inf
        self.head_key = key(resource, fifo_head_sk(namespace))

    # -- the protocol ------------------------------------------------------------

    def run(self, *, try_once: bool) -> FifoHeldLock:
        lock = self._fast_path()
        if lock is not None:
            return lock
        head = self._take_ticket()
        if try_once:
            ahead = None if head.held else self._look_ahead()[0]
            if isinstance(ahead, _Head) and not ahead.held and ahead.serving < self.ticket:
                lock = self._grant(FIFO_GRANT, {})
                if lock is not None:
                    return lock
            raise self._not_granted()
        if head.held:
            self._join()
        return self._wait(head)

    def _wait(self, ticket_head: _Head) -> FifoHeldLock:
        fifo = self.fifo
        low, high = fifo._polls
        backoff = Backoff(low, high)
        pace = _Pace()
        pace.observe(ticket_head.serving, fifo._clock())
        watch: Watch | None = None
        step: tuple[str, int] | None = None
        ahead, head = self._look_ahead()
        while True:
            now = fifo._clock()
            if head is not None:
                pace.observe(head.serving, now)
            if isinstance(ahead, _Head):
                if ahead.serving >= self.ticket:
                    self._requeue()  # passed over while our row was missing or judged dead
                    watch = None
                    ahead, head = self._look_ahead()
                    continue
                if not ahead.held:
                    lock = self._grant(FIFO_GRANT, {})
                    if lock is not None:
                        return lock
                    ahead, head = self._look_ahead()  # another ticket won the grant
                    continue
                target = ("head", ahead.serving)
            else:
                target = ("queue", ahead.ticket)
            if not self.joined:
                self._join()
            far = None if isinstance(ahead, _Head) else pace.far_pause(self.ticket, head)
            place = target if far is None or far > 0 else ("second", head.serving if head else 0)
            if place != step:
                # A new holder, a new row ahead, or (second in line) a new grant:
                # our turn may be one short hold away, so look again soon.
                backoff.reset()
                step = place
            fresh = observe(watch, target, ahead.rvn, ahead.lease, now)
            if fresh is watch and fresh.remaining(now) <= 0:
                if isinstance(ahead, _Head):
                    values = {":serving": ahead.serving, ":seen": ahead.rvn}
                    lock = self._grant(FIFO_TAKEOVER, values)
                    if lock is not None:
                        return lock
                else:
                    self._skip(ahead)
                watch = None
                ahead, head = self._look_ahead()
                continue
            watch = fresh
            if now >= self.renew_due and not self._renew_row():
                self._requeue()  # judged dead while alive (paused for a lease)
                watch = None
                ahead, head = self._look_ahead()
                continue
            left = self.deadline - now
            if left <= 0:
                raise self._not_granted()
            # Far back, the measured pace of grants says when to look again; never
            # beyond max_poll, which bounds the handoff delay if the pace picks up.
            guess = backoff.next() if far is None or far <= 0 else min(high, max(low, far))
            fifo._sleep(max(0.0, min(guess, fresh.remaining(now), self.renew_due - now, left)))
            ahead, head = self._poll(ahead)

    def _not_granted(self) -> LockNotGrantedError:
        return LockNotGrantedError(
            f"FIFO lock on {self.resource!r}/{self.namespace} not granted to "
            f"{self.fifo.owner!r} in time (ticket {self.ticket})"
        )

    # -- requests ------------------------------------------------------------------

    def _values(self, extra: dict[str, object]) -> dict[str, object]:
        fifo = self.fifo
        return {
            ":hold": self.hold,
            ":owner": fifo.owner,
            ":lease": fifo.lease_duration,
            ":exp": fifo._wall() + fifo.lease_duration,
            ":true": True,
            ":false": False,
            ":zero": 0,
            ":one": 1,
            ":ticket": self.ticket,
            **extra,
        }

    def _update_head(self, condition: str | None, update: str, extra: dict[str, object]) -> Item:
        texts = {"UpdateExpression": update}
        if condition is not None:
            texts["ConditionExpression"] = condition
        response = call(
            self.fifo.client,
            "update_item",
            TableName=self.fifo.table,
            Key=self.head_key,
            ReturnValues="ALL_NEW",
            **expressions(self._values(extra), **texts),
        )
        attributes: Item = response["Attributes"]
        return attributes

    def _fast_path(self) -> FifoHeldLock | None:
        sent = self.fifo._clock()
        try:
            head = self._update_head(FIFO_FAST, _FAST, {})
        except ConditionFailed:
            return None
        return self._granted(get_int(head, SERVING) or 0, sent)

    def _take_ticket(self) -> _Head:
        head = self._update_head(None, _TICKET, {})
        self.ticket = get_int(head, NEXT) or 0
        return _head(head, self.fifo.lease_duration)

    def _grant(self, condition: str, extra: dict[str, object]) -> FifoHeldLock | None:
        sent = self.fifo._clock()
        try:
            self._update_head(condition, _GRANT, extra)
        except ConditionFailed:
            return None
        lock = self._granted(self.ticket, sent)
        self.leave_quietly()  # the row only told later tickets we were ahead
        return lock

    def _granted(self, ticket: int, sent: float) -> FifoHeldLock:
        fifo = self.fifo
        lock = FifoHeldLock(
            fifo,
            hold=self.hold,
            row_key=self.head_key,
            resource=self.resource,
            namespace=self.namespace,
            fencing_token=ticket,
            confirmed_at=sent,
        )
        fifo._keep(lock)
        return lock

    def _row_key(self) -> Item:
        return key(self.resource, fifo_queue_sk(self.namespace, self.ticket))

    def _ttl(self) -> int:
        return ttl_at(self.fifo._wall() + self.fifo.lease_duration + GC_MARGIN)

    def _join(self) -> None:
        fifo = self.fifo
        now = fifo._clock()
        item = {
            **self._row_key(),
            OWNER: av(fifo.owner),
            HOLD: av(self.hold),
            RVN: av(new_id()),
            LEASE: av(fifo.lease_duration),
            EXPIRES: av(fifo._wall() + fifo.lease_duration),
            TICKET: av(self.ticket),
            schema.LOCK_TTL: av(self._ttl()),
        }
        call(
            fifo.client,
            "put_item",
            TableName=fifo.table,
            Item=item,
            **expressions({":hold": self.hold}, ConditionExpression=QUEUE_JOIN),
        )
        self.joined = True
        self.renew_due = now + fifo.heartbeat_period

    def _renew_row(self) -> bool:
        fifo = self.fifo
        sent = fifo._clock()
        values = {":hold": self.hold, ":rvn": new_id(), ":ttl": self._ttl()}
        values[":exp"] = fifo._wall() + fifo.lease_duration
        try:
            call(
                fifo.client,
                "update_item",
                TableName=fifo.table,
                Key=self._row_key(),
                **expressions(
                    values, ConditionExpression=QUEUE_RENEW, UpdateExpression=_QUEUE_RENEW
                ),
            )
        except ConditionFailed:
            self.joined = False
            return False
        self.renew_due = sent + fifo.heartbeat_period
        return True

    def _requeue(self) -> None:
        self._leave()
        self._take_ticket()
        self._join()

    def _leave(self) -> None:
        if self.joined:
            call(self.fifo.client, "delete_item", TableName=self.fifo.table, Key=self._row_key())
            self.joined = False
            self.renew_due = math.inf

    def leave_quietly(self) -> None:
        """Remove our queue row, if any, without masking what is under way."""
        try:
            self._leave()
        except Exception:  # the row has a TTL, and successors skip it after a lease
            logger.warning("could not remove queue row of ticket %d", self.ticket, exc_info=True)

    def _skip(self, ahead: _Ahead) -> None:
        # If it heartbeated after all, or left, the delete fails: either way, look again.
        with contextlib.suppress(ConditionFailed):
            call(
                self.fifo.client,
                "delete_item",
                TableName=self.fifo.table,
                Key=key(self.resource, ahead.sort_key),
                **expressions({":seen": ahead.rvn}, ConditionExpression=QUEUE_SKIP),
            )

    def _poll(self, ahead: _Head | _Ahead) -> tuple[_Head | _Ahead, _Head | None]:
        """Re-read what we wait behind: the head alone when we are first in line,
        else the head and the row ahead together (two items, one request).
        Only when that row has gone does it take a query to find the next one."""
        fifo = self.fifo
        keys = [self.head_key]
        if isinstance(ahead, _Ahead):
            keys.append(key(self.resource, ahead.sort_key))
        response = call(
            fifo.client,
            "batch_get_item",
            RequestItems={fifo.table: {"Keys": keys, "ConsistentRead": True}},
        )
        found = {get_str(i, schema.LOCK_SK): i for i in response["Responses"].get(fifo.table, [])}
        head_item = found.get(fifo_head_sk(self.namespace))
        if response.get("UnprocessedKeys") or head_item is None:
            return self._look_ahead()
        head = _head(head_item, fifo.lease_duration)
        if isinstance(ahead, _Head):
            return head, head
        row = found.get(ahead.sort_key)
        if row is None or self._expired(row):
            return self._look_ahead()
        return _ahead(row, ahead.sort_key, fifo.lease_duration), head

    def _expired(self, row: Item) -> bool:
        expiry = get_num(row, schema.LOCK_TTL)
        return expiry is not None and expiry < self.fifo._wall()

    def _look_ahead(self) -> tuple[_Head | _Ahead, _Head | None]:
        """The nearest live row before our ticket (a queue row, or else the head),
        and the head too if it comes right after that row: two items at most."""
        fifo = self.fifo
        head_sk = fifo_head_sk(self.namespace)
        upper = fifo_queue_sk(self.namespace, self.ticket - 1)
        while True:
            items = call(
                fifo.client,
                "query",
                TableName=fifo.table,
                ConsistentRead=True,
                ScanIndexForward=False,
                Limit=2,
                **expressions(
                    {":pk": self.resource, ":head": head_sk, ":upper": upper},
                    KeyConditionExpression="#pk = :pk AND #sk BETWEEN :head AND :upper",
                ),
            )["Items"]
            if not items:
                # The head row is gone (only an operator deletes it): start over.
                self._requeue()
                continue
            item = items[0]
            sort_key = get_str(item, schema.LOCK_SK) or ""
            if sort_key == head_sk:
                head = _head(item, fifo.lease_duration)
                return head, head
            ahead = _ahead(item, sort_key, fifo.lease_duration)
            if self._expired(item):
                self._skip(ahead)  # past its TTL: gone, whether or not TTL deleted it yet
                continue
            beyond = items[1:] and items[1]
            if beyond and get_str(beyond, schema.LOCK_SK) == head_sk:
                return ahead, _head(beyond, fifo.lease_duration)
            return ahead, None


def _head(item: Item, default_lease: float) -> _Head:
    return _Head(
        serving=get_int(item, SERVING) or 0,
        held=get_bool(item, HELD),
        rvn=get_str(item, RVN) or "",
        lease=get_num(item, LEASE) or default_lease,
    )


def _ahead(item: Item, sort_key: str, default_lease: float) -> _Ahead:
    _, ticket = parse_fifo_sk(sort_key) or ("", None)
    return _Ahead(
        ticket=ticket or 0,
        rvn=get_str(item, RVN) or "",
        lease=get_num(item, LEASE) or default_lease,
        sort_key=sort_key,
    )


class _Pace:
    """How fast the now-serving pointer moves, as this waiter has seen it."""

    def __init__(self) -> None:
        self._first: tuple[int, float] | None = None
        self._rate: float | None = None

    def observe(self, serving: int, now: float) -> None:
        if self._first is None:
            self._first = (serving, now)
        elif serving > self._first[0] and now > self._first[1]:
            self._rate = (serving - self._first[0]) / (now - self._first[1])

    def far_pause(self, ticket: int, head: _Head | None) -> float | None:
        """How long a waiter further back than second in line may sleep: half the
        expected time until it is second, or until two grants before that if
        later. ``0`` when it is second already; ``None`` while unknown."""
        if head is None:
            return None
        ahead = ticket - head.serving - 1  # tickets between the holder and us
        if ahead <= 1:
            return 0.0
        if self._rate is None:
            return None
        until_second = (ahead - 1) / self._rate
        return max(until_second / 2, until_second - 2 / self._rate)
