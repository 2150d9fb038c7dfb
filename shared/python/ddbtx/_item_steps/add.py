"""create/add: record requests and their nonces before any item is touched."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import schema as s
from .._base.effects import Step, gather
from .._base.requests import Request
from .._stores import entry_rows
from .._stores.record import Entry, Header
from ..errors import ConditionFailed, DuplicateRequestError, TransactionError, ValidationFailed
from .body_rows import Planned
from .view import AddRefused, Decided, Local, RecordView, matches, rejected

#: Requests per header write when adding a batch (keeps expressions under 4 KB).
ADD_BATCH = 20
#: Rounds of "follow the record, then claim and accept" before an add in rows gives up.
ROW_ROUNDS = 16


@dataclass(frozen=True, slots=True)
class ChunkOutcome:
    """One chunk's refusal, boxed (a gather takes an exception result for a failure)."""

    refused: AddRefused | None = None


class Adding:
    """The add of requests to ``view``'s TX record."""

    def __init__(self, view: RecordView) -> None:
        self.view = view
        self.tx_id = view.tx_id
        self.store = view.store

    def add(self, locals_: list[Local]) -> Step[None]:
        """create/add; ``AddRefused.partial``: another chunk was recorded (roll back)."""
        view = self.view
        recorded: list[Local] = []
        with view.adding(locals_):
            entries = [body_entry(local) for local in locals_]
            in_rows = self._in_rows(entries)
            planned = view.bodies.plan(entries, in_rows=in_rows)
            try:
                yield from view.write_rows(planned.rows)
                if not view.created:
                    yield from self._create(locals_, planned.bodies)
                elif in_rows:
                    yield from self._add_in_rows(locals_, planned.bodies)
                else:
                    yield from self._add_in_chunks(locals_, planned.bodies, recorded)
            except AddRefused:
                named = {loc.request.rid for loc in recorded}
                view.bodies.undo(planned, named)
                unnamed = [e for e in planned.rows if e.rid not in named]
                yield from view.bodies.drop(unnamed, self._overwritten(unnamed, planned))
                raise

    def _in_rows(self, entries: list[Entry]) -> bool:
        """Whether the add goes to entry rows: the record is there, or this add takes it."""
        view = self.view
        if not view.created:
            return False
        return view.tail is not None or view.bodies.header_after(entries) > entry_rows.ROWS_AFTER

    def _add_in_chunks(
        self, locals_: list[Local], bodies: dict[str, dict[str, Any]], recorded: list[Local]
    ) -> Step[None]:
        """add, in the header: chunks at once; ``recorded`` gets the requests that made it."""
        chunks = [locals_[i : i + ADD_BATCH] for i in range(0, len(locals_), ADD_BATCH)]
        outcomes = yield from gather(self._add_chunk(c, bodies) for c in chunks)
        recorded.extend(
            loc for c, o in zip(chunks, outcomes, strict=True) if o.refused is None for loc in c
        )
        refusals = [o.refused for o in outcomes if o.refused is not None]
        if refusals:
            refusals[0].partial = bool(recorded)
            raise refusals[0]

    def _create(self, locals_: list[Local], bodies: dict[str, dict[str, Any]]) -> Step[None]:
        try:
            yield from self.store.create(self.tx_id, bodies, caller_id=self.view.caller_id)
        except ConditionFailed as exc:
            header = yield from self.store.read_header(self.tx_id)
            if header is not None and header.state != s.STATE_PENDING:
                # A retry with our transaction_id fenced this id before the record existed.
                raise Decided(header) from exc
            # Our own create, its response lost, if it names our nonces; else an id collision.
            if header is None or any(
                (mine := header.entries.get(loc.request.rid)) is None or mine.nonce != loc.nonce
                for loc in locals_
            ):
                if header is not None:
                    # Taken over since: a rollback must know the record exists to decide it.
                    yield from self.view.follow(header)
                raise TransactionError(
                    "our create's answer was lost and the record has changed since",
                    tx_id=self.tx_id,
                ) from exc
            yield from self.view.recorded(locals_, header)
            return
        except ValidationFailed as exc:
            raise AddRefused(rejected(self.tx_id, [loc.request for loc in locals_], exc)) from exc
        self.view.record_created(locals_)

    def _add_in_rows(self, locals_: list[Local], bodies: dict[str, Any]) -> Step[None]:
        """add, in entry rows: claim a row at the version this view holds, then accept it
        there; the record moved meanwhile, the view follows it and tries again."""
        view = self.view
        for _ in range(ROW_ROUNDS):
            refused = self._refused(locals_)
            if refused is not None:
                raise refused
            version, tail = view.version, view.tail
            moved = view.held_entries() if tail is None else {}
            rows = self.store.entry_rows.rows(self.tx_id, version, tail, {**moved, **bodies})
            try:
                for row in rows:
                    yield from self.store.entry_rows.write(row)
                last = rows[-1][s.TX_SK]["S"]
                header = yield from self.store.accept(self.tx_id, version, last, moved=tail is None)
            except ConditionFailed:
                if (yield from self._landed_or_follow(locals_)):
                    return
                continue
            except ValidationFailed as exc:
                raise AddRefused(
                    rejected(self.tx_id, [loc.request for loc in locals_], exc)
                ) from exc
            yield from view.recorded(locals_, header)
            return
        raise TransactionError("the TX record kept changing under an add", tx_id=self.tx_id)

    def _landed_or_follow(self, locals_: list[Local]) -> Step[bool]:
        """An acceptance failed: True if it was ours after all (its answer lost), else the
        view follows the record for another try (Decided: it is no longer pending)."""
        now = yield from self.store.read_header(self.tx_id)
        if now is None or now.state != s.STATE_PENDING:
            raise Decided(now)
        if all_recorded(locals_, now):
            yield from self.view.recorded(locals_, now)
            return True
        yield from self.view.follow(now)
        return False

    def _refused(self, locals_: list[Local]) -> AddRefused | None:
        """What the header's add conditions would refuse, judged on the view (in rows, the
        acceptance at the view's version makes the view the record)."""
        for local in locals_:
            known = self.view.requests.get(local.request.rid)
            if not local.upgrade:
                ok = known is None
            else:
                writes = local.seq - 1
                ok = (
                    known is not None
                    and known.nonce == local.nonce
                    and (known.request.op == "get") == (writes == 0)
                    and (writes == 0 or known.seq == writes)
                )
            if not ok:
                return AddRefused(duplicate(self.tx_id, local.request))
        return None

    def _add_chunk(
        self, chunk: list[Local], bodies: dict[str, dict[str, Any]]
    ) -> Step[ChunkOutcome]:
        upgrades = {loc.request.rid: (loc.nonce, loc.seq - 1) for loc in chunk if loc.upgrade}
        try:
            header = yield from self.store.add(
                self.tx_id, {loc.request.rid: bodies[loc.request.rid] for loc in chunk}, upgrades
            )
        except ConditionFailed:
            return ChunkOutcome((yield from self._settle_add(chunk, bodies)))
        except ValidationFailed as exc:
            return ChunkOutcome(
                AddRefused(rejected(self.tx_id, [loc.request for loc in chunk], exc))
            )
        yield from self.view.recorded(chunk, header)
        return ChunkOutcome()

    def _settle_add(
        self, chunk: list[Local], bodies: dict[str, dict[str, Any]]
    ) -> Step[AddRefused | None]:
        """The add's condition failed: ours (response lost), a duplicate, a decision, or
        the record's entries moved to rows meanwhile (then the add goes there too)."""
        header = yield from self.store.read_header(self.tx_id)
        if header is None or header.state != s.STATE_PENDING:
            raise Decided(header)
        if header.tail is not None and not all_recorded(chunk, header):
            yield from self.view.follow(header)
            try:
                own = {loc.request.rid: bodies[loc.request.rid] for loc in chunk}
                yield from self._add_in_rows(chunk, own)
            except AddRefused as refused:
                return refused
            return None
        for local in chunk:
            req = local.request
            mine = header.entries.get(req.rid)
            if mine is None or not matches(local, mine):
                return AddRefused(duplicate(self.tx_id, req))
        # Every entry is ours: an earlier attempt landed.
        yield from self.view.recorded(chunk, header)
        return None

    def _overwritten(self, entries: list[Entry], planned: Planned) -> dict[str, Entry]:
        """By request id, the read's body a refused upgrade wrote over in the read's row."""
        earlier: dict[str, Entry] = {}
        for entry in entries:
            read = self.view.requests.get(entry.rid)
            if read is not None and read.nonce == entry.nonce and entry.rid in planned.spilled:
                earlier[entry.rid] = body_entry(read)
        return earlier


def all_recorded(locals_: list[Local], header: Header) -> bool:
    """Whether ``header`` names every one of ``locals_`` as they are (nonce, op, write)."""
    return all(
        (entry := header.entries.get(loc.request.rid)) is not None and matches(loc, entry)
        for loc in locals_
    )


def duplicate(tx_id: str, req: Request) -> DuplicateRequestError:
    return DuplicateRequestError(
        "another coordinator of this transaction already wrote this item; a "
        "coordinator cannot yet write over another's write to one item "
        "(write it from the coordinator that wrote it first, or commit)",
        tx_id=tx_id,
        table=req.table,
        key=req.key,
    )


def body_entry(local: Local) -> Entry:
    req = local.request
    return Entry(req.rid, req.op, req.table, req.key, local.nonce, dict(req.params), seq=local.seq)
