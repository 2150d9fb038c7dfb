"""Row layout of the locks table, argument checks, and reads and conditional writes."""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Mapping
from typing import Any, Final

from .. import schema
from .._base.dynamo import call
from .._base.effects import Step, request

Item = dict[str, Any]

#: DynamoDB's limit on a partition key value, which is where the resource name goes.
MAX_RESOURCE_BYTES: Final = 2048
#: Namespaces end up in the sort key (limit 1024 bytes) next to a 20-digit ticket.
MAX_NAMESPACE_BYTES: Final = 255
MAX_OWNER_BYTES: Final = 1024
DEFAULT_NAMESPACE: Final = "default"

#: Seconds an entry's expiry lies beyond its lease: a writer's clock may be an hour behind.
GC_MARGIN: Final = 3600.0

MUTEX_SK: Final = "mutex"
LEASE_SK: Final = "lease"
FIFO_PREFIX: Final = "fifo#"
TICKET_DIGITS: Final = 20

# Protocol attributes (always through placeholders: several are reserved words).
OWNER: Final = "owner"  #: S, the owner name the caller gave (diagnostics and mutex identity)
HOLD: Final = "hold"  #: S, id of one grant (lease/FIFO head) or one waiter (queue row)
RVN: Final = "rvn"  #: S, record version number: changes on every heartbeat
LEASE: Final = "lease"  #: N, the writer's lease in seconds: how long others watch the rvn
EXPIRES: Final = "exp"  #: N, the writer's wall-clock estimate of its lease end (display only)
FENCE: Final = "fence"  #: N, lease row fencing counter
DATA: Final = "data"  #: B, caller data stored with a lease
RELEASED: Final = "rel"  #: S, hold id of the last released lease grant
NEXT: Final = "next"  #: N, FIFO head and lease row: last ticket issued in line
COUNT: Final = "n"  #: N, FIFO head and lease row: how many entries are in line
ENTRY_TICKET: Final = "t_"  #: prefix of a FIFO entry's ticket attribute (N)
ENTRY: Final = "w_"  #: prefix of a FIFO entry's map attribute: owner, rvn, lease, exp
ACQUIRED_AT: Final = "at"  #: N, mutex: wall-clock acquire time (display only)
#: M, the last break of the row (who, when, whose grant): only a break writes it
BROKEN: Final = "brk"

_NAMES: Final = {
    "#pk": schema.LOCK_PK,
    "#sk": schema.LOCK_SK,
    "#ttl": schema.LOCK_TTL,
    "#owner": OWNER,
    "#hold": HOLD,
    "#rvn": RVN,
    "#lease": LEASE,
    "#exp": EXPIRES,
    "#fence": FENCE,
    "#data": DATA,
    "#rel": RELEASED,
    "#next": NEXT,
    "#at": ACQUIRED_AT,
    "#brk": BROKEN,
    "#n": COUNT,
}
_NAME_TOKEN = re.compile(r"#\w+")
_VALUE_TOKEN = re.compile(r":\w+")


def check_name(value: object, argument: str, limit: int, *, forbidden: str = "") -> str:
    """Return ``value`` if it is a non-empty string of at most ``limit`` UTF-8 bytes."""
    if not isinstance(value, str):
        raise ValueError(f"{argument} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{argument} must not be empty")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{argument} must be valid Unicode text (it has a lone surrogate)"
        ) from exc
    if size > limit:
        raise ValueError(f"{argument} is {size} bytes in UTF-8; at most {limit} are allowed")
    bad = sorted({ch for ch in value if ch in forbidden})
    if bad:
        raise ValueError(f"{argument} must not contain {''.join(bad)!r}")
    return value


def check_resource(resource: object) -> str:
    return check_name(resource, "resource", MAX_RESOURCE_BYTES)


def check_owner(owner: object) -> str:
    return check_name(owner, "owner", MAX_OWNER_BYTES)


def check_namespace(namespace: object) -> str:
    # "#" ends the namespace in the sort key: one would sort inside another's rows.
    return check_name(namespace, "namespace", MAX_NAMESPACE_BYTES, forbidden="#")


def check_duration(value: object, argument: str) -> float:
    """A finite, strictly positive number of seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{argument} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{argument} must be a positive, finite number of seconds, not {value}")
    return float(value)


def check_fraction(value: object, argument: str) -> float:
    """A number strictly between 0 and 1."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{argument} must be a number, not {type(value).__name__}")
    if not 0 < value < 1:
        raise ValueError(f"{argument} must lie strictly between 0 and 1, not {value}")
    return float(value)


def check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, not {value!r}")


def check_wait(wait: object) -> float:
    """``0`` (try once), a positive number of seconds, or ``math.inf``."""
    if isinstance(wait, bool) or not isinstance(wait, int | float):
        raise ValueError(f"wait must be a number of seconds, not {type(wait).__name__}")
    if math.isnan(wait) or wait < 0:
        raise ValueError(f"wait must be 0, a positive number of seconds or math.inf, not {wait}")
    return float(wait)


def check_lease(lease_duration: object, heartbeat_period: object) -> tuple[float, float]:
    lease = check_duration(lease_duration, "lease_duration")
    period = check_duration(heartbeat_period, "heartbeat_period")
    if period >= lease:
        raise ValueError(
            f"heartbeat_period ({period}) must be shorter than lease_duration ({lease})"
        )
    return lease, period


