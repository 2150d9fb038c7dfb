"""The scheduled sweeper handler against real emulators: each kind of stale record,
resuming across runs, duplicate and concurrent invocations, configuration errors."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from ddbtx import TransactionManager
from ddbtx import schema as s
from ddbtx.locks import Mutex, list_locks
from ddbtx.recovery import key_from_json
from ddbtx.sweeper import CURSOR_ID, ConfigError
from helpers import assert_clean, data_state, scan

from .support import (
    LONG_AGO,
    JanitorTables,
    LambdaContext,
    abandon,
    drop_record,
    emf_metrics,
    load_handler,
    orphan_locks,
    scheduled_event,
    sweep_until_complete,
)

pytest_plugins = ("janitors.fixtures",)

SEEDED = {pk: 100 for pk in "abcdefgh"}


@pytest.fixture
def accounts(seed: Callable[..., None]) -> dict[str, int]:
    seed(**SEEDED)
    return SEEDED


def balances(ddb: Any, table: str) -> dict[str, int]:
    return {pk: int(item["balance"]["N"]) for pk, item in data_state(ddb, table).items()}


def headers(ddb: Any, tables: JanitorTables) -> dict[str, dict[str, Any]]:
    return {r[s.TX_PK]["S"]: r for r in scan(ddb, tables.tx) if r[s.TX_SK]["S"] == s.TX_HEADER_SK}


def put_image(ddb: Any, tables: JanitorTables, tx_id: str, rid: str) -> None:
    ddb.put_item(
        TableName=tables.images,
        Item={
            s.IMAGE_PK: {"S": tx_id},
            s.IMAGE_SK: {"S": rid},
            s.IMAGE_ITEM: {"M": {"pk": {"S": "nobody"}}},
        },
    )


def test_given_each_kind_of_stale_record_when_the_sweeper_runs_then_each_is_recovered(
    sweeper: Callable[[], Any],
    old_tm: TransactionManager,
    janitor_env: JanitorTables,
    accounts: dict[str, int],
    ddb: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given coordinators that died long ago: pending, committed, rolled back, and a completed record
    t = janitor_env
    pending = abandon(old_tm, t.data, "pending", ("a", "b"))
    committed = abandon(old_tm, t.data, "committed", ("c", "d"))
    rolled_back = abandon(old_tm, t.data, "rolled_back", ("e", "f"))
    completed = abandon(old_tm, t.data, "completed", ("g", "h"))
    # ... and an image whose record is gone, and one whose record is completed
    put_image(ddb, t, "0000000000000000-gone00000000", "r1")
    put_image(ddb, t, completed, "r2")
    capsys.readouterr()

    # When the scheduled sweeper runs
    report = sweeper().handler(scheduled_event(), LambdaContext())

    # Then the pending one is rolled back, the committed one rolled forward, the
    # rolled-back one completed, the old completed record deleted, orphans removed
    assert {k: report[k] for k in ("rolled_back", "rolled_forward", "completed", "deleted")} == {
        "rolled_back": 1,
        "rolled_forward": 1,
        "completed": 1,
        "deleted": 1,
    }
    assert report["orphan_images_deleted"] == 2
    assert report["stuck"] == 1 and report["stuck_ids"] == [pending]
    assert report["errors"] == 0 and report["exhausted"] is True
    assert balances(ddb, t.data) == {**SEEDED, "c": 90, "d": 110, "g": 90, "h": 110}
    remaining = headers(ddb, t)
    assert set(remaining) == {pending, committed, rolled_back}
    assert {r[s.TX_STATE]["S"] for r in remaining.values()} == {"R", "C"}
    assert_clean(ddb, t)
    # ... and every count is published as a metric in the ddbtx namespace
    published = emf_metrics(capsys.readouterr().out)
    assert published["RolledBack"] == 1 and published["RolledForward"] == 1
    assert published["Completed"] == 1 and published["Deleted"] == 1
    assert published["OrphanImagesDeleted"] == 2 and published["StuckTransactions"] == 1
    assert published["Errors"] == 0 and published["LocksReleased"] == 0


def test_given_young_transactions_when_the_sweeper_runs_then_they_are_left_alone(
    sweeper: Callable[[], Any],
    young_tm: TransactionManager,
    janitor_env: JanitorTables,
    accounts: dict[str, int],
    ddb: Any,
) -> None:
    # Given a pending transfer and its image, both changed just now
    t = janitor_env
    tx_id = abandon(young_tm, t.data, "pending", ("a", "b"))
    put_image(ddb, t, tx_id, "r1")
    before = data_state(ddb, t.data)

    # When the sweeper runs
    report = sweeper().handler(scheduled_event(), LambdaContext())

    # Then nothing of it is touched
    assert report["rolled_back"] == report["orphan_images_deleted"] == report["stuck"] == 0
    assert data_state(ddb, t.data) == before
    assert headers(ddb, t)[tx_id][s.TX_STATE]["S"] == s.STATE_PENDING
    assert len(scan(ddb, t.images)) == 1


def test_given_locks_whose_record_is_gone_or_completed_when_swept_then_items_are_restored(
    sweeper: Callable[[], Any],
    young_tm: TransactionManager,
    janitor_env: JanitorTables,
    accounts: dict[str, int],
    ddb: Any,
) -> None:
    # Given a transfer whose TX record vanished while it held both locks (a fresh
    # one, so only the data-table scan can find it), and a stray lock of a completed one
    t = janitor_env
    gone = abandon(young_tm, t.data, "pending", ("a", "b"))
    drop_record(ddb, t, gone)
    stray = abandon(young_tm, t.data, "pending", ("c", "d"))
    record = young_tm.protocol.run(young_tm.protocol.records.read_header(stray))
    assert record is not None
    p = young_tm.protocol
    p.run(p.records.mark_completed(p.run(p.records.decide(stray, s.STATE_ROLLED_BACK)) or record))

    # When the sweeper runs
    report = sweeper().handler(scheduled_event(), LambdaContext())

    # Then all four locks are undone and every balance is back
    assert report["locks_released"] == 4 and report["errors"] == 0
    assert balances(ddb, t.data) == SEEDED
    assert_clean(ddb, t)


def test_given_an_orphan_image_a_lock_still_needs_when_swept_then_the_item_is_restored_first(
    sweeper: Callable[[], Any], young_tm: TransactionManager, janitor_env: JanitorTables, ddb: Any
) -> None:
    # Given a large item (its image goes to the images table) updated by a transaction
    # whose TX record then vanished
    t = janitor_env
    original = {"pk": {"S": "big"}, "blob": {"S": "x" * 70_000}, "balance": {"N": "1"}}
    ddb.put_item(TableName=t.data, Item=original)
    tx = young_tm.begin()
    tx.update_item(
        TableName=t.data,
        Key={"pk": {"S": "big"}},
        UpdateExpression="SET balance = :n",
        ExpressionAttributeValues={":n": {"N": "2"}},
    )
    drop_record(ddb, t, tx.id)
    assert len(scan(ddb, t.images)) == 1

    # When the sweeper runs
    report = sweeper().handler(scheduled_event(), LambdaContext())

    # Then the item is restored from the image before the image is deleted
    assert report["orphan_images_deleted"] == 1 and report["locks_released"] == 1
    assert data_state(ddb, t.data) == {"big": original}
    assert_clean(ddb, t)


def test_given_expired_lock_rows_when_swept_then_only_expired_counterless_rows_go(
    sweeper: Callable[[], Any], janitor_env: JanitorTables, ddb: Any
) -> None:
    # Given a mutex that expired in 2001, a live mutex, and an old row carrying a fencing counter
    t = janitor_env
    assert Mutex(ddb, t.locks, owner="dead", expire_after=60, wall_clock=lambda: LONG_AGO).acquire(
        "old-job"
    )
    assert Mutex(ddb, t.locks, owner="alive").acquire("live-job")
    fenced = {
        s.LOCK_PK: {"S": "fenced"},
        s.LOCK_SK: {"S": "mutex"},
        "rvn": {"S": "x"},
        "fence": {"N": "7"},
        s.LOCK_TTL: {"N": str(int(LONG_AGO))},
    }
    ddb.put_item(TableName=t.locks, Item=fenced)

    # When the sweeper runs
    report = sweeper().handler(scheduled_event(), LambdaContext())

    # Then only the expired mutex is freed (its row stays: it carries its fencing counter)
    assert report["lock_rows_deleted"] == 1
    assert sorted(r[s.LOCK_PK]["S"] for r in scan(ddb, t.locks)) == [
        "fenced",
        "live-job",
        "old-job",
    ]
    held = {r.resource: r.state for r in list_locks(ddb, t.locks)}
    assert held == {"fenced": "free", "live-job": "held", "old-job": "free"}


def record_scans(module: Any, table: str) -> list[dict[str, Any] | None]:
    """The ExclusiveStartKey of every scan the handler's client sends to ``table``."""
    starts: list[dict[str, Any] | None] = []

    def hook(params: dict[str, Any], **_: Any) -> None:
        if params.get("TableName") == table:
            starts.append(params.get("ExclusiveStartKey"))

    module.SWEEPER.client.meta.events.register("provide-client-params.dynamodb.Scan", hook)
    return starts


