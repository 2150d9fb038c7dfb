"""Isolated reads of many items: request counts, pages, read locks, bad input, races.

What each read returns is checked shape by shape against native reads in
``tests/oracle/test_reads.py``; here: what it costs (exact request counts, as
the native call on unlocked items, at most one more read per page for images
in the images table), that pages follow DynamoDB's own, that reads inside a
transaction lock what they return, the index phantom docs/transactions.md documents,
and that bad input is refused before anything is sent.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from ddbtx import (
    InvalidRequestError,
    Isolation,
    TransactionConflictError,
    TransactionManager,
    TransactionRolledBackError,
)
from ddbtx import schema as s
from ddbtx._base import parts as _parts
from ddbtx._item_steps import writes as _item_writes
from ddbtx.chaos import Chaos, Crash
from ddbtx.errors import Throttled
from ddbtx.instrumentation import count_requests
from helpers import GSI, GSI_KEYS, Tables, assert_clean, create_read_table, scan, unfenced

COMMITTED, UNCOMMITTED = Isolation.COMMITTED, Isolation.UNCOMMITTED
#: Over 64 KB, so a write keeps this item's image in the images table.
BIG = "x" * (70 * 1024)
P = {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "p"}}}


def key(sk: int, pk: str = "p") -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"N": str(sk)}}


def item(sk: int, n: int, g: str = "a", **extra: Any) -> dict[str, Any]:
    return {**key(sk), "n": {"N": str(n)}, "g": {"S": g}, **extra}


def set_n(tx: Any, table: str, sk: int, n: int) -> None:
    """``tx`` sets p/``sk``'s n (an update applied under its lock)."""
    tx.update_item(
        TableName=table,
        Key=key(sk),
        UpdateExpression="SET n = :v",
        ExpressionAttributeValues={":v": {"N": str(n)}},
    )


def numbers(response: dict[str, Any]) -> list[tuple[int, int]]:
    """(sk, n) of each returned item, in order."""
    return [(int(i["sk"]["N"]), int(i["n"]["N"])) for i in response["Items"]]


@pytest.fixture
def table(ddb: Any, table_name: Callable[[str], str], tables: Tables) -> str:
    """A table with hash ``pk``, range ``sk`` and indexes, holding p/1..6 (n = sk, g = a)."""
    name = table_name("reads")
    create_read_table(ddb, name)
    for sk in range(1, 7):
        ddb.put_item(TableName=name, Item=item(sk, sk))
    return name


@pytest.fixture
def warm(tm: TransactionManager, table: str) -> TransactionManager:
    """The manager after its one-time DescribeTable calls (key schema, indexes)."""
    tm.key_types(table)
    tm.protocol.run(tm.reads.index(table, GSI))
    return tm


@pytest.fixture
def holder(make_tm: Callable[..., TransactionManager], table: str) -> Iterator[Any]:
    """Another coordinator's pending transaction: p/1 updated (image in the item), p/2
    deleted, p/7 inserted, p/3 read-locked."""
    tx = make_tm().begin()
    set_n(tx, table, 1, 100)
    tx.delete_item(TableName=table, Key=key(2))
    tx.put_item(TableName=table, Item=item(7, 7))
    tx.get_item(TableName=table, Key=key(3))
    yield tx
    if tx.state == s.STATE_PENDING:
        tx.rollback()


def read_both(
    tm: TransactionManager, op: str, params: dict[str, Any], isolation: Isolation = COMMITTED
) -> tuple[dict[str, Any], dict[str, Any], Any, Any]:
    """The same read natively and through ddbtx, each with its request counts."""
    with count_requests(tm.client) as native_counts:
        native = getattr(tm.client, op)(**params)
    native.pop("ResponseMetadata", None)
    with count_requests(tm.client) as counts:
        ours = getattr(tm, op)(isolation=isolation, **params)
    return native, ours, native_counts, counts


# --- cost: the native requests on unlocked items -------------------------------------

SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "query": ("query", {**P}),
    "query-filter": (
        "query",
        {
            "KeyConditionExpression": "pk = :p",
            "FilterExpression": "n > :two",
            "ExpressionAttributeValues": {":p": {"S": "p"}, ":two": {"N": "2"}},
        },
    ),
    "query-projection": ("query", {**P, "ProjectionExpression": "n"}),
    "query-count": ("query", {**P, "Select": "COUNT"}),
    "query-gsi": (
        "query",
        {
            "IndexName": GSI,
            "KeyConditionExpression": "g = :a",
            "ExpressionAttributeValues": {":a": {"S": "a"}},
        },
    ),
    "scan": ("scan", {}),
    "scan-limit": ("scan", {"Limit": 4}),
    "batch": ("batch_get_item", {}),
    "get": ("get_item", {"Key": key(1), "ProjectionExpression": "n"}),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("isolation", [COMMITTED, UNCOMMITTED])
def test_given_unlocked_items_when_read_then_it_costs_exactly_the_native_requests(
    warm: TransactionManager, table: str, shape: str, isolation: Isolation
) -> None:
    # Given items no transaction holds
    op, params = SHAPES[shape]
    if op == "batch_get_item":
        params = {"RequestItems": {table: {"Keys": [key(i) for i in range(1, 7)]}}}
    else:
        params = {"TableName": table, **params}
    # When read natively and through ddbtx
    native, ours, native_counts, counts = read_both(warm, op, params, isolation)
    # Then the answer and the requests (and items read) are the native call's
    if op == "batch_get_item":  # BatchGetItem returns items in no particular order
        for response in (native, ours):
            response["Responses"][table].sort(key=lambda i: int(i["sk"]["N"]))
    assert ours == native
    assert counts.by_operation == native_counts.by_operation
    assert counts.items_read == native_counts.items_read


def test_given_locked_items_when_read_committed_then_only_images_kept_apart_cost_one_more_read(
    warm: TransactionManager,
    table: str,
    ddb: Any,
    make_tm: Callable[..., TransactionManager],
) -> None:
    # Given p/1 (small) and p/5, p/6 (over 64 KB) updated by a pending transaction
    for sk in (5, 6):
        ddb.put_item(TableName=table, Item=item(sk, sk, big={"S": BIG}))
    tx = make_tm().begin()
    for sk in (1, 5, 6):
        set_n(tx, table, sk, 100)
    assert ddb.get_item(TableName=table, Key=key(6))["Item"].get(s.ATTR_IMAGE_EXTERNAL)
    # When the partition is read committed
    with count_requests(warm.client) as counts:
        page = warm.query(TableName=table, ProjectionExpression="sk, n", **P)
    # Then every item is its committed self, for one Query and one BatchGetItem for both
    # images kept in the images table (the one in the item costs nothing)
    assert numbers(page) == [(sk, sk) for sk in range(1, 7)]
    assert counts.by_operation == {"Query": 1, "BatchGetItem": 1}
    assert counts.items_read_by_operation["BatchGetItem"] == 2
    tx.rollback()


def test_given_an_index_without_the_lock_attributes_then_each_page_reads_its_base_items_once(
    warm: TransactionManager, table: str, holder: Any
) -> None:
    # Given a pending transaction (holder) and a KEYS_ONLY index, which cannot show its locks
    params = {
        "TableName": table,
        "IndexName": GSI_KEYS,
        "KeyConditionExpression": "g = :a",
        "ExpressionAttributeValues": {":a": {"S": "a"}},
    }
    warm.protocol.run(warm.reads.index(table, GSI_KEYS))
    # When read committed
    with count_requests(warm.client) as counts:
        page = warm.query(**params)
    # Then the committed items' keys come back (not the inserted p/7), for one Query and
    # one BatchGetItem
    assert [int(i["sk"]["N"]) for i in page["Items"]] == [1, 2, 3, 4, 5, 6]
    assert set(page["Items"][0]) == {"pk", "sk", "g"}
    assert counts.by_operation == {"Query": 1, "BatchGetItem": 1}


# --- what committed and uncommitted reads see -----------------------------------------


