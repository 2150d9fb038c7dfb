"""One coordinator's view of its TX record; its lock is never held across a request."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from .. import schema as s
from .._base.effects import Step
from .._base.items import Item
from .._base.requests import Request, too_large
from .._stores.record import Entry, Header, RecordStore, entry_to_av
from ..errors import (
    ConditionFailed,
    DuplicateRequestError,
    DynamoDBError,
    InvalidRequestError,
    ValidationFailed,
)
from .body_rows import BodyRows, WriteBatches

#: Rounds of "catch up, then decide" before a commit gives up on a record that keeps moving.
COMMIT_ROUNDS = 16


@dataclass
class Local:
    """This coordinator's knowledge of one recorded (or being recorded) request."""

    request: Request
    nonce: str
    locked: bool = False  # this request's lock (its nonce) is on the item
    confirmed: bool = False  # the request is complete: locked, and its write applied
    transient: bool = False
    applied: bool = False
    pre: Item | None = None  # the item before the write (user view), None if absent
    external_image: bool = False
    upgrade: bool = False  # a write on an item this transaction had read-locked or written
    seq: int = 1  # which write to its item this is (2, 3, ...: a rewrite)
    #: For a rewrite made over our own earlier writes: ``_tx:ap`` on the item, whether it
    #: reads as absent, whether an image is saved. None: read them from the item.
    prior: tuple[dict[str, Any] | None, bool, bool] | None = None
    elsewhere: bool = False  # another coordinator's (or attempt's) request, from the record
    #: An earlier lock write may have landed unseen (botocore resent it, or it failed).
    maybe_landed: bool = False
    #: The item's fence under this request's lock (``_tx:f``; None: the item has none).
    fence: str | None = None


class AddRefused(Exception):
    """Internal: one chunk of an add was refused; ``error`` is for the caller."""

    def __init__(self, error: InvalidRequestError | DuplicateRequestError) -> None:
        super().__init__(str(error))
        self.error = error
        self.partial = False  # another chunk of the same batch was recorded


