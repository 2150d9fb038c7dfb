"""Send one shape natively to table T1 and through ddbtx to its twin T2, and compare.

Given both tables hold the same starting item, when the request is sent
natively to T1 and through one way of sending to T2, then the outcome (result
or error class), the returned attributes, the stored item and the index agree,
and nothing of the protocol is left.

Comparisons are of values as DynamoDB returns them: numbers in DynamoDB's
canonical spelling and sets as sets (AWS returns both that way; moto returns
what it was sent), binary as bytes, and no ``Attributes`` the same as empty ones
(dynalite returns ``{}`` where AWS leaves the key out).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from botocore.exceptions import ClientError

from ddbtx import (
    ConditionalCheckFailedError,
    InvalidRequestError,
    TransactionManager,
    aio,
)
from ddbtx import schema as s
from ddbtx._base.items import canonical_number
from ddbtx.errors import DdbtxError
from ddbtx.tables import create_table_if_missing
from helpers import scan, unfenced

from .shapes import Item, Shape

#: The ways of sending: requests one by one in a transaction, the same after a read of the
#: item, all at once (write_all), transact_write, and one by one in an asyncio transaction.
PATHS = ("tx", "after_get", "write_all", "transact_write", "aio")
RETURNING = ("tx", "after_get", "write_all", "aio")
INDEX = "by-g"

#: The ddbtx class a user gets for a native error code: the error is also a ClientError with
#: that code (errors.py), and it is this class, never the steps' own ConditionFailed etc.
SAME_ERROR = {
    "ConditionalCheckFailedException": ConditionalCheckFailedError,
    "ValidationException": InvalidRequestError,
}


@dataclass(frozen=True)
class Keys:
    """A schema's key as stored, as sent in requests, and as read by ``tx.get_item``.

    The three are spellings of one item (numbers, str vs bytes), so every case
    also checks that ddbtx takes them for one item, as DynamoDB does.
    """

    stored: Item
    sent: Item
    read: Item


KEYS = {
    "S": Keys({"pk": {"S": "item-1"}}, {"pk": {"S": "item-1"}}, {"pk": {"S": "item-1"}}),
    "N": Keys({"pk": {"N": "10"}}, {"pk": {"N": "1E+1"}}, {"pk": {"N": "10.0"}}),
    "B": Keys({"pk": {"B": b"item-1"}}, {"pk": {"B": "item-1"}}, {"pk": {"B": b"item-1"}}),
    "SR": Keys(
        {"pk": {"S": "h"}, "sk": {"N": "1.5"}},
        {"pk": {"S": "h"}, "sk": {"N": "1.50"}},
        {"pk": {"S": "h"}, "sk": {"N": "15E-1"}},
    ),
    "G": Keys({"pk": {"S": "item-1"}}, {"pk": {"S": "item-1"}}, {"pk": {"S": "item-1"}}),
}

_SCHEMAS: dict[str, dict[str, Any]] = {
    "S": {"KeySchema": [("pk", "HASH", "S")]},
    "N": {"KeySchema": [("pk", "HASH", "N")]},
    "B": {"KeySchema": [("pk", "HASH", "B")]},
    "SR": {"KeySchema": [("pk", "HASH", "S"), ("sk", "RANGE", "N")]},
    "G": {"KeySchema": [("pk", "HASH", "S")], "index": ("g", "S")},
}


def _create(client: Any, name: str, schema: dict[str, Any]) -> None:
    keys = schema["KeySchema"]
    spec: dict[str, Any] = {
        "KeySchema": [{"AttributeName": n, "KeyType": k} for n, k, _ in keys],
        "AttributeDefinitions": [{"AttributeName": n, "AttributeType": t} for n, _, t in keys],
    }
    if "index" in schema:
        attr, kind = schema["index"]
        spec["AttributeDefinitions"].append({"AttributeName": attr, "AttributeType": kind})
        spec["GlobalSecondaryIndexes"] = [
            {
                "IndexName": INDEX,
                "KeySchema": [{"AttributeName": attr, "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ]
    create_table_if_missing(client, name, None, **spec)


@dataclass
class Twins:
    """One emulator's twin tables (native, ddbtx) per key schema, and the protocol's tables."""

    client: Any
    tm: TransactionManager
    #: The asyncio manager on the same tables, and how a coroutine is run to its end.
    aio_tm: aio.TransactionManager
    run: Callable[[Coroutine[Any, Any, Any]], Any]
    native: dict[str, str] = field(default_factory=dict)
    ours: dict[str, str] = field(default_factory=dict)
    #: DynamoDB's answers by (shape id, ReturnValues): every path compares with the same.
    expected: dict[tuple[str, str | None], Expected] = field(default_factory=dict)

    @classmethod
    def create(
        cls, client: Any, aio_client: Any, run_aio: Callable[[Coroutine[Any, Any, Any]], Any]
    ) -> Twins:
        run = uuid.uuid4().hex[:8]
        # One step at a time: moto in-process is not safe for concurrent calls.
        tm = TransactionManager(client, f"oracle-tx-{run}", f"oracle-img-{run}", max_workers=1)
        tm.create_tables()
        aio_tm = aio.TransactionManager(aio_client, tm.transactions_table, tm.images_table)
        twins = cls(client, tm, aio_tm, run_aio)
        for name, schema in _SCHEMAS.items():
            twins.native[name] = f"oracle-{name}-native-{run}"
            twins.ours[name] = f"oracle-{name}-ddbtx-{run}"
            _create(client, twins.native[name], schema)
            _create(client, twins.ours[name], schema)
        return twins

    def drop(self) -> None:
        for name in [*self.native.values(), *self.ours.values()]:
            self.client.delete_table(TableName=name)
        self.client.delete_table(TableName=self.tm.transactions_table)
        self.client.delete_table(TableName=self.tm.images_table)


# --- normal forms of what DynamoDB returns ------------------------------------------


def normal(value: Any) -> Any:
    """An AttributeValue (or item) as AWS returns it, comparable with ``==``."""
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in _TYPES:
        ((kind, raw),) = value.items()
        return (kind, _TYPES[kind](raw))
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    return value


def _number(raw: str) -> str:
    try:
        return canonical_number(raw)
    except ValueError:
        return raw


def _bytes(raw: Any) -> bytes:
    return raw.encode() if isinstance(raw, str) else bytes(raw)


_TYPES: dict[str, Callable[[Any], Any]] = {
    "S": str,
    "N": _number,
    "B": _bytes,
    "BOOL": bool,
    "NULL": bool,
    "SS": lambda raw: frozenset(raw),
    "NS": lambda raw: frozenset(map(_number, raw)),
    "BS": lambda raw: frozenset(map(_bytes, raw)),
    "L": lambda raw: tuple(normal(v) for v in raw),
    "M": lambda raw: {k: normal(v) for k, v in raw.items()},
}


# --- sending ------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What a user saw: an error class, or the returned attributes."""

    error: str | None
    attributes: Any = None
    detail: str = ""
    #: ``Item`` of the error's response (ReturnValuesOnConditionCheckFailure=ALL_OLD)
    old: Any = None

    def __repr__(self) -> str:
        return (
            f"error {self.error} ({self.detail[:160]})" if self.error else f"ok {self.attributes}"
        )


