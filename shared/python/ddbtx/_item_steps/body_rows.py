"""The request bodies with rows of their own, as one coordinator knows them. Its lock is taken
inside the view's, never the other way round, and never across a request."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .._base.effects import Step
from .._base.items import item_size
from .._stores.record import Entry, Header, RecordStore, entry_to_av

logger = logging.getLogger(__name__)

#: Request bodies larger than this go to their own row instead of the header.
SPILL_BYTES = 16 * 1024
#: The header moves every body to a row once it reaches this size: each change to it is
#: billed for its whole size, so a large transaction pays a put per body row instead.
HEADER_SOFT_LIMIT = 32 * 1024

#: :meth:`ddbtx._stores.completion.Completion.write_batches`.
WriteBatches = Callable[[str, list[Any]], Step[None]]


@dataclass(frozen=True, slots=True)
class Planned:
    """An add's bodies laid out, and what was known before (for :meth:`BodyRows.undo`)."""

    bodies: dict[str, dict[str, Any]]
    rows: list[Entry]
    header_bytes: int
    spilled: frozenset[str]
    parts: dict[str, int]


class BodyRows:
    """The body rows of one transaction as one coordinator knows them."""

    def __init__(self, tx_id: str, store: RecordStore, *, write_batches: WriteBatches) -> None:
        self.tx_id = tx_id
        self.store = store
        self._write_batches = write_batches
        self._spilled: set[str] = set()  # requests whose body has its own row
        self._parts: dict[str, int] = {}  # rows of each such body (more than one near 400 KB)
        self._header_bytes = 0
        self._lock = threading.Lock()

    def has_row(self, rid: str) -> bool:
        with self._lock:
            return rid in self._spilled

    def parts(self, rid: str) -> int:
        with self._lock:
            return self._parts.get(rid, 1)

    def adopt(self, header: Header) -> None:
        """The record moved on to ``header``: its size, and the bodies it keeps in rows."""
        with self._lock:
            self._header_bytes = header.raw_size
            for entry in header.entries.values():
                if entry.spilled:
                    self._spilled.add(entry.rid)
                    self._parts[entry.rid] = entry.parts
                else:  # (an earlier write's body had a row; this one's is in the entry)
                    self._spilled.discard(entry.rid)
                    self._parts.pop(entry.rid, None)

    def header_after(self, entries: list[Entry]) -> int:
        """About the header's size once it holds ``entries`` too (large bodies apart)."""
        with self._lock:
            sizes = (item_size({"x": entry_to_av(e)}) for e in entries)
            # (a body larger than SPILL_BYTES leaves a small entry behind)
            return self._header_bytes + sum(n if n <= SPILL_BYTES else 256 for n in sizes)

    def plan(self, entries: list[Entry], *, in_rows: bool = False) -> Planned:
        """Lay out the bodies of ``entries``: in the header (``in_rows``: in entry rows,
        which take the header's place), or in rows of their own."""
        with self._lock:
            before = (self._header_bytes, frozenset(self._spilled), dict(self._parts))
            bodies: dict[str, dict[str, Any]] = {}
            rows: list[Entry] = []
            room = HEADER_SOFT_LIMIT if not in_rows else SPILL_BYTES
            for entry in entries:
                body = entry_to_av(entry)
                size = item_size({"x": body})
                held = 0 if in_rows else self._header_bytes
                if size > SPILL_BYTES or held + size > room:
                    row_entry = replace(entry)
                    self.store.body_rows(self.tx_id, row_entry)  # counts its rows (near 400 KB: >1)
                    rows.append(row_entry)
                    entry.spilled, entry.params, entry.parts = True, None, row_entry.parts
                    body = entry_to_av(entry)
                    size = item_size({"x": body})
                else:
                    self._spilled.discard(entry.rid)  # a later write's body kept inline
                if not in_rows:
                    self._header_bytes += size
                bodies[entry.rid] = body
        return Planned(bodies, rows, *before)

    def undo(self, planned: Planned, recorded: set[str]) -> None:
        """An add was refused: back to before :meth:`plan`, but for those ``recorded``."""
        with self._lock:
            self._header_bytes = planned.header_bytes
            self._spilled = set(planned.spilled) | (recorded & self._spilled)
            self._parts = planned.parts | {
                rid: self._parts[rid] for rid in recorded if rid in self._parts
            }

    def write(self, entries: list[Entry]) -> Step[None]:
        """Put the rows of ``entries``' bodies, before the record names them."""
        yield from self._write_batches(
            self.store.table,
            [
                {"PutRequest": {"Item": row}}
                for e in entries
                for row in self.store.body_rows(self.tx_id, e)
            ],
        )
        with self._lock:
            self._spilled.update(e.rid for e in entries)
            self._parts.update((e.rid, e.parts) for e in entries)

    def drop(self, entries: list[Entry], earlier: Mapping[str, Entry] | None = None) -> Step[None]:
        """Delete unnamed body rows; one in ``earlier`` (a refused upgrade's) gets its read back."""
        rows: list[dict[str, Any]] = []
        for entry in entries:
            restored = (earlier or {}).get(entry.rid)
            puts = [] if restored is None else self.store.body_rows(self.tx_id, restored)
            rows.extend({"PutRequest": {"Item": row}} for row in puts)
            surplus = self.store.body_keys(self.tx_id, entry)[len(puts) :]
            rows.extend({"DeleteRequest": {"Key": key}} for key in surplus)
        try:
            yield from self._write_batches(self.store.table, rows)
        except Exception:  # rows the record never names expire by their TTL
            logger.warning("could not undo unnamed body rows of %s", self.tx_id, exc_info=True)