def test_given_a_pending_value_that_fails_the_filter_when_read_committed_then_the_item_is_returned(
    tm: TransactionManager, table: str, holder: Any
) -> None:
    # Given p/1 committed with n = 1, pending n = 100 (holder)
    filtered = {"FilterExpression": "n < :five", "ExpressionAttributeValues": {":five": {"N": "5"}}}
    # When the committed items with n < 5 are scanned, and the uncommitted ones
    committed = tm.scan(TableName=table, **filtered)
    uncommitted = tm.scan(TableName=table, isolation=UNCOMMITTED, **filtered)
    # Then the committed read has p/1 (its committed n passes), p/2 (its delete is pending)
    # and not p/7 (inserted); the uncommitted one sees the pending values
    assert sorted(numbers(committed)) == [(1, 1), (2, 2), (3, 3), (4, 4)]
    assert sorted(numbers(uncommitted)) == [(3, 3), (4, 4)]
    assert all(not a.startswith(s.RESERVED_PREFIX) for i in committed["Items"] for a in i)


def test_given_locked_items_when_counted_then_the_count_is_of_the_committed_items(
    tm: TransactionManager, table: str, holder: Any
) -> None:
    committed = tm.query(TableName=table, Select="COUNT", **P)
    uncommitted = tm.query(TableName=table, Select="COUNT", isolation=UNCOMMITTED, **P)
    # p/1..6 committed; uncommitted: p/2 is being deleted and p/7 inserted
    assert (committed["Count"], uncommitted["Count"]) == (6, 6)
    assert "Items" not in committed
    # ScannedCount is what DynamoDB read: the inserted p/7 too
    assert committed["ScannedCount"] == 7


def test_given_locked_items_across_pages_when_paged_then_the_pages_are_dynamodbs_own(
    tm: TransactionManager, ddb: Any, table: str, holder: Any
) -> None:
    # Given the holder's items spread over pages of 2
    params = {"TableName": table, "Limit": 2, **P}
    native_keys = []
    start: dict[str, Any] = {}
    while True:
        page = ddb.query(**params, **start)
        native_keys.append(page.get("LastEvaluatedKey"))
        if "LastEvaluatedKey" not in page:
            break
        start = {"ExclusiveStartKey": page["LastEvaluatedKey"]}
    # When every page is read committed
    pages = list(tm.query_pages(**params))
    # Then the pages end where DynamoDB's do, and together hold the committed items
    assert [p.get("LastEvaluatedKey") for p in pages] == native_keys
    assert [n for p in pages for n in numbers(p)] == [(sk, sk) for sk in range(1, 7)]
    scanned = [n for p in tm.scan_pages(TableName=table, Limit=3) for n in numbers(p)]
    assert sorted(scanned) == [(sk, sk) for sk in range(1, 7)]


def test_given_an_index_move_when_queried_committed_then_the_documented_phantom_is_missed(
    tm: TransactionManager, table: str, make_tm: Callable[..., TransactionManager]
) -> None:
    # Given p/4 committed under g = a, and a pending write moving it to g = b
    tx = make_tm().begin()
    tx.update_item(
        TableName=table,
        Key=key(4),
        UpdateExpression="SET g = :b",
        ExpressionAttributeValues={":b": {"S": "b"}},
    )

    def under(g: str) -> list[int]:
        page = tm.query(
            TableName=table,
            IndexName=GSI,
            KeyConditionExpression="g = :g",
            ExpressionAttributeValues={":g": {"S": g}},
        )
        return [int(i["sk"]["N"]) for i in page["Items"]]

    # When the index is queried committed under both values
    # Then g = b drops it (its image says g = a), and g = a cannot find it: the index only
    # holds its pending value. This is the phantom docs/transactions.md documents.
    assert under("b") == []
    assert under("a") == [1, 2, 3, 5, 6]
    assert tm.get_item(TableName=table, Key=key(4))["Item"]["g"] == {"S": "a"}
    tx.rollback()
    assert under("a") == [1, 2, 3, 4, 5, 6]


