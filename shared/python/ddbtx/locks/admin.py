"""Table creation, the operator's lock listing, and the janitor's sweep."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from .. import schema
from .._base.drive import drive
from .._base.effects import Step, request
from ..errors import ConditionFailed, TableNotFound
from ..tables import ensure_table
from . import _rows as rows
from ._line import Entry
from ._line import entries as line_entries
from .breaking import Kind

logger = logging.getLogger(__name__)

_KEY_SCHEMA = [
    {"AttributeName": schema.LOCK_PK, "KeyType": "HASH"},
    {"AttributeName": schema.LOCK_SK, "KeyType": "RANGE"},
]

# Sweep candidates: rows of the earlier layouts (no counter) past their TTL by more than
# the grace, or a held mutex whose holder's own expiry is more than the grace past.
SWEEP_FILTER = (
    "(#ttl < :cutoff AND attribute_not_exists(#fence) AND attribute_not_exists(#next))"
    " OR (#sk = :mutex AND attribute_exists(#owner) AND attribute_exists(#fence)"
    " AND #exp < :cutoff)"
)
# Free an expired mutex: its holder and expiry exactly as read, keeping the counter.
SWEEP_FREE = "#rvn = :rvn AND #exp = :exp AND attribute_exists(#fence)"
_FREE = "REMOVE #owner, #rvn, #at, #exp"
#: Every attribute the sweep's UpdateItem names (keys included): the CDK app lets the
#: sweeper update the locks table with these only, so it cannot break a lock (a break
#: always writes ``brk``, and lease and FIFO holders live in other attributes).
SWEEP_FREE_ATTRIBUTES: Final = (
    schema.LOCK_PK, schema.LOCK_SK,
    rows.OWNER, rows.RVN, rows.ACQUIRED_AT, rows.EXPIRES, rows.FENCE,
)  # fmt: skip
# Sweep delete: the row is exactly as read (rvn and TTL) and still carries no counter.
SWEEP_DELETE = (
    "#rvn = :rvn AND #ttl = :ttl AND attribute_not_exists(#fence) AND attribute_not_exists(#next)"
)


def create_lock_table(client: Any, table: str) -> None:
    """Create the locks table if needed; ``ValueError`` if it exists with another key schema.

    Examples
    --------
    >>> create_lock_table(client, "Locks")    # doctest: +SKIP
    """
    drive(lock_table(table), client)


def lock_table(table: str) -> Step[None]:
    """The step of :func:`create_lock_table`, for any driver."""
    try:
        described = (yield from request("describe_table", TableName=table))["Table"]
    except TableNotFound:
        described = None
    if described is not None and described.get("KeySchema") != _KEY_SCHEMA:
        raise ValueError(
            f"table {table!r} exists with key schema {described.get('KeySchema')}, "
            f"not {_KEY_SCHEMA}"
        )
    yield from ensure_table(
        table,
        schema.LOCK_TTL,
        KeySchema=_KEY_SCHEMA,
        AttributeDefinitions=[
            {"AttributeName": k["AttributeName"], "AttributeType": "S"} for k in _KEY_SCHEMA
        ],
    )


@dataclass(frozen=True)
class LockRow:
    """One row of the locks table, as an operator sees it.

    Attributes
    ----------
    resource : str
    kind : {"mutex", "lease", "fifo"}
    namespace : str or None
        FIFO namespace.
    state : {"held", "free", "waiting"}
        ``waiting``: an entry in a line; ``free``: nobody holds it (kept for its counter).
    owner : str or None
    fencing_token : int or None
        Mutex and lease: the counter. FIFO: the holder's ticket (free: the last issued).
    ticket : int or None
        A waiter's ticket (FIFO, or in a lease lock's line).
    queue_position : int or None
        1 for the queue row first in line, 2 for the next, ...
    expires_at : float or None
        Epoch seconds: the holder's own estimate of its expiry (display only).
    record_version : str or None
    """

    resource: str
    kind: Kind
    namespace: str | None
    state: Literal["held", "free", "waiting"]
    owner: str | None
    fencing_token: int | None = None
    ticket: int | None = None
    queue_position: int | None = None
    expires_at: float | None = None
    record_version: str | None = None


def _rows(item: rows.Item) -> list[LockRow]:
    """What one table row says: one lock row, or a FIFO head's holder and waiters."""
    resource = rows.get_str(item, schema.LOCK_PK) or ""
    sort_key = rows.get_str(item, schema.LOCK_SK) or ""
    if sort_key in (rows.MUTEX_SK, rows.LEASE_SK):
        return _single_rows(item, resource, "mutex" if sort_key == rows.MUTEX_SK else "lease")
    parsed = rows.parse_fifo_sk(sort_key)
    if parsed is None:
        return []
    namespace, ticket = parsed
    if ticket is not None:
        return []  # a queue row of the earlier layout: nobody reads it, the sweeper removes it
    queue = line_entries(item)
    if not queue:
        return [LockRow(resource, "fifo", namespace, "free", None, rows.get_int(item, rows.NEXT))]
    holder, *waiters = queue
    return [
        LockRow(resource, "fifo", namespace, "held", holder.owner, holder.ticket, None, None,
                holder.expires, holder.rvn),
        *_waiting(resource, "fifo", namespace, waiters),
    ]  # fmt: skip


