"""create/add: record requests and their nonces before any item is touched."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import schema as s
from ._body_rows import Planned
from ._effects import Step, gather
from ._record import Entry
from ._view import AddRefused, Decided, Local, RecordView, matches, rejected
from .errors import ConditionFailed, DuplicateRequestError, TransactionError, ValidationFailed

#: Requests per header write when adding a batch (keeps expressions under 4 KB).
ADD_BATCH = 20


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
            planned = view.bodies.plan([body_entry(local) for local in locals_])
            try:
                yield from view.write_rows(planned.rows)
                if not view.created:
                    yield from self._create(locals_, planned.bodies)
                    return
                chunks = [locals_[i : i + ADD_BATCH] for i in range(0, len(locals_), ADD_BATCH)]
                outcomes = yield from gather(self._add_chunk(c, planned.bodies) for c in chunks)
                recorded = [
                    loc
                    for c, o in zip(chunks, outcomes, strict=True)
                    if o.refused is None
                    for loc in c
                ]
                refusals = [o.refused for o in outcomes if o.refused is not None]
                if refusals:
                    refusals[0].partial = bool(recorded)
                    raise refusals[0]
            except AddRefused:
                named = {loc.request.rid for loc in recorded}
                view.bodies.undo(planned, named)
                unnamed = [e for e in planned.rows if e.rid not in named]
                yield from view.bodies.drop(unnamed, self._overwritten(unnamed, planned))
                raise

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

    def _add_chunk(
        self, chunk: list[Local], bodies: dict[str, dict[str, Any]]
    ) -> Step[ChunkOutcome]:
        upgrades = {loc.request.rid: (loc.nonce, loc.seq - 1) for loc in chunk if loc.upgrade}
        try:
            header = yield from self.store.add(
                self.tx_id, {loc.request.rid: bodies[loc.request.rid] for loc in chunk}, upgrades
            )
        except ConditionFailed:
            return ChunkOutcome((yield from self._settle_add(chunk)))
        except ValidationFailed as exc:
            return ChunkOutcome(
                AddRefused(rejected(self.tx_id, [loc.request for loc in chunk], exc))
            )
        yield from self.view.recorded(chunk, header)
        return ChunkOutcome()

    def _settle_add(self, chunk: list[Local]) -> Step[AddRefused | None]:
        """The add's condition failed: ours (response lost), a duplicate, or a decision."""
        header = yield from self.store.read_header(self.tx_id)
        if header is None or header.state != s.STATE_PENDING:
            raise Decided(header)
        for local in chunk:
            req = local.request
            mine = header.entries.get(req.rid)
            if mine is None or not matches(local, mine):
                return AddRefused(
                    DuplicateRequestError(
                        "another coordinator of this transaction already wrote this item; a "
                        "coordinator cannot yet write over another's write to one item "
                        "(write it from the coordinator that wrote it first, or commit)",
                        tx_id=self.tx_id,
                        table=req.table,
                        key=req.key,
                    )
                )
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


def body_entry(local: Local) -> Entry:
    req = local.request
    return Entry(req.rid, req.op, req.table, req.key, local.nonce, dict(req.params), seq=local.seq)