class RecordView:
    """The TX record as one coordinator knows it (its adds: :class:`.add.Adding`)."""

    def __init__(self, tx_id: str, store: RecordStore, *, write_batches: WriteBatches) -> None:
        self.tx_id = tx_id
        self.store = store
        self.bodies = BodyRows(tx_id, store, write_batches=write_batches)
        self.state = s.STATE_PENDING
        self.version = 0
        self.tail: str | None = None  # the record's last entry row: its entries are in rows
        self.created = False
        self.caller_id: str | None = None  # written into the record it creates (exactly-once id)
        self.completed = False
        self.marked = False  # the record carries our wait mark until the next add
        self.requests: dict[str, Local] = {}
        #: Items this coordinator sent a lock write for: where a late lock of ours can be.
        self.touched: dict[str, Request] = {}
        self._planned: dict[str, Local] = {}  # being added: not in the record yet
        #: Adds whose outcome is unknown: a retry re-adds them under the same nonce.
        self.unrecorded: dict[str, Local] = {}
        #: A commit decision's fate is unknown: if the record is gone, it may have committed.
        self.commit_unanswered = False
        self._lock = threading.RLock()

    def follow(self, header: Header, own: Iterable[Local] = ()) -> Step[None]:
        """:meth:`adopt` ``header``, reading the body rows it needs outside the lock."""
        ours = list(own)
        bodies: dict[str, dict[str, Any]] = {}
        while lacking := self.adopt(header, ours, bodies):
            for entry in lacking:
                bodies[entry.rid] = yield from self.store.load_params(self.tx_id, entry)

    def adopt(
        self,
        header: Header,
        own: Iterable[Local] = (),
        bodies: dict[str, dict[str, Any]] | None = None,
    ) -> list[Entry]:
        """Move to ``header`` if newer, merging its requests (``own``: ours, just written);
        or, changing nothing, the entries still lacking a body in ``bodies``."""
        ours = list(own)
        bodies = bodies or {}
        with self._lock:
            newer = header.version > self.version
            strangers = self._strangers(header, ours) if newer else {}
            lacking = [
                entry
                for entry in strangers.values()
                if entry.params is None and entry.rid not in bodies
            ]
            if lacking:
                return lacking
            self.created = True
            for local in ours:
                rid = local.request.rid
                self._planned.pop(rid, None)
                self.unrecorded.pop(rid, None)
                known = self.requests.get(rid)
                if newer or known is None or known.nonce == local.nonce:
                    self.requests[rid] = local
            if not newer:
                return []
            self.version = header.version
            self.tail = header.tail
            self.state = header.state
            self.bodies.adopt(header)
            for entry in header.entries.values():
                self._merge(entry, entry.rid in strangers, bodies)
            return []

    def _merge(self, entry: Entry, stranger: bool, bodies: dict[str, dict[str, Any]]) -> None:
        """One entry of a newer header into the view (under the lock)."""
        lost = self.unrecorded.pop(entry.rid, None)
        planned = self._planned.get(entry.rid)
        if stranger:
            params = bodies.get(entry.rid, entry.params)
            assert params is not None
            # Validated when another coordinator added it.
            req = Request(entry.op, entry.table, entry.key, dict(params), entry.rid)  # type: ignore[arg-type]
            self.requests[entry.rid] = Local(req, entry.nonce, seq=entry.seq, elsewhere=True)
        elif lost is not None and matches(lost, entry):
            self.requests[entry.rid] = lost  # an add whose answer was lost did land
        elif planned is not None and matches(planned, entry):
            self.requests[entry.rid] = planned  # an add of ours, landed, not yet told

    def _strangers(self, header: Header, own: list[Local]) -> dict[str, Entry]:
        """The entries of ``header`` no request of ours matches (under the lock)."""
        mine = {local.request.rid: local for local in own}
        strangers: dict[str, Entry] = {}
        for entry in header.entries.values():
            rid = entry.rid
            # ``own`` is merged before the entries: for its requests, it is all we know.
            ours = (
                (mine[rid],)
                if rid in mine
                else (self.unrecorded.get(rid), self._planned.get(rid), self.requests.get(rid))
            )
            if not any(matches(local, entry) for local in ours):
                strangers[rid] = entry
        return strangers

    def current(self, local: Local) -> Local:
        """The view's ``local`` now (another object after a merge)."""
        with self._lock:
            return self.requests.get(local.request.rid, local)

    def unconfirmed(self) -> list[Local]:
        with self._lock:
            return [loc for loc in self.requests.values() if not loc.confirmed]

    def entries(self) -> dict[str, Entry]:
        """The requests as this coordinator knows them, in the record's shape."""
        with self._lock:
            return {rid: self._entry(loc, bodies=False) for rid, loc in self.requests.items()}

    def held_entries(self) -> dict[str, Any]:
        """The entries as the header holds them (bodies in it, or the flag of their row)."""
        with self._lock:
            return {
                rid: entry_to_av(self._entry(loc, bodies=True))
                for rid, loc in self.requests.items()
            }

    def _entry(self, loc: Local, *, bodies: bool) -> Entry:
        rid = loc.request.rid
        spilled = self.bodies.has_row(rid)
        return Entry(
            rid,
            loc.request.op,
            loc.request.table,
            loc.request.key,
            loc.nonce,
            dict(loc.request.params) if bodies and not spilled else None,
            spilled=spilled,
            parts=self.bodies.parts(rid),
            seq=loc.seq,
        )

    @contextmanager
    def adding(self, locals_: list[Local]) -> Iterator[None]:
        """An add of ``locals_`` is in flight: planned meanwhile, unrecorded if it fails."""
        with self._lock:
            for local in locals_:
                self._planned[local.request.rid] = local
        try:
            yield
        except (AddRefused, Decided):
            raise
        except BaseException:  # a cancelled task's add too: it may have landed
            with self._lock:
                for local in locals_:
                    if self.requests.get(local.request.rid) is not local:
                        self.unrecorded[local.request.rid] = local
            raise
        finally:
            with self._lock:
                for local in locals_:
                    self._planned.pop(local.request.rid, None)

    def record_created(self, locals_: list[Local]) -> None:
        with self._lock:
            for local in locals_:
                self._planned.pop(local.request.rid, None)
                self.requests[local.request.rid] = local
            self.created = True
            self.version = max(self.version, 1)  # a resume elsewhere may have seen more already

    def recorded(self, locals_: list[Local], header: Header) -> Step[None]:
        """Our add of ``locals_`` is in ``header``."""
        with self._lock:
            self.marked = False  # an add takes the wait mark off in the same write
        yield from self.follow(header, own=locals_)

    def write_rows(self, entries: list[Entry]) -> Step[None]:
        """Put the rows of ``entries``' bodies; a refusal refuses the add (or take-over)."""
        try:
            yield from self.bodies.write(entries)
        except ValidationFailed as exc:
            raise AddRefused(rejected(self.tx_id, entries, exc, sized=True)) from exc

    def take_over(self, local: Local, new_nonce: str) -> Step[tuple[Local, bool]]:
        """take over: a fresh nonce (the adder's late lock is stray); the request, and if ours."""
        req = local.request
        moved = self.bodies.has_row(req.rid)
        moved_body = Entry(req.rid, req.op, req.table, req.key, new_nonce, dict(req.params))
        if moved:
            # Body rows are keyed by nonce: the new one's is in place before the record names it.
            yield from self.write_rows([moved_body])
        fresh = Local(request=req, nonce=new_nonce)
        try:
            header = yield from self._take_over_write(local, new_nonce)
        except ConditionFailed as exc:
            now = yield from self.store.read_header(self.tx_id)
            if now is None or now.state != s.STATE_PENDING:
                raise Decided(now) from exc
            recorded = now.entries.get(req.rid)
            if recorded is None or recorded.nonce != new_nonce:
                if moved:  # another nonce won: our new row is unnamed
                    yield from self.bodies.drop([moved_body])
                yield from self.follow(now)
                return self.current(local), False
            header = now  # our own take-over, its answer lost and the SDK's retry refused
        yield from self.follow(header, own=[fresh])
        if moved:  # the record names the new nonce's row now: the old one is unnamed
            yield from self.bodies.drop([replace(moved_body, nonce=local.nonce)])
        after = self.current(fresh)
        return after, after is fresh

    def _take_over_write(self, local: Local, new_nonce: str) -> Step[Header]:
        """The write of a take-over: the header's entry, or (in rows) a row naming the
        request with the new nonce, accepted at the view's version (raises ConditionFailed)."""
        req = local.request
        if self.tail is None:
            return (yield from self.store.take_over(self.tx_id, req.rid, local.nonce, new_nonce))
        with self._lock:
            version, tail = self.version, self.tail
            known = self.requests.get(req.rid)
            entry = replace(self._entry(local, bodies=True), nonce=new_nonce)
        if known is None or known.nonce != local.nonce:
            raise ConditionFailed(
                "taken over already", code="ConditionalCheckFailedException", operation="TakeOver"
            )
        rows = self.store.entry_rows.rows(self.tx_id, version, tail, {req.rid: entry_to_av(entry)})
        yield from self.store.entry_rows.write(rows[0])
        return (
            yield from self.store.accept(
                self.tx_id, version, tail=rows[0][s.TX_SK]["S"], moved=False
            )
        )

    def mark_waiting(self, owner: str) -> Step[None]:
        try:
            yield from self.store.mark_waiting(self.tx_id, owner)
            self.marked = True
        except ConditionFailed as exc:
            header = yield from self.store.read_header(self.tx_id)
            if header is None or header.state != s.STATE_PENDING:
                raise Decided(header) from exc

    def decide(self, to_state: str) -> Step[Header | None]:
        """decide: commit at the view's version (all caught up), or roll back at any."""
        deciding_commit = to_state == s.STATE_COMMITTED
        with self._lock:
            if deciding_commit and self.unconfirmed():
                raise RuntimeError("commit decided with unconfirmed requests")
            version = self.version if deciding_commit else None
        resent: list[bool] = []
        try:
            header = yield from self.store.decide(
                self.tx_id, to_state, expect_version=version, resent=resent
            )
        except BaseException:
            # Failed in flight (throttled, timed out, cancelled): it may have been applied.
            self.commit_unanswered |= deciding_commit
            raise
        if header is None:
            # Gone: refused after a resend, it may be our commit, applied and since deleted.
            self.commit_unanswered |= deciding_commit and any(resent)
            return None
        self.commit_unanswered = False  # the record as it is now tells the outcome
        yield from self.follow(header)
        return header


class Decided(Exception):
    """Internal: the record is decided or gone (``header`` None); the façade completes it."""

    def __init__(self, header: Header | None) -> None:
        super().__init__("decided")
        self.header = header


def rejected(
    tx_id: str, requests: list[Any], exc: Exception, *, sized: bool = False
) -> InvalidRequestError:
    """DynamoDB refused before writing anything: name the item when there is one
    (``sized``: one item too large for its lock is said so exactly)."""
    one = requests[0] if len(requests) == 1 else None
    native = exc.response["Error"].get("Message") if isinstance(exc, DynamoDBError) else None
    return InvalidRequestError(
        too_large()
        if sized and one and "size" in str(exc).lower()
        else f"DynamoDB rejected the request: {exc}",
        operation=one.op if one else None,
        dynamodb_message=native,
        tx_id=tx_id,
        table=one.table if one else None,
        key=one.key if one else None,
    )


def matches(local: Local | None, entry: Entry) -> bool:
    """Whether ``entry`` records ``local``: same nonce, operation and write number."""
    return (
        local is not None
        and local.nonce == entry.nonce
        and local.request.op == entry.op
        and local.seq == entry.seq
    )
