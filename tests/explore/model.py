"""What each scripted request does, and the invariants checked after a schedule.

Every write carries a marker naming the request (``w`` on a put's item, an
attribute ``u_<request>`` set by an update that also does ``ADD n 1``), so the
final items say exactly which requests were applied and how often.

The TX record is read as stored (``ddbtx.schema``'s attribute names; each
request as ``{o: op, t: table, k: key, n: nonce, p: params}``), not through
the core's classes, so the checks survive the core's reshaping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddbtx import schema as s

from .world import DATA, INITIAL

Item = dict[str, Any]


def request_params(rq: str, op: str, pk: str, n: int) -> dict[str, Any]:
    """The boto3 parameters of scripted request ``rq`` (``n`` makes a put's value unique)."""
    key = {"pk": {"S": pk}}
    if op == "put":
        return {"TableName": DATA, "Item": {**key, "n": {"N": str(n)}, "w": {"S": rq}}}
    if op == "update":
        return {
            "TableName": DATA,
            "Key": key,
            "UpdateExpression": "ADD #n :one SET #m = :t",
            "ExpressionAttributeNames": {"#n": "n", "#m": f"u_{rq}"},
            "ExpressionAttributeValues": {":one": {"N": "1"}, ":t": {"BOOL": True}},
        }
    return {"TableName": DATA, "Key": key}


@dataclass
class Listed:
    """One request as the TX record lists it."""

    op: str
    pk: str
    marker: str | None  #: the request name for a put or update (None: delete, get, spilled)
    nonce: str
    seq: int = 1  #: which write to the item it is (a later write replaces the entry)

    def describe(self) -> str:
        return f"{self.op} {self.pk}" + (f" ({self.marker})" if self.marker else "")


@dataclass
class Record:
    state: str
    completed: bool
    listed: dict[str, Listed] = field(default_factory=dict)  #: by item
    spilled_rows: set[str] = field(default_factory=set)  #: sort keys of named body rows


#: In a header read through :func:`with_chain`: the sort keys of its chain's rows.
CHAIN = "__chain"


def with_chain(header: Item, rows: list[Item]) -> Item:
    """A header whose entries are in rows (``tl``), as if it held them: the rows from
    ``tl`` back along ``pv``, each later row's entry for a request replacing the earlier."""
    by_sk = {row[s.TX_SK]["S"]: row for row in rows}
    chain: list[Item] = []
    sk = header[s.TX_TAIL]["S"]
    while sk in by_sk:
        chain.append(by_sk[sk])
        sk = by_sk[sk].get("pv", {}).get("S")
    entries = dict(header.get(s.TX_REQUESTS, {"M": {}})["M"])
    for row in reversed(chain):
        entries.update(row["e"]["M"])
    return {
        **header,
        s.TX_REQUESTS: {"M": entries},
        CHAIN: [row[s.TX_SK]["S"] for row in chain],
    }


def read_record(raw: Item) -> Record:
    record = Record(raw[s.TX_STATE]["S"], raw.get(s.TX_COMPLETED) == {"BOOL": True})
    for rid, value in raw.get(s.TX_REQUESTS, {"M": {}})["M"].items():
        m = value["M"]
        pk = m["k"]["M"]["pk"]["S"]
        params = m.get("p", {}).get("M", {})
        marker = None
        if "Item" in params:
            marker = params["Item"]["M"].get("w", {}).get("S")
        elif "ExpressionAttributeNames" in params:
            marker = params["ExpressionAttributeNames"]["M"].get("#m", {}).get("S", "")[2:]
        seq = int(m["w"]["N"]) if "w" in m else 1
        record.listed[pk] = Listed(m["o"]["S"], pk, marker or None, m["n"]["S"], seq)
        if "x" in m:  # a body row; near 400 KB, ``x`` counts the rows it spans
            first = f"r#{rid}#{m['n']['S']}"
            parts = int(m["x"]["N"]) if "N" in m["x"] else 1
            record.spilled_rows.update([first, *(f"{first}#{k}" for k in range(1, parts))])
    return record


def expected_item(
    pk: str, listed: Listed | None, put_items: dict[str, Item], chain: list[tuple[str, str]]
) -> Item | None:
    """The item after a commit that applied ``listed`` (None: nothing listed) exactly once,
    after the earlier writes of its ``chain`` ((op, name) in order, the listed one last)."""
    item = INITIAL[pk]
    if listed is None or listed.op == "get":
        return item
    for op, name in chain:
        if op == "delete":
            item = None
        elif op == "put":
            item = put_items.get(name)
        else:
            base = dict(item or {"pk": {"S": pk}})
            base["n"] = {"N": str(int(base.get("n", {"N": "0"})["N"]) + 1)}
            base[f"u_{name}"] = {"BOOL": True}
            item = base
    return item


def chain_of(listed: Listed, seen: list[Seen]) -> list[tuple[str, str]]:
    """The writes to ``listed``'s item that its entry stands for, in order: the listed one
    (the latest) and the ``seq - 1`` writes to the item its coordinator made before it.

    The listed call is the last one of its operation (and marker) on the item whose
    coordinator had made exactly ``seq - 1`` writes to the item before it: a later write
    is recorded only once the one before it returned. (A delete carries no marker, so
    another coordinator's refused delete of the item must not be taken for it.)
    """
    calls = [(obs, name, op, pk) for obs in seen for name, op, pk in obs.requests]

    def earlier(last: int) -> list[tuple[str, str]]:
        owner = calls[last][0].owner
        return [
            (op, name)
            for obs, name, op, pk in calls[:last]
            if obs.owner == owner and pk == listed.pk and op != "get" and obs.outcome == "ok"
        ]

    mine = [
        i
        for i, (_, name, op, pk) in enumerate(calls)
        if pk == listed.pk
        and op == listed.op
        and listed.marker in (None, name)
        and len(earlier(i)) == listed.seq - 1
    ]
    if mine:
        last = mine[-1]
        return [*earlier(last), (listed.op, calls[last][1])]
    return _shared_chain(listed, calls) or [(listed.op, listed.marker or "")]


def _shared_chain(listed: Listed, calls: list[tuple[Seen, str, str, str]]) -> list[tuple[str, str]]:
    """A chain built by more than one coordinator: one that resumed after another's write
    to the item rewrites on top of it. Every write to the item that returned before the
    listed one, in order, with identical deletes of two coordinators joined as one (a
    delete carries no marker), must then make exactly the ``seq - 1`` earlier writes."""
    for last in reversed(range(len(calls))):
        _, name, op, pk = calls[last]
        if pk != listed.pk or op != listed.op or listed.marker not in (None, name):
            continue
        chain: list[tuple[str, str]] = []
        for before, n, o, k in calls[:last]:
            if k != listed.pk or o == "get" or before.outcome != "ok":
                continue
            if o == "delete" and chain and chain[-1][0] == "delete":
                continue  # the same delete, sent by two coordinators: one recorded request
            chain.append((o, n))
        if len(chain) == listed.seq - 1:
            return [*chain, (op, name)]
    return []


@dataclass
class Seen:
    """What one participant saw from one public call."""

    owner: str
    action: str  #: e.g. "c1r0 update a", "commit", "resume", "recover"
    outcome: str  #: "ok", an exception class name, or "crash"
    requests: tuple[tuple[str, str, str], ...] = ()  #: (name, op, item) the call made

    def line(self) -> str:
        return f"{self.owner} {self.action} -> {self.outcome}"


def check(
    raw: Item | None,
    items: dict[str, Item],
    residue: list[str],
    seen: list[Seen],
    put_items: dict[str, Item],
) -> list[str]:
    """Every invariant of the issue, from the final record and items; the violations."""
    problems = list(residue)
    record = read_record(raw) if raw is not None else None
    if record is None:
        state = s.STATE_ROLLED_BACK  # never recorded: nothing may have changed
    else:
        state = record.state
        if state == s.STATE_PENDING or not record.completed:
            problems.append(f"record left not completed in state {state}")
    listed = record.listed if record is not None and state == s.STATE_COMMITTED else {}
    chains = {pk: chain_of(entry, seen) for pk, entry in listed.items()}
    for pk in INITIAL:
        want = expected_item(pk, listed.get(pk), put_items, chains.get(pk, []))
        got = items.get(pk)
        if want != got:
            what = listed[pk].describe() if pk in listed else "nothing"
            problems.append(
                f"item {pk}: {_show(got)}, expected {_show(want)} "
                f"(record {state}, lists {what} on {pk})"
            )
    for obs in seen:
        # No record: nothing was ever recorded (an empty commit writes nothing either).
        problems += _promises(obs, state, listed, chains) if record is not None else []
    return problems


def _promises(
    obs: Seen, state: str, listed: dict[str, Listed], chains: dict[str, list[tuple[str, str]]]
) -> list[str]:
    """What a call that returned tells about the outcome."""
    out: list[str] = []
    if obs.action == "commit" and obs.outcome == "ok" and state != s.STATE_COMMITTED:
        out.append(f"{obs.owner}'s commit() returned normally, but the record is {state}")
    if obs.action == "commit" and obs.outcome == "TransactionRolledBackError" and state != "R":
        out.append(f"{obs.owner}'s commit() said rolled back, but the record is {state}")
    if obs.action == "rollback" and obs.outcome == "ok" and state != s.STATE_ROLLED_BACK:
        out.append(f"{obs.owner}'s rollback() returned normally, but the record is {state}")
    if obs.outcome != "ok" or state != s.STATE_COMMITTED:
        return out
    for name, op, pk in obs.requests:
        entry = listed.get(pk)
        if entry is None:
            out.append(f"{obs.owner}'s {name} ({op} {pk}) returned normally; not listed")
        elif (
            op != "get"
            and not _in_chain(op, name, chains.get(pk, []))
            and (entry.op != op or (op != "delete" and entry.marker != name))
        ):
            out.append(
                f"{obs.owner}'s {name} ({op} {pk}) returned normally; the committed record "
                f"lists {entry.describe()} on {pk} instead"
            )
    return out


def _in_chain(op: str, name: str, chain: list[tuple[str, str]]) -> bool:
    """Whether a returned write is one of the writes a record's entry stands for. Two
    coordinators sending the same delete join one recorded request (a delete carries
    no marker), so any delete of the chain is theirs too."""
    return (op, name) in chain or (op == "delete" and any(o == "delete" for o, _ in chain))


def _show(item: Item | None) -> str:
    if item is None:
        return "absent"
    parts = []
    for name in sorted(item):
        if name == "pk":
            continue
        ((kind, value),) = item[name].items()
        parts.append(f"{name}={value}" if kind != "BOOL" else name)
    return "{" + ", ".join(parts) + "}"