def _single_rows(item: rows.Item, resource: str, kind: Literal["mutex", "lease"]) -> list[LockRow]:
    """A mutex or lease row: its holder, and who waits in its line."""
    owner = rows.get_str(item, rows.OWNER)
    # A mutex written before mutexes kept their row (no counter) is held while it exists.
    held = rows.get_str(item, rows.HOLD) or (kind == "mutex" and owner is not None)
    state: Literal["held", "free"] = "held" if held else "free"
    expiry = rows.get_num(item, rows.EXPIRES) or rows.get_num(item, schema.LOCK_TTL)
    return [
        LockRow(resource, kind, None, state, owner, rows.get_int(item, rows.FENCE), None, None,
                expiry, rows.get_str(item, rows.RVN)),
        *_waiting(resource, kind, None, line_entries(item)),
    ]  # fmt: skip


def _waiting(resource: str, kind: Kind, namespace: str | None, line: list[Entry]) -> list[LockRow]:
    return [
        LockRow(resource, kind, namespace, "waiting", w.owner, None, w.ticket, None,
                w.expires, w.rvn)
        for w in line
    ]  # fmt: skip


def list_locks(client: Any, table: str) -> list[LockRow]:
    """Every lock row in ``table``, sorted; waiters follow their holder in ticket order.

    Examples
    --------
    >>> for row in list_locks(client, "Locks"):          # doctest: +SKIP
    ...     print(row.resource, row.kind, row.state, row.owner, row.fencing_token)
    """
    found = [row for item in rows.all_items(client, "scan", TableName=table) for row in _rows(item)]
    found.sort(key=lambda r: (r.resource, r.kind, r.namespace or "", r.ticket or 0))
    positioned: list[LockRow] = []
    place = 0
    for row in found:
        if row.state == "waiting":
            place += 1
            row = replace(row, queue_position=place)
        else:
            place = 0
        positioned.append(row)
    return positioned


@dataclass(frozen=True)
class SweepResult:
    """One page of :func:`sweep_expired_page` (``next_key`` ``None``: the scan is complete)."""

    deleted: int
    scanned: int
    next_key: rows.Item | None


def _check_sweep_times(now: float, grace: float) -> float:
    if isinstance(now, bool) or not isinstance(now, int | float) or not math.isfinite(now):
        raise ValueError(f"now must be finite epoch seconds, not {now!r}")
    if isinstance(grace, bool) or not isinstance(grace, int | float):
        raise ValueError(f"grace must be a number of seconds, not {grace!r}")
    if not math.isfinite(grace) or grace < 0:
        raise ValueError(f"grace must be a finite number of seconds >= 0, not {grace}")
    return float(now) - float(grace)