def request(twins: Twins, shape: Shape, table: str, rv: str | None) -> Item:
    """The shape as boto3 parameters for ``table``, both sides identical but the name."""
    key = shape.key if shape.key is not None else KEYS[shape.schema].sent
    params: Item = {"TableName": table, **shape.params}
    if shape.op == "put":
        params["Item"] = {**key, **shape.params["Item"]}
    else:
        params["Key"] = key
    if rv is not None:
        params["ReturnValues"] = rv
    return params


def send_native(twins: Twins, shape: Shape, rv: str | None) -> Outcome:
    params = request(twins, shape, twins.native[shape.schema], rv)
    try:
        response = getattr(twins.client, f"{shape.op}_item")(**params)
    except ClientError as exc:
        error = exc.response["Error"]
        return Outcome(error["Code"], detail=error.get("Message", ""), old=_old(exc))
    return Outcome(None, normal(response.get("Attributes") or None))


def _old(exc: ClientError) -> Any:
    item = exc.response.get("Item")  # type: ignore[typeddict-item]
    return normal(item) if item else None


def _ours(exc: DdbtxError) -> Outcome:
    """What a user sees of a ddbtx error: DynamoDB's code where it stands for one (it is a
    ClientError then, of the class SAME_ERROR names), else its class."""
    if not isinstance(exc, ClientError):
        return Outcome(type(exc).__name__, detail=str(exc))
    code = exc.response["Error"]["Code"]
    expected = SAME_ERROR.get(code)
    if expected is not None and not isinstance(exc, expected):
        return Outcome(f"{type(exc).__name__} for {code}", detail=str(exc))
    return Outcome(code, detail=str(exc), old=_old(exc))


