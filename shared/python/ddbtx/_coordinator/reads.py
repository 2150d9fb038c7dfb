"""Reads with isolation (Query, Scan, GetItem, BatchGetItem): the user's own request sent
(:mod:`ddbtx._coordinator.read_plan`), each returned item judged by its protocol attributes at the
:class:`Isolation` level; inside a transaction, every item returned is read-locked."""

from __future__ import annotations

import enum
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .. import errors
from .. import schema as s
from .._base.effects import Step, pause, request
from .._base.items import Item, applied, flag, key_of, lock_owner, request_id, strip
from .._base.requests import KeySchemas, build
from .._stores.completion import Completion, user_view
from .read_plan import IndexInfo, Level, ReadOp, ReadPlan, plan, validate

#: Keys per BatchGetItem (DynamoDB's limit).
BATCH_KEYS = 100
#: Times unprocessed keys are asked for again, and an item re-read whose image went away.
ATTEMPTS = 8
_BATCH_PARAMS = {"RequestItems", "ReturnConsumedCapacity"}


class Isolation(enum.Enum):
    """Read isolation levels of :meth:`TransactionManager.get_item` and the reads of many
    items (``query``, ``scan``, ``batch_get_item``; docs/transactions.md: "Reads of many items").

    ``UNCOMMITTED`` reads the item as it is, uncommitted writes included.
    ``COMMITTED`` never returns uncommitted data: a locked item that has a write
    applied is read from its saved image. ``SERIALIZABLE`` takes a read lock in a
    short transaction of its own.
    """

    UNCOMMITTED = "uncommitted"
    COMMITTED = "committed"
    SERIALIZABLE = "serializable"


class HasReads(typing.Protocol):
    @property
    def reads(self) -> Reads: ...


class Ends(typing.Protocol):
    def commit(self) -> Step[None]: ...
    def rollback(self) -> Step[None]: ...


