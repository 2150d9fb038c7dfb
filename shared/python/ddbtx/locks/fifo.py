"""The fair FIFO lock: one head row per resource and namespace carries the ticket
counter and every live ticket (waiters and holder); the holder is the lowest.

Why one row: the seed design kept a queue row per waiter, so a client that
took ticket 41 and stalled before writing its row let ticket 42 see an empty
queue and enter, and when 41 then wrote its row it entered too. Here taking a
ticket and entering the queue is one write on the head (``next`` + 1 and the
entry ``t_<id>`` = that ticket), so there is no gap between them. And the
lock is *defined* as held by the lowest ticket on the head: releasing is
removing one's entry, which hands the lock to the next ticket without any
grant write. A waiter learns its turn from one ``GetItem`` of the head, which
also shows every ticket ahead, so nothing else is ever read.

Head row (hash = resource, sort ``fifo#<ns>#``, never a TTL, never deleted):

* ``next``: last ticket issued (the fencing counter); ``n``: entries on the row;
* per entry: ``t_<id>`` its ticket, ``w_<id>`` a map of owner, ``rvn``
  (renewed by heartbeats, of waiters and holder alike), lease and the writer's
  wall-clock expiry estimate (display and garbage collection only).

Cost under contention: one write to enter, the polls, one write to release.
The row grows by about 200 bytes per waiting ticket (DynamoDB's item limit of
400 KB allows about 2000 waiters on one resource and namespace), and a poll
reads that one item.
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass

from .._dynamo import call
from ..errors import ConditionFailed, LockError, LockNotGrantedError, ValidationFailed
from ._held import HeldLock, LockClient, Watch, observe
from ._pace import Polls
from ._rows import (
    DEFAULT_NAMESPACE,
    ENTRY,
    ENTRY_TICKET,
    EXPIRES,
    GC_MARGIN,
    LEASE,
    OWNER,
    RVN,
    Item,
    check_namespace,
    check_resource,
    check_wait,
    expressions,
    fifo_head_sk,
    get_int,
    get_num,
    get_str,
    key,
    new_id,
    was_retried,
)

logger = logging.getLogger(__name__)

# Enter the queue: take ticket next+1 and write our entry in the same write, so
# no ticket ever exists without its entry. A replay of our own applied entry
# (lost response) fails here instead of taking a second ticket.
FIFO_ENTER = "attribute_not_exists(#t)"
# Try once (wait=0): enter only when the head carries no entry at all, so the
# new ticket is the lowest, i.e. the holder, and nobody is jumped.
FIFO_TRY = "(attribute_not_exists(#n) OR #n = :zero) AND attribute_not_exists(#t)"
_ENTER = (
    "SET #next = if_not_exists(#next, :zero) + :one, #t = if_not_exists(#next, :zero) + :one,"
    " #w = :entry ADD #n :one"
)
# Heartbeat of an entry (waiter or holder): only while it is still on the head
# with our ticket; an entry judged dead has been removed and must not return.
FIFO_RENEW = "#t = :ticket"
_RENEW = "SET #w.#rvn = :rvn, #w.#exp = :exp"
# Release, or leave the queue: remove our own entry (still ours) and nothing else.
FIFO_LEAVE = "#t = :ticket"
_LEAVE = "REMOVE #t, #w ADD #n :minus"
# Skip a dead entry directly ahead: remove it only if its rvn is still the one
# we watched for its whole lease (a heartbeat since, or its leaving, fails this).
FIFO_SKIP = "#w.#rvn = :seen"


def _entry_names(hold: str) -> dict[str, str]:
    return {"#t": f"{ENTRY_TICKET}{hold}", "#w": f"{ENTRY}{hold}"}


@dataclass(frozen=True)
class Entry:
    """One ticket on a FIFO head: the holder (lowest) or a waiter."""

    hold: str
    ticket: int
    owner: str | None
    rvn: str
    lease: float
    expires: float | None


def entries(item: Item, default_lease: float = 0.0) -> list[Entry]:
    """The entries of a head row, lowest ticket (the holder) first."""
    found = []
    for name, _value in item.items():
        if not name.startswith(ENTRY_TICKET):
            continue
        hold = name[len(ENTRY_TICKET) :]
        ticket = get_int(item, name)
        body = item.get(f"{ENTRY}{hold}", {}).get("M", {})
        if ticket is None:
            continue
        found.append(
            Entry(
                hold=hold,
                ticket=ticket,
                owner=get_str(body, OWNER),
                rvn=get_str(body, RVN) or "",
                lease=get_num(body, LEASE) or default_lease,
                expires=get_num(body, EXPIRES),
            )
        )
    found.sort(key=lambda e: e.ticket)
    return found


class FifoHeldLock(HeldLock):
    """A granted FIFO lock; ``fencing_token`` is its ticket."""

    _renew_write = (FIFO_RENEW, _RENEW)
    _release_write = (FIFO_LEAVE, _LEAVE)


class FifoLock(LockClient):
    """A fair lock: grants follow ticket order, and the holder is the lowest ticket
    on one head row, so two holders are impossible and a handoff needs no write.

    Waiters poll the head with backoff, paced by how fast they have seen
    tickets served. An entry (waiter or holder) that stops heartbeating is
    removed by the ticket right behind it once its rvn has stayed unchanged
    for its lease on that waiter's monotonic clock; the others keep their
    order. An entry whose wall-clock expiry lies more than ``GC_MARGIN`` in the
    past counts as gone at once. The fencing token is the grant's ticket.

    Parameters are those of :class:`~ddbtx.locks.LockClient`; the lease
    defaults to 60 s with a heartbeat every 30 s, and polls start at 10 ms.

    Examples
    --------
    >>> fifo = FifoLock(client, "Locks", owner="p1",
    ...                 lease_duration=60.0, heartbeat_period=30.0)        # doctest: +SKIP
    >>> with fifo.acquire("order-history", namespace="sum") as lock:       # doctest: +SKIP
    ...     total = sum_orders(fence=lock.fencing_token)
    """

    _default_lease = 60.0
    _default_heartbeat = 30.0
    _default_min_poll = 0.01
    _kind = "fifo"

    def acquire(
        self, resource: str, *, namespace: str = DEFAULT_NAMESPACE, wait: float = math.inf
    ) -> FifoHeldLock:
        """Acquire ``resource`` in ``namespace`` after every earlier live ticket.

        An uncontended acquire is one request, and so is ``wait=0`` (granted
        only if nobody holds or waits; it never leaves an entry). A waiter
        whose ``wait`` runs out removes its entry and raises
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
    """One acquire call: its ticket, its entry on the head, and what it watches."""

    def __init__(self, fifo: FifoLock, resource: str, namespace: str, deadline: float) -> None:
        self.fifo = fifo
        self.resource = resource
        self.namespace = namespace
        self.deadline = deadline
        self.hold = new_id()
        self.names = _entry_names(self.hold)
        self.ticket = 0
        self.entered = False
        self.renewed_at = 0.0  # send time of our last rvn write (join or renew)
        self.head_key = key(resource, fifo_head_sk(namespace))

    # -- the protocol ------------------------------------------------------------

    def run(self, *, try_once: bool) -> FifoHeldLock:
        head = self._enter(FIFO_TRY if try_once else FIFO_ENTER)
        if head is None:
            raise self._not_granted()
        if try_once:
            if self._lowest(head):
                return self._granted()
            self._leave()  # a lost response let someone in between: not ours
            raise self._not_granted()
        return self._wait(head)

    def _wait(self, head: Item) -> FifoHeldLock:
        fifo = self.fifo
        pace = fifo._pace(self.resource, fifo_head_sk(self.namespace))
        polls = Polls(pace, *fifo._polls)
        watch: Watch | None = None
        step: tuple[int, int] | None = None
        while True:
            now = fifo._clock()
            queue = entries(head, fifo.lease_duration)
            mine = next((e for e in queue if e.hold == self.hold), None)
            if mine is None or mine.ticket != self.ticket:
                head = self._reenter()  # judged dead while alive (paused for a lease)
                watch = None
                continue
            ahead = [e for e in queue if e.ticket < self.ticket]
            stale = next((e for e in ahead if self._expired(e)), None)
            if stale is not None:
                self._skip(stale)  # past its garbage-collection time: gone
                head = self._read()
                continue
            if not ahead:
                return self._granted()
            pace.observe(ahead[0].ticket, now)
            target = ahead[-1]
            place = (target.ticket, ahead[0].ticket)
            if place != step:
                # A new entry right ahead or a new holder: our turn may be one
                # short hold away, so look again soon.
                polls.progress()
                step = place
            fresh = observe(watch, ("entry", target.ticket), target.rvn, target.lease, now)
            if fresh is watch and fresh.remaining(now) <= 0:
                self._skip(target)
                watch = None
                head = self._read()
                continue
            watch = fresh
            renew_due = self.renewed_at + fifo.heartbeat_period
            if now >= renew_due:
                if not self._renew():
                    head = self._reenter()
                    watch = None
                    continue
                renew_due = self.renewed_at + fifo.heartbeat_period
            left = self.deadline - now
            if left <= 0:
                self._leave()
                raise self._not_granted()
            delay = polls.next(len(ahead), now)
            fifo._sleep(max(0.0, min(delay, fresh.remaining(now), renew_due - now, left)))
            head = self._read()

    def _lowest(self, head: Item) -> bool:
        queue = entries(head)
        return bool(queue) and queue[0].hold == self.hold

    def _not_granted(self) -> LockNotGrantedError:
        return LockNotGrantedError(
            f"FIFO lock on {self.resource!r}/{self.namespace} not granted to "
            f"{self.fifo.owner!r} in time (ticket {self.ticket or 'none'})"
        )

    def _granted(self) -> FifoHeldLock:
        fifo = self.fifo
        lock = FifoHeldLock(
            fifo,
            hold=self.hold,
            row_key=self.head_key,
            resource=self.resource,
            namespace=self.namespace,
            fencing_token=self.ticket,
            # Whoever watches our entry started after our last rvn write was
            # applied, so our lease counts from that write's send time.
            confirmed_at=self.renewed_at,
        )
        lock._extra_values = {":ticket": self.ticket, ":minus": -1}
        lock._extra_names = dict(self.names)
        self.entered = False  # the entry is the lock's now: release removes it
        if fifo.heartbeat_period >= lock.remaining():
            lock.heartbeat()  # the thread's first beat could come after the lease
        fifo._keep(lock)
        return lock

    # -- requests ------------------------------------------------------------------

    def _entry(self) -> dict[str, object]:
        fifo = self.fifo
        return {
            OWNER: fifo.owner,
            RVN: new_id(),
            LEASE: fifo.lease_duration,
            EXPIRES: fifo._wall() + fifo.lease_duration,
        }

    def _enter(self, condition: str) -> Item | None:
        """Take a ticket and enter the queue in one write; ``None`` if ``condition``
        (wait=0: nobody there) failed. The head as it is after our write."""
        fifo = self.fifo
        sent = fifo._clock()
        try:
            head: Item = call(
                fifo.client,
                "update_item",
                TableName=fifo.table,
                Key=self.head_key,
                ReturnValues="ALL_NEW",
                **expressions(
                    {":zero": 0, ":one": 1, ":entry": self._entry()},
                    names=self.names,
                    ConditionExpression=condition,
                    UpdateExpression=_ENTER,
                ),
            )["Attributes"]
        except ConditionFailed as exc:
            if not was_retried(exc):
                return None
            # The first attempt may have been applied behind a lost response:
            # our entry on the head says so (and carries our ticket).
            head = self._read()
            if get_int(head, self.names["#t"]) is None:
                return None
        except ValidationFailed as exc:
            raise LockError(
                f"FIFO head of {self.resource!r}/{self.namespace} is full: DynamoDB refused "
                f"one more waiter ({exc})"
            ) from exc
        self.ticket = get_int(head, self.names["#t"]) or 0
        self.entered = True
        self.renewed_at = sent
        return head

    def _reenter(self) -> Item:
        self.hold = new_id()
        self.names = _entry_names(self.hold)
        head = self._enter(FIFO_ENTER)
        if head is None:  # a fresh id cannot meet an entry of its own
            raise LockError(f"could not queue for {self.resource!r}/{self.namespace}")
        return head

    def _renew(self) -> bool:
        fifo = self.fifo
        sent = fifo._clock()
        values = {
            ":ticket": self.ticket,
            ":rvn": new_id(),
            ":exp": fifo._wall() + fifo.lease_duration,
        }
        try:
            self._update(FIFO_RENEW, _RENEW, values, self.names)
        except ConditionFailed:
            self.entered = False
            return False
        self.renewed_at = sent
        return True

    def _leave(self) -> None:
        if not self.entered:
            return
        self.entered = False
        # If the entry was removed meanwhile (judged dead), there is nothing to do.
        with contextlib.suppress(ConditionFailed):
            self._update(FIFO_LEAVE, _LEAVE, {":ticket": self.ticket, ":minus": -1}, self.names)

    def leave_quietly(self) -> None:
        """Remove our entry, if any, without masking what is under way."""
        try:
            self._leave()
        except Exception:  # successors skip it after a lease
            logger.warning("could not remove FIFO entry of ticket %d", self.ticket, exc_info=True)

    def _skip(self, dead: Entry) -> None:
        # If it heartbeated after all, or left, the removal fails: look again either way.
        try:
            self._update(
                FIFO_SKIP, _LEAVE, {":seen": dead.rvn, ":minus": -1}, _entry_names(dead.hold)
            )
        except ConditionFailed:
            return
        logger.info("removed FIFO entry of ticket %d (%s): no heartbeat", dead.ticket, dead.owner)

    def _update(
        self, condition: str, update: str, values: dict[str, object], names: dict[str, str]
    ) -> None:
        call(
            self.fifo.client,
            "update_item",
            TableName=self.fifo.table,
            Key=self.head_key,
            **expressions(
                values, names=names, ConditionExpression=condition, UpdateExpression=update
            ),
        )

    def _read(self) -> Item:
        item: Item = call(
            self.fifo.client,
            "get_item",
            TableName=self.fifo.table,
            Key=self.head_key,
            ConsistentRead=True,
        ).get("Item", {})
        return item

    def _expired(self, entry: Entry) -> bool:
        return entry.expires is not None and entry.expires + GC_MARGIN < self.fifo._wall()
