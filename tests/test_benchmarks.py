"""The benchmark scripts run on tiny sizes, print their tables, and their counted
figures meet issue 7's targets (request counts are exact, never timed)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # benchmarks/ is a top-level package, not installed

from benchmarks import (  # noqa: E402
    coldstart,
    contention,
    latency,
    locks,
    requests,
    sweep,
    transfers,
)
from benchmarks.requests import BackendResult, TxCount, target_total  # noqa: E402

from ddbtx.instrumentation import count_requests  # noqa: E402
from ddbtx.local import LocalDynamo  # noqa: E402
from ddbtx.locks import create_lock_table  # noqa: E402
from ddbtx.tables import create_data_table  # noqa: E402

SIZES = (1, 3)
#: Request kinds the issue names as cheaper than an update.
CHEAPER = ("insert", "delete", "read")


@pytest.fixture(scope="module")
def counted_once() -> dict[str, BackendResult]:
    """Counts per backend, shared by this module's tests (they only read them)."""
    return {}


@pytest.fixture
def counted(
    ddb: Any,
    backend: LocalDynamo,
    table_name: Callable[[str], str],
    counted_once: dict[str, BackendResult],
) -> BackendResult:
    """Every kind, size and path counted once per backend (tables cleaned up)."""
    if backend.kind not in counted_once:
        counted_once[backend.kind] = requests.run_backend(ddb, SIZES, backend.kind, table_name)
    return counted_once[backend.kind]


def by_kind(result: BackendResult, path: str) -> dict[tuple[str, int], TxCount]:
    return {(c.kind, c.n): c for c in result.counts if c.path == path}


ROUTES = (*requests.PATHS, requests.BATCH)


@pytest.mark.parametrize("path", ROUTES)
def test_given_transactions_of_n_requests_then_each_kind_stays_within_4n_plus_4(
    counted: BackendResult, path: str
) -> None:
    # Given begin + N requests + commit/rollback + delete, counted on both emulators
    counts = by_kind(counted, path)
    # Then every kind stays within the target, reads included
    over = {
        f"{kind} N={n}: {c.total}": target_total(n)
        for (kind, n), c in counts.items()
        if c.total > target_total(n)
    }
    assert over == {}
    kinds = requests.BATCH_KINDS if path == requests.BATCH else requests.KINDS
    assert set(counts) == {(k, n) for k in kinds for n in SIZES}


def test_given_uncontended_updates_when_written_with_transact_write_then_one_call_where_native(
    counted: BackendResult, backend: LocalDynamo
) -> None:
    for c in counted.native:
        # Then one TransactWriteItems call, or (where the API is missing) that refused
        # call plus the general protocol within its target
        assert c.by_operation["TransactWriteItems"] == 1
        assert c.total == 1 if c.route == "native" else c.total <= target_total(c.n) + 1
    if backend.kind == "moto":  # dynalite has no TransactWriteItems
        assert {c.route for c in counted.native} == {"native"}


@pytest.mark.parametrize("path", ROUTES)
def test_given_inserts_deletes_and_read_locks_then_each_is_cheaper_than_an_update(
    counted: BackendResult, path: str
) -> None:
    counts = by_kind(counted, path)
    cheaper = [k for k in CHEAPER if (k, SIZES[0]) in counts]
    for n in SIZES:
        update = counts["update", n].total
        # Then the cheaper kinds cost fewer requests than N updates, for every N
        assert {k: counts[k, n].total < update for k in cheaper} == dict.fromkeys(cheaper, True)


def test_given_a_fresh_manager_then_describe_table_is_once_per_data_table(
    counted: BackendResult,
) -> None:
    # Given two transactions on the same table from one new manager
    # Then the key schema is read once and cached
    assert counted.describe == 1


def test_given_items_in_every_lock_state_then_a_committed_read_is_one_request(
    counted: BackendResult,
) -> None:
    reads = {r.case: (r.reads, r.writes) for r in counted.reads}
    in_item = {case: n for case, n in reads.items() if "images table" not in case}
    # Then every state whose image rides in the item is one read, never a write
    assert set(in_item.values()) == {(1, 0)}
    assert len(in_item) == 5
    # And an image kept in the images table costs exactly one more read
    assert reads["locked, update applied (image in images table)"] == (2, 0)


def test_given_counted_results_when_reported_then_tables_and_chart_are_written(
    counted: BackendResult, tmp_path: Path
) -> None:
    chart = tmp_path / "requests.png"
    text = requests.report([counted], chart)
    assert "Requests per transaction, commit path" in text
    assert "Requests per transaction, rollback path" in text
    assert "Requests as a function of N, by operation" in text
    assert "Requests per tm.get_item(isolation=COMMITTED)" in text
    assert "Requests per tm.transact_write" in text
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_given_the_requests_script_when_run_on_a_tiny_size_then_it_prints_its_tables() -> None:
    lines: list[str] = []
    results = requests.main(["--sizes", "1", "--backend", "moto", "--chart", "none"], lines.append)
    assert [r.kind for r in results] == ["moto"]
    assert "Requests per transaction, commit path" in "\n".join(lines)