async def _one_by_one_aio(tm: aio.TransactionManager, writes: list[tuple[str, Item]]) -> Any:
    async with tm.transaction() as tx:
        return [await getattr(tx, f"{op}_item")(**params) for op, params in writes]


def send_through(
    twins: Twins, writes: list[tuple[str, Item]], path: str, reads: list[tuple[str, Item]]
) -> list[Outcome]:
    """Send ``writes`` (op, params) in one transaction by ``path``; ``reads`` (table, key)
    are read first on the ``after_get`` path. One outcome per write, or the error."""
    batch = [{op.capitalize(): params} for op, params in writes]
    tm = twins.tm
    try:
        if path == "aio":
            results = twins.run(_one_by_one_aio(twins.aio_tm, writes))
            return [Outcome(None, normal(r.get("Attributes") or None)) for r in results]
        if path == "transact_write":
            tm.transact_write(batch)
            return [Outcome(None, None) for _ in writes]
        with tm.transaction() as tx:
            if path == "after_get":
                for table, key in reads:
                    tx.get_item(TableName=table, Key=key)
            if path == "write_all":
                results = tx.write_all(batch)
            else:
                results = [getattr(tx, f"{op}_item")(**params) for op, params in writes]
    except DdbtxError as exc:
        return [_ours(exc)]
    return [Outcome(None, normal(result.get("Attributes") or None)) for result in results]


def send_ours(twins: Twins, shape: Shape, path: str, rv: str | None) -> Outcome:
    params = request(twins, shape, twins.ours[shape.schema], rv)
    read = (params["TableName"], KEYS[shape.schema].read)
    (outcome,) = send_through(twins, [(shape.op, params)], path, [read])
    return outcome


# --- the case -----------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """What DynamoDB itself did with a shape (one ReturnValues): the reference."""

    outcome: Outcome
    item: Any
    index: list[Any]


class Seeded(Protocol):
    """A request with the item its table holds first (a shape, or the fuzzer's case)."""

    @property
    def schema(self) -> str: ...
    @property
    def start(self) -> Item | None: ...


def reset(twins: Twins, table: str, shape: Seeded) -> None:
    """Given: the table holds the shape's starting item (or none) under its key."""
    key = KEYS[shape.schema].stored
    if shape.start is None:
        twins.client.delete_item(TableName=table, Key=key)
    else:
        twins.client.put_item(TableName=table, Item={**key, **shape.start})


def stored(twins: Twins, table: str, shape: Seeded) -> Item | None:
    key = KEYS[shape.schema].stored
    response = twins.client.get_item(TableName=table, Key=key, ConsistentRead=True)
    item: Item | None = response.get("Item")
    # The fence stays on an item a transaction locked (a version attribute of ddbtx's own,
    # docs/limits.md): the one protocol attribute the comparison leaves out.
    return None if item is None else unfenced(item)


def index_view(twins: Twins, table: str, shape: Shape) -> list[Any]:
    """The GSI as a user queries it: every item under the index values the shapes use."""
    if shape.schema != "G":
        return []
    found: list[Any] = []
    for g in ("g1", "g2"):
        page = twins.client.query(
            TableName=table,
            IndexName=INDEX,
            KeyConditionExpression="g = :g",
            ExpressionAttributeValues={":g": {"S": g}},
        )
        found.extend(normal(unfenced(item)) for item in page["Items"])
    return found


