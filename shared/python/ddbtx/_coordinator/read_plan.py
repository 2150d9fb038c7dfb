"""How an isolated read is sent (the user's request, changed only so that each item says
whether it is locked) and how its items are judged."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .. import schema as s
from .._base.conditions import Condition, ExpressionError, Path, parse_projection, project
from .._base.items import Item, strip
from .._base.requests import (
    check_expressions,
    check_placeholders,
    check_table,
    grouped,
    invalid,
    used_placeholders,
)

ReadOp = Literal["query", "scan", "get"]
#: How the items are judged: as they are, as last committed, or (inside a transaction)
#: as committed now and then read again under a read lock.
Level = Literal["uncommitted", "committed", "locking"]

#: Protocol attributes a read must see to judge an item, and their placeholders.
PROTOCOL_NAMES: dict[str, str] = {
    s.ATTR_LOCK: "#ddbtxl",
    s.ATTR_TRANSIENT: "#ddbtxn",
    s.ATTR_APPLIED: "#ddbtxp",
    s.ATTR_IMAGE: "#ddbtxi",
    s.ATTR_IMAGE_EXTERNAL: "#ddbtxe",
    s.ATTR_DELETED: "#ddbtxd",
}
#: committed read (filter): besides the items the user's filter keeps, every item whose
#: stored value is not its committed one (an applied write, an insert holding a lock);
#: the client judges those on their saved image, so no committed item is filtered out
#: on a value that is not committed.
NEEDS_IMAGE = "attribute_exists(#ddbtxp) OR attribute_exists(#ddbtxn)"
#: read through an index that cannot show locks (filter): true of every item (the verdict
#: attribute is never written), so DynamoDB still validates the user's filter but keeps
#: every item; the filter is applied on the client to each base item's committed value.
EVERY_ITEM = "attribute_not_exists(#ddbtxv)"

_COMMON = {
    "TableName",
    "IndexName",
    "Select",
    "Limit",
    "ConsistentRead",
    "FilterExpression",
    "ProjectionExpression",
    "ExpressionAttributeNames",
    "ExpressionAttributeValues",
    "ExclusiveStartKey",
    "ReturnConsumedCapacity",
}
_ALLOWED: dict[str, set[str]] = {
    "query": _COMMON | {"KeyConditionExpression", "ScanIndexForward"},
    "scan": _COMMON | {"Segment", "TotalSegments"},
    "get": {
        "TableName",
        "Key",
        "ConsistentRead",
        "ProjectionExpression",
        "ExpressionAttributeNames",
        "ReturnConsumedCapacity",
    },
    "batch": {"Keys", "ConsistentRead", "ProjectionExpression", "ExpressionAttributeNames"},
}
_LEGACY = {"AttributesToGet", "KeyConditions", "QueryFilter", "ScanFilter", "ConditionalOperator"}
_EXPRESSIONS = ("KeyConditionExpression", "FilterExpression", "ProjectionExpression")


def validate(op: str, params: Mapping[str, Any], table: str | None = None) -> str:
    """Check a read's parameters (``batch``: one table's of a BatchGetItem); its table."""
    if not isinstance(params, Mapping):
        raise invalid(f"the {op} parameters must be a dict", table)
    table = check_table(params.get("TableName") if op != "batch" else table)
    legacy = sorted(set(params) & _LEGACY)
    if legacy:
        raise invalid(
            f"{legacy} are DynamoDB's legacy parameters; use KeyConditionExpression, "
            "FilterExpression and ProjectionExpression",
            table,
        )
    unknown = sorted(set(params) - _ALLOWED[op])
    if unknown:
        raise invalid(f"{op} does not support {unknown}", table)
    check_placeholders(params, table)
    check_expressions(params, table, _EXPRESSIONS)
    if params.get("Select") == "COUNT" and params.get("ProjectionExpression"):
        raise invalid("ProjectionExpression cannot be given with Select=COUNT", table)
    if op == "query" and not params.get("KeyConditionExpression"):
        raise invalid("KeyConditionExpression is missing", table)
    return table


@dataclass(frozen=True)
class IndexInfo:
    """A secondary index as a read needs it: its keys and what it projects."""

    name: str
    local: bool
    keys: tuple[str, ...]
    #: Non-key attributes it projects; None for ``ALL``.
    attributes: frozenset[str] | None

    @classmethod
    def from_description(cls, description: Mapping[str, Any], local: bool) -> IndexInfo:
        projection = description.get("Projection") or {}
        attributes = None
        if projection.get("ProjectionType", "ALL") != "ALL":
            attributes = frozenset(projection.get("NonKeyAttributes") or ())
        keys = tuple(k["AttributeName"] for k in description["KeySchema"])
        return cls(description["IndexName"], local, keys, attributes)

    @property
    def shows_locks(self) -> bool:
        """Whether its items carry every protocol attribute."""
        return self.attributes is None or set(PROTOCOL_NAMES) <= self.attributes

    def view(self, item: Item, table_keys: Sequence[str]) -> Item:
        if self.attributes is None:
            return item
        kept = {*table_keys, *self.keys, *self.attributes}
        return {name: value for name, value in item.items() if name in kept}


@dataclass
class ReadPlan:
    """One read: what is sent, and how its items are judged and returned."""

    op: ReadOp
    table: str
    level: Level
    key_names: tuple[str, ...]
    params: dict[str, Any]
    index: IndexInfo | None = None
    values: dict[str, Any] = field(default_factory=dict)
    key_condition: Condition | None = None
    filter: Condition | None = None
    projection: list[Path] | None = None
    #: Top-level attributes the plan added to the projection (removed before returning).
    added: frozenset[str] = frozenset()
    count_only: bool = False
    #: The index cannot show locks: its items' base items are read (BatchGetItem).
    base_fetch: bool = False
    select_all: bool = False

    def trusted(self, item: Item) -> Item:
        """An item DynamoDB filtered and projected on its committed value, as returned."""
        return {k: v for k, v in strip(item).items() if k not in self.added}

    def judge(self, view: Item) -> Item | None:
        """The item as the read returns it from its full value; None if not returned."""
        seen = view
        if self.index is not None:
            if any(name not in view for name in self.index.keys):
                return None  # without its index key the item is not in the index
            seen = self.index.view(view, self.key_names)
        if self.key_condition is not None and not self.key_condition.matches(seen, self.values):
            return None
        # What DynamoDB fetches from the table for a local index, it also filters on.
        returned = view if self.fetches else seen
        if self.filter is not None and not self.filter.matches(returned, self.values):
            return None
        return project(returned, self.projection) if self.projection is not None else returned

    def returned(self, values: Iterable[Item | None]) -> list[Item]:
        """The items returned of full ``values`` (None: absent), in order."""
        judged = (self.judge(value) for value in values if value is not None)
        return [item for item in judged if item is not None]

    @property
    def fetches(self) -> bool:
        """Whether DynamoDB reads the table's item for a local index's entry."""
        index = self.index
        if index is None or not index.local or index.attributes is None:
            return False
        if self.select_all:
            return True
        held = {*self.key_names, *index.keys, *index.attributes}
        return any(path[0] not in held for path in self.projection or ())


def plan(
    op: ReadOp,
    params: Mapping[str, Any],
    level: Level,
    key_names: Sequence[str],
    index: IndexInfo | None = None,
) -> ReadPlan:
    """The request to send for a validated read, and how to judge what comes back."""
    user = dict(params)
    names = dict(user.get("ExpressionAttributeNames") or {})
    values = dict(user.get("ExpressionAttributeValues") or {})
    read = ReadPlan(
        op=op,
        table=user["TableName"],
        level=level,
        key_names=tuple(key_names),
        params=user,
        index=index,
        values=values,
        count_only=user.get("Select") == "COUNT",
        select_all=user.get("Select") == "ALL_ATTRIBUTES",
    )
    try:
        if user.get("FilterExpression"):
            read.filter = Condition(user["FilterExpression"], names)
        if index is not None and user.get("KeyConditionExpression"):
            read.key_condition = Condition(user["KeyConditionExpression"], names)
        if user.get("ProjectionExpression"):
            read.projection = parse_projection(user["ProjectionExpression"], names)
    except ExpressionError as exc:
        raise invalid(f"an expression cannot be parsed: {exc}", read.table) from exc
    read.base_fetch = index is not None and not index.shows_locks
    if read.base_fetch:
        _plan_base_fetch(read, names)
    else:
        _plan_direct(read, names)
    return read


def _plan_direct(read: ReadPlan, names: dict[str, str]) -> None:
    """Items carry their protocol attributes: add them to the projection, widen the filter."""
    sent = read.params = dict(read.params)
    if read.projection is not None or read.count_only:
        keys = _unprojected_keys(read)
        names.update(keys)
        names.update({p: a for a, p in PROTOCOL_NAMES.items()})
        base = [sent["ProjectionExpression"]] if sent.get("ProjectionExpression") else []
        sent["ProjectionExpression"] = ", ".join([*base, *keys, *PROTOCOL_NAMES.values()])
        read.added = frozenset(keys.values()) | frozenset(PROTOCOL_NAMES)
        if read.count_only:
            sent["Select"] = "SPECIFIC_ATTRIBUTES"
    if sent.get("FilterExpression") and read.level != "uncommitted":
        sent["FilterExpression"] = f"{grouped(sent['FilterExpression'])} OR {NEEDS_IMAGE}"
        names.update({"#ddbtxp": s.ATTR_APPLIED, "#ddbtxn": s.ATTR_TRANSIENT})
    if names:
        sent["ExpressionAttributeNames"] = names


def _plan_base_fetch(read: ReadPlan, names: dict[str, str]) -> None:
    """The index lacks the protocol attributes: every item through, the table's key back."""
    sent = read.params = dict(read.params)
    if sent.get("FilterExpression"):
        sent["FilterExpression"] = f"{grouped(sent['FilterExpression'])} OR {EVERY_ITEM}"
        names["#ddbtxv"] = s.ATTR_VERDICT
    if read.count_only:
        sent["Select"] = "ALL_PROJECTED_ATTRIBUTES"
    if read.projection is not None:
        keys = _unprojected_keys(read)
        names.update(keys)
        sent["ProjectionExpression"] = ", ".join([sent["ProjectionExpression"], *keys])
    # Placeholders only the filter used would now be unused, which DynamoDB refuses.
    sent.pop("ExpressionAttributeNames", None)
    sent.pop("ExpressionAttributeValues", None)
    expressions = (sent.get(e) or "" for e in _EXPRESSIONS)
    sent.update(used_placeholders(names, read.values, *expressions))


def _unprojected_keys(read: ReadPlan) -> dict[str, str]:
    """The key attributes the projection leaves out, by the placeholders that add them."""
    requested = {path[0] for path in read.projection or ()}
    missing = [k for k in read.key_names if k not in requested]
    return {f"#ddbtxk{i}": k for i, k in enumerate(missing)}