def test_given_an_image_removed_by_a_completion_meanwhile_then_the_item_is_read_again(
    warm: TransactionManager, table: str, ddb: Any, make_tm: Callable[..., TransactionManager]
) -> None:
    tm = warm
    # Given p/5 (over 64 KB) updated by a pending transaction: its image is kept apart
    ddb.put_item(TableName=table, Item=item(5, 5, big={"S": BIG}))
    other = make_tm()
    tx = other.begin()
    set_n(tx, table, 5, 100)

    # When the transaction commits (and deletes the image) just before the image is read
    def commit_first(model: Any, **_: Any) -> None:
        if model.name == "BatchGetItem" and tx.state == s.STATE_PENDING:
            tx.commit()

    tm.client.meta.events.register("before-call.dynamodb", commit_first)
    try:
        with count_requests(tm.client) as counts:
            page = tm.query(TableName=table, **P)
    finally:
        tm.client.meta.events.unregister("before-call.dynamodb", commit_first)
    # Then the item is read again, now committed: its new value, one GetItem more
    assert (5, 100) in numbers(page)
    assert counts.by_operation == {"Query": 1, "BatchGetItem": 1, "GetItem": 1}


# --- inside a transaction -------------------------------------------------------------


def test_given_a_query_in_a_transaction_then_every_item_returned_is_read_locked_until_the_end(
    warm: TransactionManager, table: str, ddb: Any, make_tm: Callable[..., TransactionManager]
) -> None:
    tm = warm
    tx = tm.begin()
    # When the transaction queries the items with n > 2
    params = {
        "TableName": table,
        "KeyConditionExpression": "pk = :p",
        "FilterExpression": "n > :two",
        "ExpressionAttributeValues": {":p": {"S": "p"}, ":two": {"N": "2"}},
    }
    with count_requests(tm.client) as counts:
        page = tx.query(**params)
    # Then it gets them, each now locked by it: one Query, one add, one lock per item
    assert numbers(page) == [(3, 3), (4, 4), (5, 5), (6, 6)]
    locks = {
        sk: ddb.get_item(TableName=table, Key=key(sk))["Item"].get(s.ATTR_LOCK)
        for sk in range(1, 7)
    }
    assert [sk for sk, lock in locks.items() if lock] == [3, 4, 5, 6]
    assert counts.by_operation == {"Query": 1, "PutItem": 1, "UpdateItem": 4}
    # And a younger transaction cannot write one of them until it ends (repeatable read);
    # it gives up before the holder would count as stale
    with pytest.raises(TransactionConflictError), make_tm(lock_wait=1.0).transaction() as younger:
        set_n(younger, table, 4, 0)
    assert numbers(tx.query(**params)) == numbers(page)
    tx.commit()
    tx.delete()
    assert_clean(ddb, Tables(tm.transactions_table, tm.images_table, table))


def test_given_own_writes_when_queried_in_the_transaction_then_they_are_seen_and_judged(
    tm: TransactionManager, table: str
) -> None:
    tx = tm.begin()
    set_n(tx, table, 1, 100)
    tx.delete_item(TableName=table, Key=key(2))
    tx.put_item(TableName=table, Item=item(8, 8))
    page = tx.query(
        TableName=table,
        KeyConditionExpression="pk = :p",
        FilterExpression="n < :ten",
        ExpressionAttributeValues={":p": {"S": "p"}, ":ten": {"N": "10"}},
    )
    # p/1 now fails the filter, p/2 is deleted, p/8 is new
    assert numbers(page) == [(3, 3), (4, 4), (5, 5), (6, 6), (8, 8)]
    tx.rollback()


def test_given_a_younger_holder_when_an_older_transaction_queries_then_it_reads_committed_values(
    tm: TransactionManager, table: str, make_tm: Callable[..., TransactionManager]
) -> None:
    # Given an older transaction, and a younger one holding a pending write on p/1
    older = tm.begin()
    younger = make_tm().begin()
    set_n(younger, table, 1, 100)
    # When the older one queries the partition
    page = older.query(TableName=table, **P)
    # Then it wounded the younger one (wound-wait) and read the committed value under its lock
    assert numbers(page)[0] == (1, 1)
    with pytest.raises(TransactionRolledBackError):
        younger.commit()
    older.rollback()


