"""The read oracle (issue 12): isolated reads through ddbtx against native reads of twins.

Given three twin tables (see :mod:`read_shapes`): ``ours``, on which a live
transaction holds every kind of pending write, ``before`` with the committed
items, and ``after`` with the pending writes made natively. When a read shape
is sent through ddbtx to ``ours`` at ``COMMITTED``, then it answers what the
same read answers natively on ``before``; at ``UNCOMMITTED``, what it answers
on ``after``. Every page is followed; the items (in order for a Query) and the
total ``Count`` are compared, and an error natively is an error through ddbtx.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from botocore.exceptions import ClientError

from ddbtx import Isolation, Transaction, TransactionManager
from ddbtx.errors import DdbtxError
from ddbtx.local import KINDS, LocalDynamo
from helpers import create_read_table

from .read_shapes import BIG, PENDING, SEED, SHAPES, ReadShape
from .runner import normal

LEVELS = {"committed": Isolation.COMMITTED, "uncommitted": Isolation.UNCOMMITTED}

#: Where an emulator departs from AWS's documented behaviour: (shape id, emulator) -> AWS.
EMULATOR_DEVIATIONS: dict[tuple[str, str], str] = {
    ("query/filter-size", "moto"): (
        "size() is a filter function (Developer Guide: Condition and filter expressions, "
        "functions); moto fails with an internal error"
    ),
    ("query/error-syntax", "moto"): (
        "a malformed filter is a ValidationException (Developer Guide: Condition and filter "
        "expressions, syntax); moto fails with an internal error"
    ),
}


@dataclass
class ReadTwins:
    kind: str
    client: Any
    tm: TransactionManager
    tables: dict[str, str]
    live: Transaction


def _native(client: Any, table: str, op: str, params: dict[str, Any]) -> None:
    if op == "get":  # a read lock changes nothing natively
        return
    getattr(client, f"{op}_item")(TableName=table, **params)


@pytest.fixture(scope="module", params=KINDS)
def read_twins(
    request: pytest.FixtureRequest, emulators: dict[str, LocalDynamo]
) -> Iterator[ReadTwins]:
    """The three twins on one emulator, and the live transaction holding ``ours``."""
    client = emulators[request.param].client()
    run = uuid.uuid4().hex[:8]
    tables = {role: f"reads-{role}-{run}" for role in ("ours", "before", "after")}
    tm = TransactionManager(client, f"reads-tx-{run}", f"reads-img-{run}")
    tm.create_tables()
    for table in tables.values():
        create_read_table(client, table)
        for item in SEED:
            client.put_item(TableName=table, Item=item)
    live = tm.begin()
    for op, params in PENDING:
        getattr(live, f"{op}_item")(TableName=tables["ours"], **params)
        _native(client, tables["after"], op, params)
    yield ReadTwins(request.param, client, tm, tables, live)
    live.rollback()
    live.delete()
    for table in [*tables.values(), tm.transactions_table, tm.images_table]:
        client.delete_table(TableName=table)


@dataclass(frozen=True)
class Answer:
    """What a read returned over all its pages: items (normal form) and total Count."""

    error: str | None
    items: list[Any]
    count: int


def _follow(read: Callable[..., dict[str, Any]], params: dict[str, Any]) -> tuple[list[Any], int]:
    items: list[Any] = []
    count = 0
    current = dict(params)
    for _ in range(100):
        page = read(**current)
        items.extend(normal(item) for item in page.get("Items", []))
        count += page["Count"]
        if not page.get("LastEvaluatedKey"):
            return items, count
        current["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    raise AssertionError("more than 100 pages")


def _without_phantoms(native: Answer, shape: ReadShape) -> Answer:
    """The native answer less the documented phantoms (docs/transactions.md, "Reads of many
    items"): an index holds an item's pending value, so an item whose committed value is in
    the read's range but whose pending value is not cannot be found through the index. Each
    phantom must be in the native answer, or the case shows nothing."""
    phantoms = {(pk, str(sk)) for pk, sk in shape.phantoms}

    def name(item: Any) -> tuple[str, str]:
        return item["pk"][1], item["sk"][1]

    assert phantoms <= {name(item) for item in native.items}, "a phantom not in the range"
    kept = [item for item in native.items if name(item) not in phantoms]
    return Answer(native.error, kept, native.count - len(phantoms))


def _sorted(items: list[Any]) -> list[Any]:
    """Items in one order whatever the order of their attributes (a Scan's order is the
    table's, not the same in two tables)."""
    return sorted(items, key=lambda item: repr(sorted(item.items())))


def _answer(shape: ReadShape, table: str, read: Callable[..., dict[str, Any]]) -> Answer:
    """Send ``shape`` to ``table`` with ``read`` (a client's method, or ddbtx's)."""
    try:
        if shape.op == "batch":
            response = read(RequestItems={table: shape.params})
            assert not response.get("UnprocessedKeys"), "unprocessed keys in a small batch"
            items = [normal(item) for item in response["Responses"].get(table, [])]
            return Answer(None, _sorted(items), len(items))
        if shape.op == "get":
            found = read(TableName=table, **shape.params).get("Item")
            return Answer(
                None, [normal(found)] if found is not None else [], int(found is not None)
            )
        items, count = _follow(read, {"TableName": table, **shape.params})
        return Answer(None, _sorted(items) if shape.op == "scan" else items, count)
    except (ClientError, DdbtxError) as exc:
        code = exc.response["Error"]["Code"] if isinstance(exc, ClientError) else type(exc).__name__
        return Answer(code, [], 0)


_CLIENT_OPS = {"query": "query", "scan": "scan", "get": "get_item", "batch": "batch_get_item"}


@pytest.fixture
def expectation(request: pytest.FixtureRequest, shape: ReadShape, level: str) -> None:
    kind = request.node.callspec.params["read_twins"]
    deviation = EMULATOR_DEVIATIONS.get((shape.id, kind))
    if deviation:
        pytest.skip(f"{kind} departs from AWS here; AWS: {deviation}")


@pytest.mark.usefixtures("expectation")
@pytest.mark.parametrize("level", sorted(LEVELS))
@pytest.mark.parametrize("shape", SHAPES, ids=[s.id for s in SHAPES])
def test_an_isolated_read_answers_what_the_native_read_answers_on_that_state(
    read_twins: ReadTwins, shape: ReadShape, level: str
) -> None:
    client, tm, tables = read_twins.client, read_twins.tm, read_twins.tables
    reference = tables["before" if level == "committed" else "after"]
    # When the read is sent natively to the reference, and through ddbtx to ours
    native = _answer(shape, reference, getattr(client, _CLIENT_OPS[shape.op]))
    isolation = LEVELS[level]

    def ours(**params: Any) -> dict[str, Any]:
        method: Callable[..., dict[str, Any]] = getattr(tm, _CLIENT_OPS[shape.op])
        return method(isolation=isolation, **params)

    through = _answer(shape, tables["ours"], ours)
    if level == "committed" and shape.phantoms:
        native = _without_phantoms(native, shape)
    # Then both give the same items and Count, or the same error
    # (a ddbtx error standing for DynamoDB's is a ClientError with its code: errors.py)
    assert native.error == through.error, (native, through)
    assert through.items == native.items
    assert through.count == native.count


def test_the_big_item_keeps_its_image_in_the_images_table(read_twins: ReadTwins) -> None:
    """The oracle covers external images: p5's image is not in the item."""
    stored = read_twins.client.get_item(
        TableName=read_twins.tables["ours"], Key={"pk": {"S": "p"}, "sk": {"N": "5"}}
    )["Item"]
    assert stored["big"] == {"S": BIG}
    assert "_tx:ext" in stored and "_tx:img" not in stored