def sweep_expired_page(
    client: Any,
    table: str,
    *,
    now: float,
    grace: float,
    start_key: rows.Item | None = None,
    page_size: int = 100,
) -> SweepResult:
    """Sweep one scan page (see :func:`sweep_expired_rows`); resumable.

    Examples
    --------
    >>> page = sweep_expired_page(client, "Locks", now=time.time(), grace=3600)  # doctest: +SKIP
    >>> while page.next_key:                                                   # doctest: +SKIP
    ...     page = sweep_expired_page(client, "Locks", now=time.time(), grace=3600,
    ...                               start_key=page.next_key)
    """
    return drive(
        expired_page(table, now=now, grace=grace, start_key=start_key, page_size=page_size),
        client,
    )


def expired_page(
    table: str,
    *,
    now: float,
    grace: float,
    start_key: rows.Item | None = None,
    page_size: int = 100,
) -> Step[SweepResult]:
    """The step of :func:`sweep_expired_page`, for any driver (the sweeper's scan pass)."""
    cutoff = _check_sweep_times(now, grace)
    rows.check_positive("page_size", page_size)
    params: dict[str, Any] = {"Limit": page_size}
    if start_key:
        params["ExclusiveStartKey"] = start_key
    response = yield from request(
        "scan",
        TableName=table,
        ConsistentRead=True,
        **params,
        **rows.expressions(
            {":cutoff": cutoff, ":mutex": rows.MUTEX_SK}, FilterExpression=SWEEP_FILTER
        ),
    )
    deleted = 0
    # One row at a time, in scan order: each write is conditioned on the row as scanned.
    for item in response.get("Items", []):
        deleted += yield from (
            _free_expired_mutex(table, item)
            if rows.FENCE in item
            else _delete_expired_row(table, item)
        )
    return SweepResult(
        deleted=deleted,
        scanned=response.get("ScannedCount", 0),
        next_key=response.get("LastEvaluatedKey"),
    )


def _delete_expired_row(table: str, item: rows.Item) -> Step[int]:
    sort_key = rows.get_str(item, schema.LOCK_SK) or ""
    parsed = rows.parse_fifo_sk(sort_key)
    is_queue_row = parsed is not None and parsed[1] is not None
    rvn = rows.get_str(item, rows.RVN)
    expiry = rows.get_num(item, schema.LOCK_TTL)
    if not (sort_key == rows.MUTEX_SK or is_queue_row) or rvn is None or expiry is None:
        return 0  # not a row this package wrote: leave it alone
    texts = rows.expressions({":rvn": rvn, ":ttl": expiry}, ConditionExpression=SWEEP_DELETE)
    return (yield from _unchanged(table, item, "delete_item", texts))


def _free_expired_mutex(table: str, item: rows.Item) -> Step[int]:
    rvn, expiry = rows.get_str(item, rows.RVN), rows.get_num(item, rows.EXPIRES)
    if rvn is None or expiry is None:
        return 0
    values = {":rvn": rvn, ":exp": expiry}
    texts = rows.expressions(values, ConditionExpression=SWEEP_FREE, UpdateExpression=_FREE)
    freed = yield from _unchanged(table, item, "update_item", texts)
    if freed:
        logger.info(
            "freed mutex %s of %s: expired", item[schema.LOCK_PK], rows.get_str(item, rows.OWNER)
        )
    return freed


def _unchanged(table: str, item: rows.Item, operation: str, texts: dict[str, Any]) -> Step[int]:
    """One write of a scanned row on condition it is unchanged; 1 if it was written."""
    key = {n: item[n] for n in (schema.LOCK_PK, schema.LOCK_SK)}
    try:
        yield from request(operation, TableName=table, Key=key, **texts)
    except ConditionFailed:
        return 0  # renewed or re-acquired since the scan read it
    return 1


def sweep_expired_rows(client: Any, table: str, *, now: float, grace: float) -> int:
    """Delete rows of earlier layouts and free mutexes expired more than ``grace`` seconds
    before ``now``; return how many. Paged: :func:`sweep_expired_page`.

    Examples
    --------
    >>> sweep_expired_rows(client, "Locks", now=time.time(), grace=3600)   # doctest: +SKIP
    0
    """
    total = 0
    start: rows.Item | None = None
    while True:
        page = sweep_expired_page(client, table, now=now, grace=grace, start_key=start)
        total += page.deleted
        start = page.next_key
        if start is None:
            return total