def check_polls(
    min_poll: float | None, max_poll: float | None, period: float
) -> tuple[float, float]:
    """Poll bounds; by default from 10 ms doubling up to 1 s (never beyond the heartbeat)."""
    high = check_duration(max_poll, "max_poll") if max_poll is not None else min(1.0, period)
    low = check_duration(min_poll, "min_poll") if min_poll is not None else min(0.01, high)
    if low > high:
        raise ValueError(f"min_poll ({low}) must not exceed max_poll ({high})")
    return low, high


def key(resource: str, sort_key: str) -> Item:
    return {schema.LOCK_PK: {"S": resource}, schema.LOCK_SK: {"S": sort_key}}


def read_row(table: str, row_key: Item) -> Step[Item]:
    """The row as it is now (a consistent read); empty if there is none."""
    response = yield from request("get_item", TableName=table, Key=row_key, ConsistentRead=True)
    item: Item = response.get("Item", {})
    return item


def update_row(
    table: str,
    row_key: Item,
    condition: str,
    update: str,
    values: Mapping[str, object],
    names: Mapping[str, str] | None = None,
    **params: Any,
) -> Step[Item]:
    """One conditional UpdateItem; the row after it, if ``params`` ask for it."""
    response = yield from request(
        "update_item",
        TableName=table,
        Key=row_key,
        **params,
        **expressions(values, names=names, ConditionExpression=condition, UpdateExpression=update),
    )
    row: Item = response.get("Attributes", {})
    return row


def all_items(client: Any, operation: str, **params: Any) -> list[Item]:
    """Every item of a consistent scan or query, page after page."""
    items: list[Item] = []
    start: Item | None = None
    while True:
        more = {"ExclusiveStartKey": start} if start else {}
        page = call(client, operation, ConsistentRead=True, **params, **more)
        items += page.get("Items", [])
        start = page.get("LastEvaluatedKey")
        if not start:
            return items


def fifo_head_sk(namespace: str) -> str:
    return f"{FIFO_PREFIX}{namespace}#"


def parse_fifo_sk(sort_key: str) -> tuple[str, int | None] | None:
    """``(namespace, ticket)`` of a FIFO row (ticket ``None`` for the head), else ``None``."""
    if not sort_key.startswith(FIFO_PREFIX):
        return None
    namespace, sep, rest = sort_key[len(FIFO_PREFIX) :].partition("#")
    if not sep or not namespace:
        return None
    if not rest:
        return namespace, None
    if len(rest) == TICKET_DIGITS and rest.isdigit():
        return namespace, int(rest)
    return None


def new_id() -> str:
    return uuid.uuid4().hex


def av(value: object) -> dict[str, Any]:
    """Low-level AttributeValue of a Python scalar."""
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int):
        return {"N": str(value)}
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot store non-finite number {value}")
        return {"N": repr(value)}
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, bytes):
        return {"B": value}
    if isinstance(value, Mapping):
        return {"M": {str(k): av(v) for k, v in value.items()}}
    raise TypeError(f"no AttributeValue for {type(value).__name__}")


def expressions(
    values: Mapping[str, object] | None = None,
    *,
    names: Mapping[str, str] | None = None,
    **texts: str,
) -> dict[str, Any]:
    """The expression ``texts`` plus exactly the placeholders they use (unused are rejected)."""
    params: dict[str, Any] = dict(texts)
    text = " ".join(texts.values())
    used = set(_NAME_TOKEN.findall(text))
    if used:
        known = {**_NAMES, **(names or {})}
        params["ExpressionAttributeNames"] = {p: known[p] for p in sorted(used)}
    wanted = set(_VALUE_TOKEN.findall(text))
    if wanted:
        given = values or {}
        missing = wanted - given.keys()
        if missing:
            raise KeyError(f"no value for {sorted(missing)}")
        params["ExpressionAttributeValues"] = {p: av(given[p]) for p in sorted(wanted)}
    return params


def get_str(item: Item, name: str) -> str | None:
    value = item.get(name, {}).get("S")
    return value if isinstance(value, str) else None


def get_num(item: Item, name: str) -> float | None:
    value = item.get(name, {}).get("N")
    return float(value) if isinstance(value, str) else None


def get_int(item: Item, name: str) -> int | None:
    value = item.get(name, {}).get("N")
    return int(value) if isinstance(value, str) else None


def get_bytes(item: Item, name: str) -> bytes | None:
    value = item.get(name, {}).get("B")
    return bytes(value) if isinstance(value, bytes | bytearray) else None


def returned_row(exc: BaseException) -> Item | None:
    """The row a failed condition found, where DynamoDB returns it (AWS, moto; not dynalite)."""
    response = getattr(exc.__cause__, "response", None)
    row: Item | None = response.get("Item") if isinstance(response, dict) else None
    return row


def was_retried(exc: BaseException) -> bool:
    """Whether botocore sent the failed request more than once (unknown: yes)."""
    response = getattr(exc.__cause__, "response", None)
    meta = response.get("ResponseMetadata", {}) if isinstance(response, dict) else {}
    return int(meta.get("RetryAttempts", 1)) > 0