def test_given_serial_and_pooled_completion_then_requests_match_and_the_pool_never_lengthens_it(
    ddb: Any, table_name: Callable[[str], str]
) -> None:
    # Given a 3-update transaction with every call delayed a little: serial, pooled, batched
    serial, pooled, batch = latency.measure(ddb, 3, 0.002, (1, 4), table_name)
    # Then both make the same requests, and serial completion is one call after another
    assert serial.commit_requests == pooled.commit_requests == 3 + 2
    assert serial.total_requests == pooled.total_requests
    assert serial.commit_chain == serial.commit_requests
    assert serial.total_chain == serial.total_requests
    assert pooled.commit_chain <= serial.commit_chain
    # And write_all sends no more requests, on a critical path no longer
    assert (batch.batch, batch.workers) == (True, 4)
    assert batch.total_requests <= serial.total_requests
    assert batch.total_chain <= serial.total_chain
    text = latency.table("moto", 3, 0.002, [serial, pooled, batch])
    assert "max_workers" in text and "commit wall-time speed-up" in text


def test_given_uncontended_locks_then_each_operation_is_one_request(
    ddb: Any, table_name: Callable[[str], str]
) -> None:
    table = table_name("locks")
    create_lock_table(ddb, table)
    ops = locks.measure_uncontended(ddb, table)
    assert {(o.lock, o.operation): o.requests for o in ops} == {
        ("Mutex", "acquire"): 1,
        ("Mutex", "release"): 1,
        ("LeaseLockClient", "acquire"): 1,
        ("LeaseLockClient", "heartbeat"): 1,
        ("LeaseLockClient", "release"): 1,
        ("FifoLock", "acquire"): 1,
        ("FifoLock", "heartbeat"): 1,
        ("FifoLock", "release"): 1,
    }


def test_given_a_fifo_waiter_when_the_holder_releases_then_one_poll_hands_the_lock_over(
    ddb: Any, backend: LocalDynamo, table_name: Callable[[str], str]
) -> None:
    table = table_name("locks")
    create_lock_table(ddb, table)
    handoff = locks.measure_fifo_handoff(backend, table)
    # Then one read of the head: the release itself made the waiter the holder
    assert (handoff.polls_after, handoff.after_total) == (1, 1)
    text = locks.report(backend.kind, locks.measure_uncontended(ddb, table), handoff, None)
    assert "FIFO handoff, counted" in text


@pytest.mark.parametrize("lock", locks.LOCKS)
def test_given_a_small_contention_run_then_every_request_is_labelled_and_counted(
    ddb: Any, backend: LocalDynamo, table_name: Callable[[str], str], lock: str
) -> None:
    table = table_name("locks")
    create_lock_table(ddb, table)
    run = locks.measure_contention(backend, table, lock, threads=2, acquires=3)
    # Then every acquisition took at least its grant and its release, all labelled
    assert run.acquisitions == 6
    assert run.requests >= 2
    assert not any(
        kind.startswith(("UpdateItem (", "PutItem", "DeleteItem")) for kind in run.by_kind
    )
    assert 0 <= run.fairness <= 1


def test_given_a_bank_workload_on_both_policies_then_money_is_conserved_and_every_try_counted(
    backend: LocalDynamo, table_name: Callable[[str], str]
) -> None:
    # Given 3 workers each trying 3 transfers among 3 accounts, per policy
    work = contention.Workload(workers=3, accounts=3, seconds=None, attempts=3)
    outcomes, invariants = contention.measure(backend, work, 1, table_name)
    # Then every attempt ended as a commit or a counted abort
    assert [o.committed + sum(o.aborts.values()) for o in outcomes] == [9, 9]
    # And every request was counted: at least a whole transfer's per commit
    assert all(o.requests >= 11 * o.committed for o in outcomes)
    # And the committed balances still add up
    assert invariants.total == invariants.expected
    text = contention.report(backend.kind, work, outcomes, invariants)
    assert "wound-wait / rollback-holder throughput" in text
    assert "requests per commit" in text


def test_given_the_whole_lambda_layer_when_imported_then_nothing_beyond_boto3_is_loaded() -> None:
    assert coldstart.layer_beyond_boto3() == set()
    assert "ddbtx.transaction" in coldstart.layer_modules()
    assert "ddbtx.local" not in coldstart.layer_modules()


