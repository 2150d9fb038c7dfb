"""SERIALIZABLE reads of many items outside a transaction: a page is one snapshot, or retried.

The scenario of issue 20: items p/1 and p/2 each hold an empty list ``l``. An
older transaction X has appended 1 to p/2 and is still pending. A SERIALIZABLE
read of both (its short transaction is younger) read-locks p/1, then waits for
p/2. Meanwhile X appends 2 to p/1, wounds the reader (rolling back its short
transaction and releasing p/1), and commits. The reader must not go on to
return X's write to p/2 without X's write to p/1: its page is retried, and it
returns both of X's appends. Every many-item read API is checked, pages too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ddbtx import Isolation, Transaction, TransactionConflictError, TransactionManager
from ddbtx import schema as s
from ddbtx.instrumentation import count_requests
from helpers import FakeClock, Tables, assert_clean, create_read_table

SERIALIZABLE = Isolation.SERIALIZABLE


def key(sk: int) -> dict[str, Any]:
    return {"pk": {"S": "p"}, "sk": {"N": str(sk)}}


def append(tx: Transaction, table: str, sk: int, value: int) -> None:
    tx.update_item(
        TableName=table,
        Key=key(sk),
        UpdateExpression="SET l = list_append(l, :v)",
        ExpressionAttributeValues={":v": {"L": [{"N": str(value)}]}},
    )


def lists(items: list[dict[str, Any]]) -> dict[int, list[int]]:
    return {int(i["sk"]["N"]): [int(v["N"]) for v in i["l"]["L"]] for i in items}


QUERY = {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "p"}}}

#: Each many-item read at SERIALIZABLE, returning the items of its (first) page. Each
#: locks p/1 before p/2: keys in that order, or DynamoDB's order within one partition.
READS: dict[str, Callable[[TransactionManager, str], list[dict[str, Any]]]] = {
    "batch_get_item": lambda tm, t: tm.batch_get_item(
        RequestItems={t: {"Keys": [key(1), key(2)]}}, isolation=SERIALIZABLE
    )["Responses"][t],
    "query": lambda tm, t: tm.query(TableName=t, isolation=SERIALIZABLE, **QUERY)["Items"],
    "scan": lambda tm, t: tm.scan(TableName=t, isolation=SERIALIZABLE)["Items"],
    "query_pages": lambda tm, t: next(
        iter(tm.query_pages(TableName=t, isolation=SERIALIZABLE, **QUERY))
    )["Items"],
    "scan_pages": lambda tm, t: next(iter(tm.scan_pages(TableName=t, isolation=SERIALIZABLE)))[
        "Items"
    ],
}


@pytest.fixture
def lists_table(ddb: Any, table_name: Callable[[str], str]) -> str:
    """p/1 and p/2, each with an empty list ``l``."""
    name = table_name("lists")
    create_read_table(ddb, name)
    for sk in (1, 2):
        ddb.put_item(TableName=name, Item={**key(sk), "l": {"L": []}})
    return name


@pytest.fixture
def older(make_tm: Callable[..., TransactionManager], lists_table: str) -> Iterator[Transaction]:
    """X: an older transaction that appended 1 to p/2 and is still pending."""
    tx = make_tm().begin()
    append(tx, lists_table, 2, 1)
    yield tx
    if tx.state == s.STATE_PENDING:
        tx.rollback()


@pytest.fixture
def reader(
    make_tm: Callable[..., TransactionManager], clock: FakeClock
) -> Callable[[Callable[[], None]], TransactionManager]:
    """A coordinator that locks one item at a time and runs ``during_wait`` at each pause
    (which takes its time on the fake clock, as a real one would)."""

    def make(during_wait: Callable[[], None]) -> TransactionManager:
        def sleep(seconds: float) -> None:
            clock.advance(seconds)
            during_wait()

        return make_tm(max_workers=1, sleep=sleep)

    return make


def first_of(waits: list[int], action: Callable[[], None]) -> Callable[[], None]:
    """What runs at each of the reader's pauses: ``action`` at the first, counted in ``waits``."""

    def during_wait() -> None:
        waits.append(1)
        if len(waits) == 1:
            action()

    return during_wait