class InTransaction(typing.Protocol):
    """What the reads use of a transaction's coordinator (either driver's)."""

    @property
    def id(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def manager(self) -> HasReads: ...
    @property
    def p(self) -> Completion: ...
    @property
    def end(self) -> Ends: ...
    def read_many(self, table: str, keys: list[Item]) -> Step[list[Item | None]]: ...


class Reader(typing.Protocol):
    @property
    def images_table(self) -> str: ...
    @property
    def protocol(self) -> Completion: ...
    @property
    def schemas(self) -> KeySchemas: ...
    def new_transaction(self, priority: str | None = None) -> InTransaction: ...


#: An image in the images table: its transaction id and request id.
_External = tuple[str, str]
#: How one stored item is seen: returned as DynamoDB filtered and projected it ("trusted"),
#: not at all ("hidden"), or judged on the client from a full value ("view") that may
#: still have to be fetched ("external").
_Seen = tuple[str, Any]


def classify(item: Item, level: str, table: str, key_names: Sequence[str]) -> _Seen:
    """How an item DynamoDB returned is seen at ``level`` (``uncommitted`` or ``committed``)."""
    if level == "uncommitted":
        return ("trusted", item) if user_view(item) else ("hidden", None)
    if s.ATTR_LOCK not in item:
        return ("trusted", item)
    if flag(item, s.ATTR_TRANSIENT):
        return ("hidden", None)  # inserted by a pending transaction: not committed
    if not applied(item):
        return ("trusted", item)  # locked, nothing written yet: the stored value is committed
    if s.ATTR_IMAGE in item:
        return ("view", strip(item[s.ATTR_IMAGE]["M"]))
    owner = lock_owner(item) or ""
    return ("external", (owner, request_id(table, key_of(item, tuple(key_names)))))


class Reads:
    """The isolated reads of one :class:`~ddbtx.TransactionManager` (``tm.reads``)."""

    def __init__(self, manager: Reader) -> None:
        self.tm = manager
        self._indexes: dict[str, dict[str, IndexInfo]] = {}

    def read(self, op: ReadOp, params: Mapping[str, Any], level: str) -> Step[dict[str, Any]]:
        """One Query, Scan or GetItem page at ``level`` (or ``serializable``)."""
        if level == "serializable":
            return (
                yield from self.serializable(lambda tx: locked_read(tx, op, params, snapshot=True))
            )
        read = yield from self.plan(op, params, level)  # type: ignore[arg-type]
        if op == "get":
            return (yield from self._get(read))
        response = yield from self.send(read)
        items = response.get("Items", [])
        judge = self._base_items if read.base_fetch else self.judge_all
        return page(read, response, (yield from judge(read, items)))

    def batch_get_item(self, params: Mapping[str, Any], level: str) -> Step[dict[str, Any]]:
        """``BatchGetItem`` at ``level``; ``UnprocessedKeys`` are the caller's to resend."""
        if level == "serializable":
            return (yield from self.serializable(lambda tx: locked_batch_get(tx, params)))
        reads, keys = yield from self.batch_plans(params, level)  # type: ignore[arg-type]
        wanted = {
            table: {**_without(read.params, "TableName"), "Keys": keys[table]}
            for table, read in reads.items()
        }
        extra = _without(params, "RequestItems")
        response = yield from self._call("batch_get_item", None, RequestItems=wanted, **extra)
        responses: dict[str, list[Item]] = {}
        for table, items in response.get("Responses", {}).items():
            responses[table] = yield from self.judge_all(reads[table], items)
        return {
            "Responses": responses,
            "UnprocessedKeys": {
                table: {**_without(params["RequestItems"][table], "Keys"), "Keys": left["Keys"]}
                for table, left in (response.get("UnprocessedKeys") or {}).items()
            },
            **{k: v for k, v in response.items() if k == "ConsumedCapacity"},
        }

    def pages(
        self, run: Callable[..., dict[str, Any]], params: Mapping[str, Any]
    ) -> Iterator[dict[str, Any]]:
        """Every page of a paged read, following ``LastEvaluatedKey`` from ``params``'s start."""
        current: dict[str, Any] | None = dict(params)
        while current is not None:
            response = run(**current)
            yield response
            current = next_page(current, response)

    def serializable(
        self, work: Callable[[InTransaction], Step[dict[str, Any]]]
    ) -> Step[dict[str, Any]]:
        """Run ``work`` in a short read-locking transaction; the commit makes it a snapshot
        (one wounded meanwhile is refused and tried again, as old as its first try)."""
        first: str | None = None
        wounded: errors.TransactionRolledBackError | None = None
        for _ in range(ATTEMPTS):
            tx = self.tm.new_transaction(first)
            first = first or tx.id
            try:
                result = yield from work(tx)
                yield from tx.end.commit()
                return result
            except errors.TransactionRolledBackError as exc:
                wounded = exc
            finally:
                # The record stays, completed, as a block's does: it fences late copies.
                if tx.state == s.STATE_PENDING:
                    yield from tx.end.rollback()
        assert wounded is not None
        raise errors.TransactionConflictError(
            f"a serializable read was rolled back by an older transaction on each of its "
            f"{ATTEMPTS} tries; retry it later",
            other_tx_id=wounded.other_tx_id,
        ) from wounded

    def plan(self, op: ReadOp, params: Mapping[str, Any], level: Level) -> Step[ReadPlan]:
        """Validate a read and plan it."""
        table = validate(op, params)
        key_types = yield from self.tm.schemas.types(table)
        if op == "get":
            build("get", {"TableName": table, "Key": params.get("Key")}, key_types)
        name = params.get("IndexName")
        index = (yield from self.index(table, name)) if name is not None else None
        return plan(op, params, level, tuple(key_types), index)

    def batch_plans(
        self, params: Mapping[str, Any], level: Level
    ) -> Step[tuple[dict[str, ReadPlan], dict[str, list[Item]]]]:
        """One plan per table of a BatchGetItem, and each table's keys in canonical form."""
        if not isinstance(params, Mapping) or set(params) - _BATCH_PARAMS:
            raise errors.InvalidRequestError(
                "batch_get_item takes RequestItems (and ReturnConsumedCapacity)"
            )
        items = params.get("RequestItems")
        if not isinstance(items, Mapping) or not items:
            raise errors.InvalidRequestError("RequestItems must map table names to their Keys")
        reads: dict[str, ReadPlan] = {}
        keys: dict[str, list[Item]] = {}
        for table, table_params in items.items():
            validate("batch", table_params, table)
            key_types = yield from self.tm.schemas.types(table)
            table_keys = table_params.get("Keys")
            if not isinstance(table_keys, list) or not table_keys:
                raise errors.InvalidRequestError("Keys must be a non-empty list", table=table)
            built = [
                build("get", {"TableName": table, "Key": key}, key_types) for key in table_keys
            ]
            if len({r.rid for r in built}) != len(built):
                raise errors.InvalidRequestError("Keys has duplicates", table=table)
            keys[table] = [r.key for r in built]
            as_get = {"TableName": table, **_without(table_params, "Keys")}
            reads[table] = plan("get", as_get, level, tuple(key_types))
        return reads, keys

    def index(self, table: str, name: Any) -> Step[IndexInfo]:
        """A secondary index's keys and projection (one DescribeTable per table, cached)."""
        known = self._indexes.get(table)
        if known is None:
            description = (yield from request("describe_table", TableName=table))["Table"]
            known = {
                d["IndexName"]: IndexInfo.from_description(d, local)
                for local, group in (
                    (False, description.get("GlobalSecondaryIndexes")),
                    (True, description.get("LocalSecondaryIndexes")),
                )
                for d in group or ()
            }
            self._indexes[table] = known
        if not isinstance(name, str) or name not in known:
            raise errors.InvalidRequestError(f"table {table!r} has no index {name!r}", table=table)
        return known[name]

    def send(self, read: ReadPlan) -> Step[dict[str, Any]]:
        """The read's own request, sent as planned."""
        operation = {"query": "query", "scan": "scan", "get": "get_item"}[read.op]
        return (yield from self._call(operation, read.table, **read.params))

    def _call(self, operation: str, table: str | None, **params: Any) -> Step[dict[str, Any]]:
        try:
            response: dict[str, Any] = yield from request(operation, **params)
        except errors.ValidationFailed as exc:
            raise errors.InvalidRequestError(
                f"DynamoDB rejected the read: {exc}",
                operation=exc.operation,
                dynamodb_message=exc.response["Error"].get("Message"),
                table=table,
            ) from exc
        return response

    def judge_all(self, read: ReadPlan, items: list[Item]) -> Step[list[Item]]:
        """The items a page returns, in order, judged at the read's level."""
        out: list[Item] = []
        seen = yield from self.resolve(read, items)
        for item, (kind, view) in zip(items, seen, strict=True):
            if kind == "trusted":
                out.append(read.trusted(item))
            elif kind == "view":
                out.extend(read.returned([view]))
        return out

    def _base_items(self, read: ReadPlan, items: list[Item]) -> Step[list[Item]]:
        """Index items judged on their base items (the index cannot show locks)."""
        keys = [key_of(item, read.key_names) for item in items]
        base = yield from self.batch_get(read.table, keys)
        found = [b for b in (base.get(request_id(read.table, k)) for k in keys) if b is not None]
        seen = yield from self.resolve(read, found)
        return read.returned(
            strip(item) if kind == "trusted" else view
            for item, (kind, view) in zip(found, seen, strict=True)
        )

    def resolve(self, read: ReadPlan, items: list[Item]) -> Step[list[_Seen]]:
        """How each item is seen (:data:`_Seen`), every external image fetched in one go."""
        seen = [classify(item, read.level, read.table, read.key_names) for item in items]
        external = [x for kind, x in seen if kind == "external"]
        images = (yield from self.images(external)) if external else {}
        out: list[_Seen] = []
        for item, (kind, x) in zip(items, seen, strict=True):
            if kind == "external":
                view = images.get(x)
                if view is None:  # completed meanwhile: read the item again
                    key = key_of(item, read.key_names)
                    view = yield from self.reread(read.table, key, read.level)
                kind, x = ("view", view) if view is not None else ("hidden", None)
            out.append((kind, x))
        return out

    def reread(self, table: str, key: Item, level: str) -> Step[Item | None]:
        """An item read again (its external image went with a completion)."""
        key_names = tuple(key)
        for _ in range(ATTEMPTS):
            stored = yield from self.tm.protocol.read_item(table, key)
            if stored is None:
                return None
            kind, x = classify(stored, level, table, key_names)
            if kind == "trusted":
                return strip(stored)
            if kind != "external":
                return x  # type: ignore[no-any-return]  # a view, or None when hidden
            image = (yield from self.images([x])).get(x)
            if image is not None:
                return image
        raise errors.TransactionError(f"an item in {table} kept changing under a committed read")

    def images(self, refs: list[_External]) -> Step[dict[_External, Item]]:
        """External images by reference (absent: removed by a completion)."""
        keys = [{s.IMAGE_PK: {"S": tx_id}, s.IMAGE_SK: {"S": rid}} for tx_id, rid in refs]
        rows = yield from self.batch_get(self.tm.images_table, keys)
        out: dict[_External, Item] = {}
        for ref, key in zip(refs, keys, strict=True):
            row = rows.get(request_id(self.tm.images_table, key))
            # An image near 400 KB spans several rows: the first says how many.
            image = (yield from self.tm.protocol.read_image(*ref, row)) if row else None
            if image is not None:
                out[ref] = strip(image)
        return out

    def batch_get(self, table: str, keys: list[Item]) -> Step[dict[str, Item]]:
        """Consistent reads of ``keys`` (BatchGetItem, 100 at a time), by request id."""
        found: dict[str, Item] = {}
        unique = list({request_id(table, k): k for k in keys}.values())
        for start in range(0, len(unique), BATCH_KEYS):
            wanted = unique[start : start + BATCH_KEYS]
            for attempt in range(ATTEMPTS):
                response = yield from request(
                    "batch_get_item", RequestItems={table: {"Keys": wanted, "ConsistentRead": True}}
                )
                for item in response.get("Responses", {}).get(table, []):
                    found[request_id(table, key_of(item, tuple(wanted[0])))] = item
                wanted = (response.get("UnprocessedKeys") or {}).get(table, {}).get("Keys", [])
                if not wanted:
                    break
                yield from pause(0.05 * 2**attempt)
            else:
                raise errors.DynamoDBError(
                    f"BatchGetItem left {len(wanted)} keys of {table} unprocessed",
                    code="UnprocessedKeys",
                    operation="BatchGetItem",
                )
        return found

    def _get(self, read: ReadPlan) -> Step[dict[str, Any]]:
        response = yield from self.send(read)
        item = response.get("Item")
        extra = {k: v for k, v in response.items() if k == "ConsumedCapacity"}
        if item is None:
            return extra
        found = yield from self.judge_all(read, [item])
        return {"Item": found[0], **extra} if found else extra


def next_page(params: dict[str, Any], response: Mapping[str, Any]) -> dict[str, Any] | None:
    """The parameters of the page after ``response``, or None after the last page."""
    last = response.get("LastEvaluatedKey")
    return {**params, "ExclusiveStartKey": last} if last else None


def page(read: ReadPlan, response: Mapping[str, Any], items: list[Item]) -> dict[str, Any]:
    """A Query or Scan response of boto3's shape with the judged ``items``."""
    out: dict[str, Any] = {} if read.count_only else {"Items": items}
    out["Count"] = len(items)
    out["ScannedCount"] = response.get("ScannedCount", 0)
    for name in ("LastEvaluatedKey", "ConsumedCapacity"):
        if name in response:
            out[name] = response[name]
    return out


def _without(params: Mapping[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k not in names}


def locked_read(
    tx: InTransaction, op: ReadOp, params: Mapping[str, Any], *, snapshot: bool = False
) -> Step[dict[str, Any]]:
    """A Query, Scan or GetItem in ``tx``: every item returned read-locked and judged on its
    value under the lock; ``snapshot``: see :func:`_settled_page`."""
    reads = tx.manager.reads
    read = yield from reads.plan(op, params, "locking")
    if op == "get":
        found = read.returned((yield from tx.read_many(read.table, [read.params["Key"]])))
        return {"Item": found[0]} if found else {}
    if snapshot:
        response, values = yield from _settled_page(tx, read)
    else:
        response = yield from reads.send(read)
        keys = [key_of(item, read.key_names) for item in response.get("Items", [])]
        values = yield from tx.read_many(read.table, keys)
    return page(read, response, read.returned(values))


def _settled_page(
    tx: InTransaction, read: ReadPlan
) -> Step[tuple[dict[str, Any], list[Item | None]]]:
    """A page read at a moment ``tx`` holds all its items: read again (locking what it lists
    anew) until it lists only held ones, as another commit may add an item in between."""
    reads = tx.manager.reads
    held: dict[str, Item | None] = {}
    response = yield from reads.send(read)
    for _ in range(ATTEMPTS):
        keys = [key_of(item, read.key_names) for item in response.get("Items", [])]
        new = [k for k in keys if request_id(read.table, k) not in held]
        if not new and held:
            return response, [held[request_id(read.table, k)] for k in keys]
        values = yield from tx.read_many(read.table, new)
        for k, value in zip(new, values, strict=True):
            held[request_id(read.table, k)] = value
        if not held:
            return response, []  # an empty page: nothing listed, nothing to hold
        response = yield from reads.send(read)
    raise errors.TransactionConflictError(
        f"a serializable {read.op} page of {read.table} kept gaining items under it "
        f"({ATTEMPTS} reads); retry it later",
        tx_id=tx.id,
    )


def locked_batch_get(tx: InTransaction, params: Mapping[str, Any]) -> Step[dict[str, Any]]:
    """A BatchGetItem in ``tx``: every key read-locked (nothing is left unprocessed)."""
    read_plans, keys = yield from tx.manager.reads.batch_plans(params, "locking")
    responses: dict[str, list[Item]] = {}
    for table, read in read_plans.items():
        responses[table] = read.returned((yield from tx.read_many(table, keys[table])))
    return {"Responses": responses, "UnprocessedKeys": {}}