def test_given_a_serializable_read_then_it_locks_while_reading_and_leaves_nothing(
    tm: TransactionManager, table: str, ddb: Any
) -> None:
    page = tm.query(TableName=table, isolation=Isolation.SERIALIZABLE, **P)
    batch = tm.batch_get_item(
        RequestItems={table: {"Keys": [key(1), key(9)], "ProjectionExpression": "n"}},
        isolation=Isolation.SERIALIZABLE,
    )
    assert numbers(page) == [(sk, sk) for sk in range(1, 7)]
    assert batch["Responses"] == {table: [{"n": {"N": "1"}}]}
    assert_clean(ddb, Tables(tm.transactions_table, tm.images_table, table))


# --- bad input: refused before anything is sent ---------------------------------------

BAD: dict[str, tuple[str, dict[str, Any], str]] = {
    "filter-on-lock": (
        "scan",
        {"FilterExpression": "attribute_exists(#l)", "ExpressionAttributeNames": {"#l": "_tx:id"}},
        "reserved prefix",
    ),
    "projection-of-image": (
        "scan",
        {"ProjectionExpression": "#i", "ExpressionAttributeNames": {"#i": "_tx:img"}},
        "reserved prefix",
    ),
    "key-condition-on-protocol": (
        "query",
        {
            "KeyConditionExpression": "#k = :p",
            "ExpressionAttributeNames": {"#k": "_tx:new"},
            "ExpressionAttributeValues": {":p": {"S": "p"}},
        },
        "reserved prefix",
    ),
    "ddbtx-name-placeholder": (
        "scan",
        {"ProjectionExpression": "#ddbtxk0", "ExpressionAttributeNames": {"#ddbtxk0": "n"}},
        "reserved by ddbtx",
    ),
    "ddbtx-value-placeholder": (
        "scan",
        {"FilterExpression": "n = :ddbtxv", "ExpressionAttributeValues": {":ddbtxv": {"N": "1"}}},
        "reserved by ddbtx",
    ),
    "legacy-filter": ("scan", {"ScanFilter": {}}, "legacy"),
    "legacy-attributes": ("query", {**P, "AttributesToGet": ["n"]}, "legacy"),
    "unknown-parameter": ("scan", {"Bogus": 1}, "does not support"),
    "unused-name": (
        "scan",
        {"ProjectionExpression": "n", "ExpressionAttributeNames": {"#x": "x"}},
        "Value provided in ExpressionAttributeNames unused in expressions: keys: {#x}",
    ),
    "undefined-value": ("scan", {"FilterExpression": "n = :x"}, "attribute value: :x"),
    "empty-names": ("scan", {"ExpressionAttributeNames": {}}, "must not be empty"),
    "count-with-projection": ("scan", {"Select": "COUNT", "ProjectionExpression": "n"}, "COUNT"),
    "no-key-condition": ("query", {}, "KeyConditionExpression is missing"),
    "unknown-index": ("query", {**P, "IndexName": "nope"}, "has no index"),
    "unparsable-filter": ("scan", {"FilterExpression": "n = = n"}, "cannot be parsed"),
    "batch-empty": ("batch_get_item", {"RequestItems": {}}, "RequestItems"),
    "batch-bad-key": (
        "batch_get_item",
        {"Keys": [{"pk": {"N": "1"}, "sk": {"N": "1"}}]},
        "does not match the schema",
    ),
    "batch-duplicate-keys": ("batch_get_item", {"Keys": [key(1), key(1)]}, "duplicates"),
    "get-missing-key-part": ("get_item", {"Key": {"pk": {"S": "p"}}}, "does not match the schema"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_given_bad_input_when_read_then_a_specific_error_and_no_request(
    warm: TransactionManager, table: str, case: str
) -> None:
    op, params, message = BAD[case]
    if op == "batch_get_item" and "RequestItems" not in params:
        params = {"RequestItems": {table: params}}
    elif op != "batch_get_item":
        params = {"TableName": table, **params}
    with count_requests(warm.client) as counts, pytest.raises(InvalidRequestError, match=message):
        getattr(warm, op)(**params)
    assert counts.total == 0


# --- faults ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["before", "after", "lost"])
@pytest.mark.fault_product("kind")
def test_given_a_crash_at_any_call_of_a_locking_query_when_swept_then_nothing_is_left(
    make_tm: Callable[..., TransactionManager], table: str, ddb: Any, kind: str
) -> None:
    before = sorted(map(repr, scan(ddb, table)))
    for index in range(20):
        # Given a coordinator that dies at call `index` of a read-locking query
        victim = make_tm(max_workers=1)
        victim.key_types(table)
        chaos = Chaos(victim.client)
        chaos.arm(kind, at=index)  # type: ignore[arg-type]
        tx = victim.begin()
        with contextlib.suppress(Crash):
            tx.query(TableName=table, **P)
        chaos.close()
        if not chaos.fired:
            break
        # When a sweeper completes its transaction
        make_tm().sweep(tx.id, rollback_after=timedelta(0), delete_after=timedelta(0))
        # Then every lock is gone and every item as it was (the fence, a counter, stays)
        after = sorted(repr(unfenced(item)) for item in scan(ddb, table))
        assert after == before, f"{kind} at call {index}"
        assert_clean(ddb, Tables(victim.transactions_table, victim.images_table, table))
    assert index == 8, "each of the 8 calls was faulted: the query, the add, 6 locks"


@pytest.mark.parametrize("kind", ["lost", "throttle"])
def test_given_a_fault_at_any_call_of_a_committed_read_then_it_is_right_or_raises(
    make_tm: Callable[..., TransactionManager], table: str, ddb: Any, kind: str
) -> None:
    # Given an applied write with its image in the item (p/1) and one kept apart (p/5)
    ddb.put_item(TableName=table, Item=item(5, 5, big={"S": BIG}))
    holder = make_tm().begin()
    for sk in (1, 5):
        set_n(holder, table, sk, 100)
    for index in range(5):
        # When call `index` of a committed query is lost (and retried) or throttled
        reader = make_tm(max_attempts=1 if kind == "throttle" else 3)
        reader.key_types(table)
        chaos = Chaos(reader.client)
        chaos.arm(kind, at=index)  # type: ignore[arg-type]
        try:
            page = reader.query(TableName=table, ProjectionExpression="sk, n", **P)
        except Throttled:
            assert kind == "throttle"
            continue
        finally:
            chaos.close()
        if not chaos.fired:
            break
        # Then the answer, when there is one, is the committed one
        assert numbers(page) == [(sk, sk) for sk in range(1, 7)], f"{kind} at call {index}"
    assert index == 2, "the Query and the image read were both faulted"
    holder.rollback()


def test_given_an_image_over_several_rows_when_read_committed_then_it_is_joined_back(
    warm: TransactionManager,
    table: str,
    ddb: Any,
    make_tm: Callable[..., TransactionManager],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given rows that split past 1.5 KB (as they do near 400 KB), and a pending update of a
    # 3 KB item: its image is kept apart, over several rows
    monkeypatch.setattr(_parts, "ROW_LIMIT", 1500)
    monkeypatch.setattr(_parts, "PART_BYTES", 400)
    monkeypatch.setattr(_item_writes, "INLINE_IMAGE_LIMIT", 0)
    noise = secrets.token_hex(1500)  # does not compress to one part
    ddb.put_item(TableName=table, Item=item(5, 5, big={"S": noise}))
    holder = make_tm().begin()
    set_n(holder, table, 5, 100)
    parts = [r for r in scan(ddb, holder.manager.images_table) if s.ROW_PARTS not in r]
    # When the partition is read committed
    with count_requests(warm.client) as counts:
        page = warm.query(TableName=table, **P)
    # Then the item is its committed self, big attribute and all: its image's first row
    # comes with the page's BatchGetItem, each further part with a GetItem
    found = {int(i["sk"]["N"]): i for i in page["Items"]}
    assert found[5]["n"] == {"N": "5"} and found[5]["big"] == {"S": noise}
    assert len(parts) >= 2
    assert counts.by_operation == {"Query": 1, "BatchGetItem": 1, "GetItem": len(parts)}
    holder.rollback()