@pytest.mark.parametrize("read", sorted(READS))
def test_given_an_older_writer_that_wounds_the_reader_then_the_page_has_all_of_its_writes(
    read: str,
    reader: Callable[[Callable[[], None]], TransactionManager],
    older: Transaction,
    lists_table: str,
    ddb: Any,
    tables: Tables,
) -> None:
    # Given X (older, pending, appended 1 to p/2), which during the reader's first wait
    # for p/2 appends 2 to p/1 (wounding the reader, which holds it) and commits
    def x_commits() -> None:
        append(older, lists_table, 1, 2)
        older.commit()

    waits: list[int] = []
    tm = reader(first_of(waits, x_commits))
    # When the reader reads both items at SERIALIZABLE
    items = READS[read](tm, lists_table)
    # Then it returns X's two appends, not one of them: the wounded page was retried
    assert older.state == s.STATE_COMMITTED
    assert waits == [1]
    assert lists(items) == {1: [2], 2: [1]}
    assert_clean(ddb, Tables(tables.tx, tables.images, lists_table))


def test_given_a_reader_wounded_on_every_try_then_it_raises_a_conflict_naming_the_reason(
    make_tm: Callable[..., TransactionManager],
    reader: Callable[[Callable[[], None]], TransactionManager],
    lists_table: str,
    ddb: Any,
    tables: Tables,
) -> None:
    # Given writers older than the reader: whenever the reader locks p/1 a new one takes
    # p/2, and during the reader's wait for p/2 it appends to p/1 (wounding the reader)
    # and commits. So every try of the reader ends wounded.
    writer_tm = make_tm()
    first = writer_tm.begin()
    writers: list[Transaction] = []

    def take_p2(params: dict[str, Any], **_: Any) -> None:
        if params.get("Key") == key(1) and not (writers and writers[-1].state == s.STATE_PENDING):
            writer = writer_tm.begin(priority=first.id)
            append(writer, lists_table, 2, 20 + len(writers))
            writers.append(writer)

    def during_wait() -> None:
        held = ddb.get_item(TableName=lists_table, Key=key(1), ConsistentRead=True)["Item"]
        if writers and writers[-1].state == s.STATE_PENDING and s.ATTR_LOCK in held:
            append(writers[-1], lists_table, 1, 10 + len(writers))
            writers[-1].commit()

    tm = reader(during_wait)
    tm.client.meta.events.register("before-parameter-build.dynamodb.UpdateItem", take_p2)
    # When the reader reads both items at SERIALIZABLE
    with pytest.raises(TransactionConflictError) as raised:
        READS["batch_get_item"](tm, lists_table)
    # Then after a bounded number of tries it gives up, naming why and who
    message = str(raised.value)
    assert "rolled back by an older transaction on each of its 8 tries" in message
    assert raised.value.other_tx_id in {w.id for w in writers}
    # And every writer's appends stand, once each, and nothing of the reader is left
    assert len(writers) == 8 and all(w.state == s.STATE_COMMITTED for w in writers)
    stored = ddb.get_item(TableName=lists_table, Key=key(1), ConsistentRead=True)["Item"]
    assert [int(v["N"]) for v in stored["l"]["L"]] == [10 + n for n in range(1, 9)]
    assert_clean(ddb, Tables(tables.tx, tables.images, lists_table))


def test_given_an_insert_into_the_range_during_the_read_then_the_page_shows_it_with_its_update(
    reader: Callable[[Callable[[], None]], TransactionManager],
    older: Transaction,
    lists_table: str,
    ddb: Any,
    tables: Tables,
) -> None:
    # Given X (older, pending on p/2), which during the reader's wait inserts p/3 and
    # commits: the reader's first Query did not see p/3, but does see X's write to p/2
    def x_inserts() -> None:
        older.put_item(TableName=lists_table, Item={**key(3), "l": {"L": [{"N": "3"}]}})
        older.commit()

    tm = reader(first_of([], x_inserts))
    # When the reader queries the partition at SERIALIZABLE
    with count_requests(tm.client) as counts:
        items = READS["query"](tm, lists_table)
    # Then the page holds p/3 too: a page showing X's write to p/2 but not its insert
    # would be no snapshot. It took one Query more than the page alone to check that.
    assert lists(items) == {1: [], 2: [1], 3: [3]}
    assert counts.by_operation["Query"] == 3  # the page, its check (found p/3), the check of that
    assert_clean(ddb, Tables(tables.tx, tables.images, lists_table))


def test_given_no_contention_then_a_serializable_query_checks_its_page_with_one_more_query(
    tm: TransactionManager, lists_table: str
) -> None:
    # Given two unlocked items
    # When they are queried at SERIALIZABLE
    with count_requests(tm.client) as counts:
        items = READS["query"](tm, lists_table)
    # Then the page was read twice (the second read finds nothing it has not locked)
    assert lists(items) == {1: [], 2: []}
    assert counts.by_operation["Query"] == 2
