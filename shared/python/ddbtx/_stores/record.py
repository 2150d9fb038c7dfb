"""The TX record (a header row, plus body rows for large bodies) and :class:`RecordStore`."""

from __future__ import annotations

import contextlib
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .. import schema as s
from .._base import parts as _parts
from .._base.effects import Step, insert_new, request
from .._base.items import Item, flag, item_size
from ..errors import ConditionFailed, TransactionError
from .entry_rows import ACCEPT_AT_VERSION, EntryRows

#: Body rows the record never named (the coordinator died in between) expire after this.
BODY_ROW_TTL = timedelta(days=7)

_id_lock = threading.Lock()
_last_ns = 0


def new_tx_id(clock_ns: Callable[[], int] = time.time_ns, *, priority: str | None = None) -> str:
    """An id sorting by start time (wound-wait); with ``priority``, as old as that id."""
    global _last_ns
    if priority is not None:
        if not re.fullmatch(r"[0-9a-f]{16}(-[0-9a-f]+)?", priority):
            raise ValueError(f"priority must be a transaction id, not {priority!r:.40}")
        return f"{priority[:16]}-{secrets.token_hex(6)}"
    with _id_lock:
        now = max(clock_ns(), _last_ns + 1)
        _last_ns = now
    return f"{now:016x}-{secrets.token_hex(6)}"


def new_nonce() -> str:
    return secrets.token_hex(4)


def new_lock_value(tx_id: str, nonce: str) -> str:
    return f"{tx_id}/{nonce}"


def shard_of(tx_id: str) -> int:
    return int(tx_id[-4:], 16) % s.SWEEP_SHARDS


@dataclass
class Entry:
    """A request as recorded in the TX record."""

    rid: str
    op: str
    table: str
    key: Item
    nonce: str
    params: dict[str, Any] | None = None  # None when the body has its own row
    spilled: bool = False
    parts: int = 1  # rows the body spans, when it has its own (``_parts``: near 400 KB)
    seq: int = 1  # which write to its item this is, in the transaction (2, 3: rewrites)


@dataclass
class Header:
    """The decoded TX record header."""

    tx_id: str
    state: str
    version: int
    updated_ms: int
    completed: bool
    entries: dict[str, Entry] = field(default_factory=dict)
    raw_size: int = 0
    waiting: bool = False  # its coordinator is blocked on an older transaction's lock
    decided_by: str | None = None  # the transaction that rolled this one back (wound-wait)
    caller_id: str | None = None  # the caller's transaction_id: its alias goes with the record
    tail: str | None = None  # the last accepted entry row: the entries are in rows


def read_row(table: str, key: Item) -> Step[Item | None]:
    resp = yield from request("get_item", TableName=table, Key=key, ConsistentRead=True)
    row: Item | None = resp.get("Item")
    return row


def read_parts(table: str, key: Item, sort_name: str, row: Item) -> Step[dict[str, Any] | None]:
    """A value spanning rows, from its first ``row``; None once a part is gone (deleted)."""
    parts = [row[s.ROW_PART]["B"]]
    for part_key in _parts.part_keys(key, sort_name, _parts.count(row)):
        part = yield from read_row(table, part_key)
        if part is None:
            return None
        parts.append(part[s.ROW_PART]["B"])
    return _parts.join(parts)


