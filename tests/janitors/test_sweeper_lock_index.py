"""The stray-lock pass reads the sparse lock index, so its reads follow the locked items,
not the table; a table without the index is scanned whole, with a warning saying so.

Every table here is a real table on both emulators; reads are counted from the
responses (``ScannedCount``), and the sweeper and the coordinators share a fake clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from ddbtx import TransactionManager
from ddbtx import schema as s
from ddbtx.cli import main
from ddbtx.errors import TableNotFound
from ddbtx.local import LocalDynamo
from ddbtx.sweeper import Cursor, Sweeper
from ddbtx.tables import LockIndexError, add_lock_index, create_data_table, lock_index_status
from helpers import Tables, data_state

from .support import drop_record, transfer

ITEMS = 60  # plain items in the data table
STRAY = 3  # of them read-locked by a transaction whose record is lost
SEEDED = {f"k{i}": 1 for i in range(ITEMS)}


@dataclass
class DataScans:
    """Every Scan one client sent to one table: its parameters and ScannedCount."""

    params: list[dict[str, Any]] = field(default_factory=list)
    scanned: list[int] = field(default_factory=list)

    @property
    def items_read(self) -> int:
        return sum(self.scanned)


@contextmanager
def data_scans(client: Any, table: str) -> Iterator[DataScans]:
    seen = DataScans()
    mine: list[bool] = []

    def request(params: dict[str, Any], **_: Any) -> None:
        mine.append(params.get("TableName") == table)
        if mine[-1]:
            seen.params.append(dict(params))

    def response(parsed: dict[str, Any], **_: Any) -> None:
        if mine.pop(0):
            seen.scanned.append(int(parsed.get("ScannedCount", 0)))

    events = client.meta.events
    events.register("provide-client-params.dynamodb.Scan", request)
    events.register("after-call.dynamodb.Scan", response)
    try:
        yield seen
    finally:
        events.unregister("provide-client-params.dynamodb.Scan", request)
        events.unregister("after-call.dynamodb.Scan", response)


@pytest.fixture
def plain_table(ddb: Any, table_name: Callable[[str], str]) -> str:
    """A data table (hash ``pk``) as a user may bring it: no lock index."""
    name = table_name("plain")
    create_data_table(ddb, name, lock_index=False)
    return name


@pytest.fixture
def stray_locks(
    make_tm: Callable[..., TransactionManager], ddb: Any
) -> Callable[[str], tuple[str, str]]:
    """Seed a data table, then: k0..k2 read-locked by a transaction whose record is lost,
    and k10/k11 locked by a live transfer. Returns (lost id, live id)."""

    def make(table: str) -> tuple[str, str]:
        for pk, balance in SEEDED.items():
            ddb.put_item(TableName=table, Item={"pk": {"S": pk}, "balance": {"N": str(balance)}})
        tm = make_tm()
        lost = tm.begin()
        for i in range(STRAY):
            lost.get_item(TableName=table, Key={"pk": {"S": f"k{i}"}})
        drop_record(ddb, Tables(tm.transactions_table, tm.images_table, table), lost.id)
        live = transfer(tm, table, "k10", "k11", 1)
        return lost.id, live.id

    return make


def janitor(tm: TransactionManager, table: str, **options: Any) -> Sweeper:
    settings: dict[str, Any] = {"persist_cursor": False, **options}
    return Sweeper(
        tm,
        rollback_after=timedelta(minutes=1),
        delete_after=timedelta(days=1),
        data_tables=[table],
        **settings,
    )


def locked(ddb: Any, table: str) -> dict[str, str]:
    return {
        pk: item[s.ATTR_LOCK]["S"].split("/")[0]
        for pk, item in data_state(ddb, table).items()
        if s.ATTR_LOCK in item
    }


def test_given_stray_locks_in_an_indexed_table_when_swept_then_only_locked_items_are_read(
    tm: TransactionManager,
    tables: Tables,
    stray_locks: Callable[[str], tuple[str, str]],
    ddb: Any,
) -> None:
    # Given 60 items, 3 of them locked by a lost transaction and 2 by a live one, in a
    # table with the lock index (the one create_data_table makes)
    _, live = stray_locks(tables.data)
    sweeper = janitor(tm, tables.data)

    # When the sweeper runs
    with data_scans(sweeper.client, tables.data) as scans:
        report = sweeper.run()

    # Then the lost transaction's locks are released and the live one's kept
    assert (report.locks_released, report.errors, report.exhausted) == (STRAY, 0, True)
    assert locked(ddb, tables.data) == {"k10": live, "k11": live}
    # ... and the data table was read through its index only: the 5 locked items
    assert [p.get("IndexName") for p in scans.params] == [s.LOCK_INDEX]
    assert not scans.params[0].get("ConsistentRead")  # a GSI has no consistent reads
    assert scans.items_read == STRAY + 2


def test_given_a_table_without_the_index_when_swept_then_it_is_scanned_whole_and_says_so(
    tm: TransactionManager,
    plain_table: str,
    stray_locks: Callable[[str], tuple[str, str]],
    ddb: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given the same locks in a table the user brought without the lock index
    _, live = stray_locks(plain_table)
    sweeper = janitor(tm, plain_table)

    # When the sweeper runs
    with data_scans(sweeper.client, plain_table) as scans, caplog.at_level(logging.WARNING):
        report = sweeper.run()

    # Then the same locks are released, by a scan of every item of the table
    assert (report.locks_released, report.errors, report.exhausted) == (STRAY, 0, True)
    assert locked(ddb, plain_table) == {"k10": live, "k11": live}
    assert [p.get("IndexName") for p in scans.params] == [None]
    assert scans.items_read == ITEMS
    # ... and a warning names the table and the command that adds the index
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(plain_table in w and f"ddbtx add-lock-index {plain_table}" in w for w in warnings)


def test_given_a_table_scan_cursor_when_the_index_exists_then_the_index_pass_starts_over(
    make_tm: Callable[..., TransactionManager],
    tables: Tables,
    stray_locks: Callable[[str], tuple[str, str]],
    ddb: Any,
) -> None:
    # Given a cursor stored inside a table scan (a key with no lock attribute, as a run
    # from before the index existed leaves it), and stray locks in the indexed table
    stray_locks(tables.data)
    sweeper = janitor(make_tm(), tables.data, persist_cursor=True)
    inside_scan = Cursor(task=f"data:{tables.data}", scan_key={"pk": {"S": "k5"}})
    assert sweeper.save_cursor(0, inside_scan)

    # When the sweeper resumes from it
    report = sweeper.run()

    # Then the index is read from its start and every stray lock is released
    assert (report.locks_released, report.errors, report.exhausted) == (STRAY, 0, True)


def test_given_an_index_cursor_when_the_index_is_gone_then_the_scan_starts_over(
    make_tm: Callable[..., TransactionManager],
    plain_table: str,
    stray_locks: Callable[[str], tuple[str, str]],
    ddb: Any,
) -> None:
    # Given a cursor inside an index scan of a table that has no index (any more)
    lost, _ = stray_locks(plain_table)
    sweeper = janitor(make_tm(), plain_table, persist_cursor=True)
    in_index = {"pk": {"S": "k1"}, s.ATTR_LOCK: {"S": f"{lost}/0"}}
    assert sweeper.save_cursor(0, Cursor(task=f"data:{plain_table}", scan_key=in_index))

    # When the sweeper resumes from it
    report = sweeper.run()

    # Then the table is scanned from its start and every stray lock is released
    assert (report.locks_released, report.errors, report.exhausted) == (STRAY, 0, True)


def test_given_an_index_entry_outdated_by_the_time_it_is_read_then_the_new_lock_is_kept(
    make_tm: Callable[..., TransactionManager],
    tables: Tables,
    stray_locks: Callable[[str], tuple[str, str]],
    ddb: Any,
) -> None:
    # Given stray locks on k0..k2, and a coordinator that, right after the sweeper read
    # the index, releases k0 and locks it for a live transaction of its own (what an
    # eventually consistent index may show: an entry that is no longer true)
    lost, _ = stray_locks(tables.data)
    rescuer = make_tm()
    sweeper = janitor(make_tm(), tables.data)
    relocked: list[str] = []

    def after_index_page(parsed: dict[str, Any], **_: Any) -> None:
        shows_k0 = any(entry["pk"] == {"S": "k0"} for entry in parsed.get("Items", []))
        if shows_k0 and not relocked:
            rescuer.protocol.run(
                rescuer.protocol.undo(lost, tables.data, {"pk": {"S": "k0"}}, None)
            )
            tx = rescuer.begin()
            tx.get_item(TableName=tables.data, Key={"pk": {"S": "k0"}})
            relocked.append(tx.id)

    with data_scans(sweeper.client, tables.data) as scans:
        sweeper.client.meta.events.register("after-call.dynamodb.Scan", after_index_page)
        report = sweeper.run()

    # Then the sweeper re-reads the item, sees the live lock and keeps it
    assert scans.params and relocked
    assert (report.locks_released, report.errors) == (STRAY - 1, 0)
    assert locked(ddb, tables.data)["k0"] == relocked[0]


@pytest.mark.parametrize(
    ("indexes", "status"),
    [
        ([], None),
        ([{"IndexName": "other", "IndexStatus": "ACTIVE"}], None),
        ([{"IndexName": s.LOCK_INDEX, "IndexStatus": "CREATING"}], "CREATING"),
        (
            [{"IndexName": s.LOCK_INDEX, "IndexStatus": "ACTIVE", "Backfilling": True}],
            "BACKFILLING",
        ),
        ([{"IndexName": s.LOCK_INDEX, "IndexStatus": "ACTIVE"}], "ACTIVE"),
    ],
)
def test_lock_index_status_is_active_only_once_built(
    indexes: list[dict[str, Any]], status: str | None
) -> None:
    # Given a DescribeTable description; Then only a built index counts as ACTIVE
    assert lock_index_status({"TableName": "t", "GlobalSecondaryIndexes": indexes}) == status


# --- adding the index to a table the user brings ------------------------------------


def skip_on_dynalite(backend: LocalDynamo) -> None:
    if backend.kind == "dynalite":
        # UpdateTable's GlobalSecondaryIndexUpdates.Create adds an index to an existing
        # table and backfills it ("Adding a global secondary index to an existing table",
        # DynamoDB Developer Guide; API_UpdateTable). dynalite requires
        # ProvisionedThroughput even on on-demand tables and then ignores the Create.
        pytest.skip("dynalite cannot add a global secondary index to an existing table")


def test_given_a_table_with_stray_locks_when_the_index_is_added_then_sweeps_use_it(
    backend: LocalDynamo,
    tm: TransactionManager,
    plain_table: str,
    stray_locks: Callable[[str], tuple[str, str]],
    ddb: Any,
) -> None:
    skip_on_dynalite(backend)
    # Given a user's table without the index, already holding locks
    _, live = stray_locks(plain_table)

    # When the index is added (twice: the second call changes nothing)
    assert add_lock_index(ddb, plain_table, poll_seconds=0.1) == "ACTIVE"
    assert add_lock_index(ddb, plain_table, poll_seconds=0.1) == "ACTIVE"

    # Then the existing locks are in it and the sweeper reads only them
    sweeper = janitor(tm, plain_table)
    with data_scans(sweeper.client, plain_table) as scans:
        report = sweeper.run()
    assert report.locks_released == STRAY
    assert [p.get("IndexName") for p in scans.params] == [s.LOCK_INDEX]
    assert scans.items_read == STRAY + 2
    assert locked(ddb, plain_table) == {"k10": live, "k11": live}


def test_given_an_index_of_that_name_on_another_key_then_adding_refuses(
    ddb: Any, table_name: Callable[[str], str]
) -> None:
    # Given a table whose index named like the lock index is keyed on something else
    name = table_name("clash")
    ddb.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "owner", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": s.LOCK_INDEX,
                "KeySchema": [{"AttributeName": "owner", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
    )

    # When the lock index is added; Then it refuses, naming the table and the clash
    with pytest.raises(LockIndexError, match=f"{name} has an index named"):
        add_lock_index(ddb, name)


def test_given_no_such_table_then_adding_the_index_names_it(ddb: Any) -> None:
    with pytest.raises(TableNotFound):
        add_lock_index(ddb, "no-such-table-here")


def test_the_cli_adds_the_index_and_reports_a_missing_table_in_one_line(
    backend: LocalDynamo,
    endpoint_env: Any,
    plain_table: str,
    ddb: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    skip_on_dynalite(backend)
    common = ["--endpoint-url", backend.endpoint_url, "--region", "us-east-1"]

    # When on-call adds the index to a table; Then it says so and the index is built
    assert main([*common, "add-lock-index", plain_table]) == 0
    out = capsys.readouterr().out
    assert plain_table in out and "ACTIVE" in out
    desc = ddb.describe_table(TableName=plain_table)["Table"]
    assert lock_index_status(desc) == "ACTIVE"

    # When the table does not exist; Then one line names it and the status is non-zero
    assert main([*common, "add-lock-index", "no-such-table-here"]) == 1
    captured = capsys.readouterr()
    lines = (captured.out + captured.err).strip().splitlines()
    assert len(lines) == 1 and "no-such-table-here" in lines[0]