def test_given_a_page_budget_when_swept_repeatedly_then_each_run_continues_where_the_last_stopped(
    sweeper: Callable[[], Any],
    young_tm: TransactionManager,
    janitor_env: JanitorTables,
    seed: Callable[..., None],
    ddb: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given five items locked by a transaction whose record is gone, and a budget
    # of one two-row page per run
    t = janitor_env
    seed(**{f"k{i}": 1 for i in range(5)})
    orphan_locks(young_tm, ddb, t, 5)
    monkeypatch.setenv("SWEEP_PAGE_BUDGET", "1")
    monkeypatch.setenv("SWEEP_PAGE_SIZE", "2")
    module = sweeper()
    starts = record_scans(module, t.data)

    # When the sweeper runs until a run completes
    reports = sweep_until_complete(module)

    # Then runs stop on the budget, each data page starts at the key the previous
    # page ended with, and every lock is released exactly once
    assert [r["stopped_by"] for r in reports[:-1]] == ["page_budget"] * (len(reports) - 1)
    assert [r["pages"] for r in reports] == [1] * len(reports)
    assert starts[0] is None and all(start is not None for start in starts[1:])
    assert len(starts) == 3
    assert sum(r["locks_released"] for r in reports) == 5
    assert balances(ddb, t.data) == {f"k{i}": 1 for i in range(5)}
    assert_clean(ddb, t)
    assert reports[-1]["cursor"]["task"] is None


def test_given_the_deadline_near_when_swept_then_it_stops_reports_and_the_next_run_resumes(
    sweeper: Callable[[], Any],
    old_tm: TransactionManager,
    janitor_env: JanitorTables,
    seed: Callable[..., None],
    ddb: Any,
) -> None:
    # Given six stale pending transfers
    t = janitor_env
    seed(**{f"k{i}": 1 for i in range(12)})
    stale = {abandon(old_tm, t.data, "pending", (f"k{i}", f"k{i + 1}")) for i in range(0, 12, 2)}
    module = sweeper()

    # When each run has time for only a few steps before the safety margin
    reports = sweep_until_complete(module, checks_left=12)

    # Then the early runs stop on the deadline with a cursor inside the index pass,
    # and together the runs roll back each stale transfer once
    assert len(reports) > 1
    assert all(r["stopped_by"] == "deadline" for r in reports[:-1])
    assert reports[0]["cursor"]["index"] is not None
    assert sum(r["rolled_back"] for r in reports) == len(stale)
    assert sorted(i for r in reports for i in r["stuck_ids"]) == sorted(stale)
    assert_clean(ddb, t)


def test_given_the_deadline_inside_a_scan_page_when_swept_again_then_the_scan_resumes_there(
    sweeper: Callable[[], Any],
    young_tm: TransactionManager,
    janitor_env: JanitorTables,
    seed: Callable[..., None],
    ddb: Any,
) -> None:
    # Given six items locked by a transaction whose record is gone (one scan page)
    t = janitor_env
    seed(**{f"k{i}": 1 for i in range(6)})
    orphan_locks(young_tm, ddb, t, 6)
    module = sweeper()
    starts = record_scans(module, t.data)

    # When each run has time for the index pass and only a few items of the page
    reports = sweep_until_complete(module, checks_left=37)

    # Then a run stopped inside the data table, the next scan started from the key it
    # reported, and every lock was released once
    inside = [r for r in reports if r["cursor"]["task"] == f"data:{t.data}"]
    assert inside and inside[0]["cursor"]["scan_key"] is not None
    # (the data table has the lock index, so the key is the index's: table key + lock)
    assert key_from_json(inside[0]["cursor"]["scan_key"]) in starts
    assert sum(r["locks_released"] for r in reports) == 6
    assert_clean(ddb, t)


def test_given_concurrent_and_duplicate_invocations_then_the_work_is_done_once_and_safely(
    sweeper: Callable[[], Any],
    old_tm: TransactionManager,
    janitor_env: JanitorTables,
    seed: Callable[..., None],
    ddb: Any,
) -> None:
    # Given four stale transfers of various stages
    t = janitor_env
    seed(**{f"k{i}": 50 for i in range(8)})
    stages = ["pending", "committed", "rolled_back", "pending"]
    for i, stage in enumerate(stages):
        abandon(old_tm, t.data, stage, (f"k{2 * i}", f"k{2 * i + 1}"))
    total = 50 * 8

    # When two cold-started sweepers receive the same tick at once
    event = scheduled_event()
    handlers = [sweeper(), sweeper()]
    reports: list[dict[str, Any]] = []
    barrier = threading.Barrier(2)

    def invoke(module: Any) -> None:
        barrier.wait()
        reports.append(module.handler(event, LambdaContext()))

    threads = [threading.Thread(target=invoke, args=(m,)) for m in handlers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # ... and the tick is delivered once more afterwards
    again = handlers[0].handler(event, LambdaContext())

    # Then nothing failed, the books balance, nothing is locked, and the repeat finds no work
    assert [r["errors"] for r in reports] == [0, 0]
    assert all(r["exhausted"] for r in reports)
    assert sum(balances(ddb, t.data).values()) == total
    assert_clean(ddb, t)
    assert again["rolled_back"] == again["rolled_forward"] == again["completed"] == 0
    assert again["locks_released"] == again["orphan_images_deleted"] == 0
    # ... and the cursor row kept a consistent generation
    cursor_rows = [r for r in scan(ddb, t.tx) if r[s.TX_PK]["S"] == CURSOR_ID]
    assert len(cursor_rows) == 1 and int(cursor_rows[0]["gen"]["N"]) >= 2


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("TRANSACTIONS_TABLE", "", "TRANSACTIONS_TABLE is required"),
        ("IMAGES_TABLE", " ", "IMAGES_TABLE is required"),
        ("ROLLBACK_AFTER_SECONDS", "soon", "ROLLBACK_AFTER_SECONDS must be a whole number"),
        ("DELETE_AFTER_SECONDS", "-5", "DELETE_AFTER_SECONDS must be >= 0"),
        ("SWEEP_PAGE_BUDGET", "0", "SWEEP_PAGE_BUDGET must be >= 1"),
    ],
)
def test_given_a_bad_environment_when_the_sweeper_cold_starts_then_it_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
    ddbtx_logger: logging.Logger,
    variable: str,
    value: str,
    message: str,
) -> None:
    # Given a complete configuration with one variable broken
    for name, good in {
        "TRANSACTIONS_TABLE": "Tx",
        "IMAGES_TABLE": "Img",
        "ROLLBACK_AFTER_SECONDS": "60",
        "DELETE_AFTER_SECONDS": "3600",
        "SWEEP_PAGE_BUDGET": "5",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, good)
    monkeypatch.setenv(variable, value)

    # When the handler module is imported (a cold start), Then it fails naming the variable
    with pytest.raises(ConfigError, match=message):
        load_handler("sweeper")