def params_to_av(params: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in params.items():
        if name in ("Item", "Key", "ExpressionAttributeValues"):
            out[name] = {"M": value}
        elif name == "ExpressionAttributeNames":
            out[name] = {"M": {k: {"S": v} for k, v in value.items()}}
        elif isinstance(value, bool):
            out[name] = {"BOOL": value}
        else:
            out[name] = {"S": str(value)}
    return {"M": out}


def params_from_av(value: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, av in value["M"].items():
        if name == "ExpressionAttributeNames":
            out[name] = {k: v["S"] for k, v in av["M"].items()}
        elif "M" in av:
            out[name] = av["M"]
        elif "BOOL" in av:
            out[name] = av["BOOL"]
        else:
            out[name] = av["S"]
    return out


def entry_to_av(entry: Entry) -> dict[str, Any]:
    m: dict[str, Any] = {
        "o": {"S": entry.op},
        "t": {"S": entry.table},
        "k": {"M": entry.key},
        "n": {"S": entry.nonce},
    }
    if entry.seq > 1:
        m["w"] = {"N": str(entry.seq)}
    if entry.spilled or entry.params is None:
        # The flag is the body's row count when it spans several (its deleter needs it).
        m["x"] = {"N": str(entry.parts)} if entry.parts > 1 else {"BOOL": True}
    else:
        m["p"] = params_to_av(entry.params)
    return {"M": m}


def entry_from_av(rid: str, value: dict[str, Any]) -> Entry:
    m = value["M"]
    return Entry(
        rid=rid,
        op=m["o"]["S"],
        table=m["t"]["S"],
        key=m["k"]["M"],
        nonce=m["n"]["S"],
        params=params_from_av(m["p"]) if "p" in m else None,
        spilled="x" in m,
        parts=int(m["x"]["N"]) if "N" in m.get("x", {}) else 1,
        seq=int(m["w"]["N"]) if "w" in m else 1,
    )


def header_from_item(item: Item) -> Header:
    requests = item.get(s.TX_REQUESTS, {"M": {}})["M"]
    return Header(
        tx_id=item[s.TX_PK]["S"],
        state=item[s.TX_STATE]["S"],
        version=int(item[s.TX_VERSION]["N"]),
        updated_ms=int(item[s.TX_UPDATED]["N"]),
        completed=flag(item, s.TX_COMPLETED),
        entries={rid: entry_from_av(rid, av) for rid, av in requests.items()},
        raw_size=item_size(item),
        waiting=s.TX_WAITING in item,
        decided_by=item[s.TX_DECIDED_BY]["S"] if s.TX_DECIDED_BY in item else None,
        caller_id=item[s.TX_CALLER_ID]["S"] if s.TX_CALLER_ID in item else None,
        tail=item[s.TX_TAIL]["S"] if s.TX_TAIL in item else None,
    )


#: create: transaction ids are unique, so a failure is our own retried write.
CREATE = "attribute_not_exists(#id)"
#: add: only a pending transaction takes requests (one per item: see ADD_NEW / ADD_UPGRADE).
PENDING = "#st = :p"
#: add (in the header): pending, its entries still in the header (none moved to rows).
PENDING_INLINE = "#st = :p AND attribute_not_exists(#tl)"
#: add (new item): the transaction has no request on this item yet.
ADD_NEW = "attribute_not_exists(#rq.#r{i})"
#: add (upgrade): a pending transaction turns its own read lock (same nonce) into a write.
ADD_UPGRADE = "#rq.#r{i}.#o = :get AND #rq.#r{i}.#n = :n{i}"
#: add (second write to an item): replaces the first write's entry, same nonce (its lock).
ADD_REWRITE_FIRST = (
    "#rq.#r{i}.#n = :n{i} AND #rq.#r{i}.#o <> :get AND attribute_not_exists(#rq.#r{i}.#w)"
)
#: add (a later write): replaces the entry of exactly the write before it, same nonce.
ADD_REWRITE = "#rq.#r{i}.#n = :n{i} AND #rq.#r{i}.#w = :w{i}"
#: take over: the request still carries the nonce this coordinator saw, while pending.
TAKE_OVER = "#st = :p AND #rq.#rid.#n = :old AND attribute_not_exists(#tl)"
#: decide (commit): pending, at exactly the version whose requests the committer saw applied.
DECIDE_AT_VERSION = "#st = :p AND #v = :v"
#: decide (sweep): pending and unchanged since the sweeper saw it stale (``ts``).
DECIDE_IF_UNCHANGED = "#st = :p AND #ts = :seen"
#: complete: only a decided record is marked completed, and only once.
MARK_COMPLETED = "#st = :st AND attribute_not_exists(#fin)"
#: delete: never a record whose items may still be locked.
DELETE_COMPLETED = "#fin = :t"


class RecordStore:
    """Every read and write of TX records; stateless."""

    def __init__(
        self, table: str, *, clock: Callable[[], float], completed_ttl_seconds: int
    ) -> None:
        self.table = table
        self.clock = clock
        self.completed_ttl_seconds = completed_ttl_seconds
        self.entry_rows = EntryRows(
            table, clock=clock, ttl_seconds=int(BODY_ROW_TTL.total_seconds())
        )

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def header_key(self, tx_id: str) -> Item:
        return {s.TX_PK: {"S": tx_id}, s.TX_SK: {"S": s.TX_HEADER_SK}}

    def body_key(self, tx_id: str, entry: Entry) -> Item:
        """With the nonce: of two coordinators adding one item, the loser cannot overwrite it."""
        return {s.TX_PK: {"S": tx_id}, s.TX_SK: {"S": f"r#{entry.rid}#{entry.nonce}"}}

    def read_header(self, tx_id: str) -> Step[Header | None]:
        item = yield from read_row(self.table, self.header_key(tx_id))
        return (yield from self.whole(item)) if item is not None else None

    def whole(self, item: Item, *, strict: bool = True) -> Step[Header]:
        """The header of ``item`` with all its entries: those in rows read along their chain
        (a row gone from it raises, unless the record is completed or not ``strict``)."""
        header = header_from_item(item)
        if header.tail is not None:
            chained = yield from self.entry_rows.chained(
                header.tx_id, header.tail, partial=header.completed or not strict
            )
            header.entries.update((rid, entry_from_av(rid, av)) for rid, av in chained.items())
        return header

    def accept(self, tx_id: str, version: int, tail: str, *, moved: bool) -> Step[Header]:
        """accept: the header names entry rows up to ``tail`` (``moved``: its own entries
        went to the first of them); the header after, its entries left out."""
        names = {
            "#st": s.TX_STATE,
            "#v": s.TX_VERSION,
            "#ts": s.TX_UPDATED,
            "#tl": s.TX_TAIL,
            "#wt": s.TX_WAITING,
        }
        values = {
            ":p": {"S": s.STATE_PENDING},
            ":v": {"N": str(version)},
            ":one": {"N": "1"},
            ":now": {"N": str(self.now_ms())},
            ":tl": {"S": tail},
        }
        removed = "#wt"
        if moved:
            names["#rq"] = s.TX_REQUESTS
            removed += ", #rq"
        update = f"SET #v = #v + :one, #ts = :now, #tl = :tl REMOVE {removed}"
        resp = yield from self._send(
            tx_id, update, ACCEPT_AT_VERSION, names, values, ReturnValues="ALL_NEW"
        )
        return header_from_item(resp["Attributes"])

    def load_params(self, tx_id: str, entry: Entry) -> Step[dict[str, Any]]:
        if entry.params is not None:
            return entry.params
        key = self.body_key(tx_id, entry)
        row = yield from read_row(self.table, key)
        # None: gone, or a part deleted after the first row (the record is being deleted)
        value = row and (row.get("p") or (yield from read_parts(self.table, key, s.TX_SK, row)))
        if value is None:
            raise TransactionError(
                f"the body of request {entry.rid} is gone from the TX record", tx_id=tx_id
            )
        entry.params = params_from_av(value)
        return entry.params

    def body_rows(self, tx_id: str, entry: Entry) -> list[Item]:
        """The row(s) of a request body kept apart from the header; sets ``entry.parts``."""
        expires = int(self.clock() + BODY_ROW_TTL.total_seconds())
        key = self.body_key(tx_id, entry)
        first = {**key, "n": {"S": entry.nonce}, s.TX_TTL: {"N": str(expires)}}
        body = params_to_av(entry.params or {})
        row = {**first, "p": body}
        rows = [row] if _parts.fits(row) else _parts.rows(first, key, s.TX_SK, body)
        entry.parts = len(rows)
        return rows

    def body_keys(self, tx_id: str, entry: Entry) -> list[Item]:
        key = self.body_key(tx_id, entry)
        return [key, *_parts.part_keys(key, s.TX_SK, entry.parts)]

    def _new_header(self, tx_id: str, state: str, tag: str, bodies: dict[str, Any]) -> Item:
        return {
            **self.header_key(tx_id),
            s.TX_STATE: {"S": state},
            s.TX_VERSION: {"N": "1"},
            s.TX_UPDATED: {"N": str(self.now_ms())},
            s.TX_SWEEP_KEY: {"S": f"{tag}#{shard_of(tx_id)}"},
            s.TX_REQUESTS: {"M": bodies},
        }

    def create(
        self, tx_id: str, bodies: dict[str, dict[str, Any]], *, caller_id: str | None = None
    ) -> Step[None]:
        """create + add: write the header with its first requests (raises ConditionFailed)."""
        item = self._new_header(tx_id, s.STATE_PENDING, s.STATE_PENDING, bodies)
        if caller_id is not None:
            item[s.TX_CALLER_ID] = {"S": caller_id}
        yield from request(
            "put_item",
            TableName=self.table,
            Item=item,
            ConditionExpression=CREATE,
            ExpressionAttributeNames={"#id": s.TX_PK},
        )

    def create_completed(
        self, tx_id: str, caller_id: str, state: str, *, resent: list[bool] | None = None
    ) -> Step[bool]:
        """create, completed, no requests (False: it exists): an alias's fence, or an empty tx."""
        item = {
            **self._new_header(tx_id, state, s.STATE_COMPLETED_TAG, {}),
            s.TX_COMPLETED: {"BOOL": True},
            s.TX_TTL: {"N": str(int(self.clock()) + self.completed_ttl_seconds)},
            s.TX_CALLER_ID: {"S": caller_id},
        }
        return (yield from insert_new(self.table, item, CREATE, s.TX_PK, resent=resent))

    def add(
        self, tx_id: str, bodies: dict[str, dict[str, Any]], upgrades: dict[str, tuple[str, int]]
    ) -> Step[Header]:
        """add (drops the wait mark); ``upgrades``: by rid, our nonce and the writes it replaces."""
        names = {
            "#rq": s.TX_REQUESTS,
            "#st": s.TX_STATE,
            "#v": s.TX_VERSION,
            "#ts": s.TX_UPDATED,
            "#wt": s.TX_WAITING,
            "#tl": s.TX_TAIL,
        }
        values: dict[str, Any] = {
            ":p": {"S": s.STATE_PENDING},
            ":one": {"N": "1"},
            ":now": {"N": str(self.now_ms())},
        }
        sets, conditions = ["#v = #v + :one", "#ts = :now"], [PENDING_INLINE]
        for i, (rid, body) in enumerate(bodies.items()):
            names[f"#r{i}"] = rid
            values[f":e{i}"] = body
            sets.append(f"#rq.#r{i} = :e{i}")
            if rid not in upgrades:
                conditions.append(ADD_NEW.format(i=i))
                continue
            nonce, writes = upgrades[rid]
            names["#n"] = "n"
            values[f":n{i}"] = {"S": nonce}
            if writes == 0:
                names["#o"], values[":get"] = "o", {"S": "get"}
                conditions.append(ADD_UPGRADE.format(i=i))
            elif writes == 1:
                names["#o"], names["#w"], values[":get"] = "o", "w", {"S": "get"}
                conditions.append(ADD_REWRITE_FIRST.format(i=i))
            else:
                names["#w"], values[f":w{i}"] = "w", {"N": str(writes)}
                conditions.append(ADD_REWRITE.format(i=i))
        update = "SET " + ", ".join(sets) + " REMOVE #wt"
        condition = " AND ".join(conditions)
        resp = yield from self._send(
            tx_id, update, condition, names, values, ReturnValues="ALL_NEW"
        )
        return header_from_item(resp["Attributes"])

    def take_over(self, tx_id: str, rid: str, old: str, new: str) -> Step[Header]:
        """take over: give a recorded request a fresh nonce (raises ConditionFailed)."""
        names = {
            "#rq": s.TX_REQUESTS,
            "#rid": rid,
            "#n": "n",
            "#v": s.TX_VERSION,
            "#st": s.TX_STATE,
            "#tl": s.TX_TAIL,
        }
        values = {
            ":new": {"S": new},
            ":old": {"S": old},
            ":one": {"N": "1"},
            ":p": {"S": s.STATE_PENDING},
        }
        update = "SET #rq.#rid.#n = :new, #v = #v + :one"
        resp = yield from self._send(
            tx_id, update, TAKE_OVER, names, values, ReturnValues="ALL_NEW"
        )
        return header_from_item(resp["Attributes"])

    def _send(
        self,
        tx_id: str,
        update: str,
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
        resent: list[bool] | None = None,
        **extra: Any,
    ) -> Step[Any]:
        """A conditional update of the header (``ReturnValues="ALL_NEW"``: the header after)."""
        return (
            yield from request(
                "update_item",
                resent=resent,
                TableName=self.table,
                Key=self.header_key(tx_id),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                **extra,
            )
        )

    def mark_waiting(self, tx_id: str, owner: str) -> Step[None]:
        """wait mark: ``v`` and ``ts`` stay, so a wait does not look like progress."""
        names = {"#wt": s.TX_WAITING, "#st": s.TX_STATE}
        values = {":owner": {"S": owner}, ":p": {"S": s.STATE_PENDING}}
        yield from self._send(tx_id, "SET #wt = :owner", PENDING, names, values)

    def decide(
        self,
        tx_id: str,
        to_state: str,
        *,
        expect_version: int | None = None,
        expect_updated_ms: int | None = None,
        by: str | None = None,
        resent: list[bool] | None = None,
    ) -> Step[Header | None]:
        """decide: the header after (as read if the condition fails; None: gone)."""
        names = {"#st": s.TX_STATE, "#v": s.TX_VERSION, "#ts": s.TX_UPDATED, "#sw": s.TX_SWEEP_KEY}
        values: dict[str, Any] = {
            ":p": {"S": s.STATE_PENDING},
            ":to": {"S": to_state},
            ":one": {"N": "1"},
            ":now": {"N": str(self.now_ms())},
            ":sw": {"S": f"{to_state}#{shard_of(tx_id)}"},
        }
        update = "SET #st = :to, #v = #v + :one, #ts = :now, #sw = :sw"
        if by is not None:
            names["#by"] = s.TX_DECIDED_BY
            values[":by"] = {"S": by}
            update += ", #by = :by"
        condition = PENDING
        if expect_version is not None:
            condition = DECIDE_AT_VERSION
            values[":v"] = {"N": str(expect_version)}
        if expect_updated_ms is not None:
            condition = DECIDE_IF_UNCHANGED
            values[":seen"] = {"N": str(expect_updated_ms)}
        try:
            resp = yield from self._send(
                tx_id, update, condition, names, values, resent, ReturnValues="ALL_NEW"
            )
            # (the decider completes with what it knows too: a row gone is not its stop)
            return (yield from self.whole(resp["Attributes"], strict=False))
        except ConditionFailed:
            return (yield from self.read_header(tx_id))

    def mark_completed(self, header: Header) -> Step[None]:
        """complete (last step): every item is completed; TTL may delete the record later."""
        # Failing means another coordinator completed (or deleted) the record first.
        with contextlib.suppress(ConditionFailed):
            yield from request("update_item", **self.completing(header))
        header.completed = True

    def completing(self, header: Header) -> dict[str, Any]:
        """The write that marks ``header`` completed (``MARK_COMPLETED``), as a request's
        parameters: sent alone, or as the ``Update`` of a ``TransactWriteItems``."""
        names, values = self._completed_names(header)
        values[":now"] = {"N": str(self.now_ms())}
        values[":ttl"] = {"N": str(int(self.clock()) + self.completed_ttl_seconds)}
        values[":one"] = {"N": "1"}
        names.update(
            {"#sw": s.TX_SWEEP_KEY, "#ts": s.TX_UPDATED, "#ttl": s.TX_TTL, "#v": s.TX_VERSION}
        )
        values[":t"] = {"BOOL": True}
        values[":sw"] = {"S": f"{s.STATE_COMPLETED_TAG}#{shard_of(header.tx_id)}"}
        return {
            "TableName": self.table,
            "Key": self.header_key(header.tx_id),
            "UpdateExpression": "SET #fin = :t, #sw = :sw, #ts = :now, #ttl = :ttl, #v = #v + :one",
            "ConditionExpression": MARK_COMPLETED,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }

    def not_completed(self, header: Header) -> dict[str, Any]:
        """``MARK_COMPLETED`` as a ``ConditionCheck``: ``header`` is decided and not yet
        completed (what a part of its completion sent before the record's own needs)."""
        names, values = self._completed_names(header)
        return {
            "TableName": self.table,
            "Key": self.header_key(header.tx_id),
            "ConditionExpression": MARK_COMPLETED,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }

    @staticmethod
    def _completed_names(header: Header) -> tuple[dict[str, str], dict[str, Any]]:
        return {"#fin": s.TX_COMPLETED, "#st": s.TX_STATE}, {":st": {"S": header.state}}

    def delete(
        self, header: Header, write_batches: Callable[[str, list[Any]], Step[None]]
    ) -> Step[None]:
        """delete: remove a completed record and its body rows."""
        tx_id = header.tx_id
        spilled = [entry for entry in header.entries.values() if entry.spilled]
        # First rows in an earlier batch: a reader that finds one finds all its parts.
        firsts = [self.body_key(tx_id, e) for e in spilled]
        further = [k for e in spilled for k in self.body_keys(tx_id, e)[1:]]
        # Entry rows after the bodies they name, never accepted ones too (those of a record
        # that never moved to rows expire by their TTL, as unnamed bodies do).
        moved = header.tail is not None
        rows = yield from self.entry_rows.all_rows(tx_id, keys_only=True, moved=moved)
        for keys in (firsts, further, rows):
            yield from write_batches(self.table, [{"DeleteRequest": {"Key": k}} for k in keys])
        try:
            yield from request(
                "delete_item",
                TableName=self.table,
                Key=self.header_key(tx_id),
                ConditionExpression=DELETE_COMPLETED,
                ExpressionAttributeNames={"#fin": s.TX_COMPLETED},
                ExpressionAttributeValues={":t": {"BOOL": True}},
            )
        except ConditionFailed:
            if (yield from self.read_header(tx_id)) is not None:
                raise