def expected(twins: Twins, shape: Shape, rv: str | None) -> Expected:
    """DynamoDB's own answer to the shape on T1, run once per ReturnValues and kept."""
    known = twins.expected.get((shape.id, rv))
    if known is None:
        table = twins.native[shape.schema]
        reset(twins, table, shape)
        outcome = send_native(twins, shape, rv)
        item = normal(stored(twins, table, shape))
        known = twins.expected[shape.id, rv] = Expected(
            outcome, item, index_view(twins, table, shape)
        )
    return known


def leftovers(twins: Twins) -> list[str]:
    """Anything of the protocol still in its tables: TX records not completed (a completed
    one is kept, with its rows, as a fence against late copies), rows of no completed
    record, images. The completed records are then deleted."""
    rows = scan(twins.client, twins.tm.transactions_table)
    completed = {
        r[s.TX_PK]["S"]
        for r in rows
        if r[s.TX_SK]["S"] == s.TX_HEADER_SK and r.get(s.TX_COMPLETED) and s.TX_TTL in r
    }
    left = [f"TX row {r['id']['S']}" for r in rows if r[s.TX_PK]["S"] not in completed]
    left += [f"image {r['id']['S']}" for r in scan(twins.client, twins.tm.images_table)]
    # The checked case's kept records go now (as the janitors' delete would, later): every
    # case scans this table, and a table that grew with every case made the runs quadratic.
    kept = [
        {s.TX_PK: r[s.TX_PK], s.TX_SK: r[s.TX_SK]} for r in rows if r[s.TX_PK]["S"] in completed
    ]
    for start in range(0, len(kept), 25):
        twins.client.batch_write_item(
            RequestItems={
                twins.tm.transactions_table: [
                    {"DeleteRequest": {"Key": key}} for key in kept[start : start + 25]
                ]
            }
        )
    return left


def return_values(shape: Shape, path: str) -> tuple[str | None, ...]:
    """The ReturnValues a path sends the shape with: between the three paths that return
    attributes, every one the operation allows (each path at least one, a different
    share for each shape). TransactItems carry none: ``transact_write`` sends without.
    """
    if path == "transact_write":
        return (None,)
    rvs, turn, share = shape.rvs(), sum(map(ord, shape.id)), RETURNING.index(path)
    mine = tuple(rv for i, rv in enumerate(rvs) if (i + turn) % len(RETURNING) == share)
    return mine or (rvs[(turn + share) % len(rvs)],)


def compare(twins: Twins, shape: Shape, path: str) -> list[str]:
    """The differences between DynamoDB and ddbtx on one shape and path (none: they agree)."""
    table = twins.ours[shape.schema]
    differences: list[str] = []
    for rv in return_values(shape, path):
        native = expected(twins, shape, rv)
        # Given T2 holds the item T1 held
        reset(twins, table, shape)
        # When the request goes through ddbtx
        ours = send_ours(twins, shape, path, rv)
        # Then the user sees what DynamoDB showed, and T2 holds what T1 holds
        label = f"ReturnValues={rv}: " if rv else ""
        if native.outcome.error != ours.error:
            differences.append(f"{label}native {native.outcome!r}, ddbtx {ours!r}")
        elif native.outcome.old != ours.old:
            differences.append(
                f"{label}Item on failure: native {native.outcome.old}, ddbtx {ours.old}"
            )
        elif rv is not None and native.outcome.attributes != ours.attributes:
            differences.append(f"{label}Attributes: native {native.outcome!r}, ddbtx {ours!r}")
        item = stored(twins, table, shape)
        if normal(item) != native.item:
            differences.append(f"{label}stored item: native {native.item}, ddbtx {normal(item)}")
        if index_view(twins, table, shape) != native.index:
            differences.append(
                f"{label}index: native {native.index}, ddbtx {index_view(twins, table, shape)}"
            )
        differences += [
            f"{label}left on the item: {a}" for a in item or {} if a.startswith(s.RESERVED_PREFIX)
        ]
        if differences:
            return differences
    return [f"left behind: {x}" for x in leftovers(twins)]