@pytest.mark.parametrize("function", ["sweeper", "recovery"])
def test_given_no_powertools_variables_when_a_handler_runs_outside_lambda_then_it_works(
    janitor_env: JanitorTables,
    monkeypatch: pytest.MonkeyPatch,
    ddbtx_logger: logging.Logger,
    capsys: pytest.CaptureFixture[str],
    function: str,
) -> None:
    # Given the janitor's own settings but none of Powertools' (as on a laptop)
    for variable in ("POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_SERVICE_NAME"):
        monkeypatch.delenv(variable, raising=False)
    # When the handler cold-starts and answers an event
    module = load_handler(function)
    module.metrics.clear_metrics()
    event = scheduled_event() if function == "sweeper" else {"action": "sweep"}
    answer = module.handler(event, LambdaContext(function_name=f"ddbtx-{function}"))
    assert answer["errors"] == 0 if function == "sweeper" else answer["ok"] is True
    if function == "recovery":  # it publishes on a broken lock only: publish one as it does
        module.metrics.add_metric(name="LocksBroken", unit="Count", value=1)
        module.metrics.flush_metrics()
    # Then it ran (no "Must contain a metric namespace"), publishing in the ddbtx namespace
    # under its own service name (emf_metrics asserts both of each metric)
    assert emf_metrics(capsys.readouterr().out)
    assert f"ddbtx-{function}" == module.SERVICE