def test_given_reads_of_every_kind_when_counted_then_items_read_follow_what_each_call_examined(
    ddb: Any, table_name: Callable[[str], str]
) -> None:
    # Given a table of three items
    table = table_name("items")
    create_data_table(ddb, table)
    for pk in ("a", "b", "c"):
        ddb.put_item(TableName=table, Item={"pk": {"S": pk}, "n": {"N": "1"}})
    absent = {"pk": {"S": "absent"}}
    none = {":none": {"N": "0"}}

    # When every kind of read runs, plus a write whose condition fails
    with count_requests(ddb) as counts:
        ddb.get_item(TableName=table, Key={"pk": {"S": "a"}})
        ddb.get_item(TableName=table, Key=absent)
        ddb.query(
            TableName=table,
            KeyConditionExpression="pk = :a",
            FilterExpression="n = :none",
            ExpressionAttributeValues={":a": {"S": "a"}, **none},
        )
        ddb.scan(TableName=table, FilterExpression="n = :none", ExpressionAttributeValues=none)
        ddb.batch_get_item(
            RequestItems={table: {"Keys": [{"pk": {"S": "b"}}, {"pk": {"S": "c"}}, absent]}}
        )
        with pytest.raises(ddb.exceptions.ConditionalCheckFailedException):
            ddb.put_item(
                TableName=table,
                Item={"pk": {"S": "a"}},
                ConditionExpression="attribute_not_exists(pk)",
            )

    # Then a found item counts one, a missing one none, a query or scan every item
    # it examined (filtered out or not), a batch every item it returned
    assert dict(counts.items_read_by_operation) == {
        "GetItem": 1,
        "Query": 1,
        "Scan": 3,
        "BatchGetItem": 2,
    }
    assert counts.items_read == 7
    # And the request counts are as before
    assert (counts.reads, counts.writes, counts.total) == (5, 1, 6)

    # When the counts are reset
    counts.reset()
    # Then the items read start again from zero
    assert (counts.items_read, counts.total) == (0, 0)


def test_given_stale_records_among_many_that_need_no_work_when_swept_then_reads_follow_the_stale(
    ddb: Any, backend: LocalDynamo, table_name: Callable[[str], str]
) -> None:
    # Given 200 records that need no work, then 5 transfers abandoned an hour before the sweep
    result = sweep.measure(ddb, backend.kind, 200, 5, 0.002, table_name)

    # Then the sweep rolled every stale one back and left no lock on their accounts
    assert (result.rolled_back, result.stuck, result.locks_left) == (5, 5, 0)
    # And it read at most 3 items per stale record on top of the idle sweep's
    assert result.swept.items_read <= 3 * 5 + result.idle.items_read
    assert result.meets_target
    # And the idle sweep's index pass read none of the 200 records
    assert result.idle.items.get("Query", 0) == 0
    # And a plain scan, the baseline, reads every row: the records, the stale ones, the cursor
    assert result.baseline.items_read == result.table_rows == 200 + 5 + 1

    # When the full sweep runs in one segment, then in four
    one, four = result.full
    # Then the four scan segments of the table were sent, reading what one segment reads
    assert one.scan_segments == {(0, 1)}
    assert four.scan_segments == {(i, 4) for i in range(4)}
    assert four.counted.items_read == one.counted.items_read
    # And they overlap: the critical path is never longer than the single segment's
    assert four.chain <= one.chain
    text = sweep.report(result)
    assert "items read per stale record" in text and "run_full(segments=k)" in text


def test_given_the_sweep_script_when_run_on_a_tiny_size_then_it_prints_its_tables() -> None:
    lines: list[str] = []
    args = ["--records", "6", "--stale", "1", "--delay", "0.001", "--backend", "moto"]
    results = sweep.main(args, lines.append)
    assert [(r.kind, r.rolled_back, r.meets_target) for r in results] == [("moto", 1, True)]
    assert "One Sweeper.run() on 6 records" in "\n".join(lines)


def test_given_concurrent_transfers_when_run_as_tasks_and_as_threads_then_each_applies_once(
    backend: LocalDynamo,
) -> None:
    # Given six transfers, each between its own two accounts
    # When they run as asyncio tasks, then as threads (measure checks every balance)
    tasks, threads = transfers.measure(backend, 6)

    # Then both drivers sent the same requests for the same work, and the report shows both
    assert tasks.transfers == threads.transfers == 6
    assert tasks.requests == threads.requests > 0
    assert tasks.peak_bytes > 0 and threads.peak_bytes > 0
    printed = transfers.report(backend.kind, [tasks, threads])
    assert "asyncio tasks" in printed and "threads (sync)" in printed
