"""The operator CLI on both emulators: inspect, locks, recover and sweep as on-call use them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from ddbtx import TransactionManager
from ddbtx.cli import main
from ddbtx.local import LocalDynamo
from ddbtx.locks import Mutex
from helpers import assert_clean

from .support import JanitorTables, abandon

pytest_plugins = ("janitors.fixtures",)


@pytest.fixture
def ddbtx(
    backend: LocalDynamo, janitor_tables: JanitorTables, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str]]:
    """Run ``ddbtx --endpoint-url ... <args>``; return its status and output."""
    t = janitor_tables
    common = [
        "--endpoint-url", backend.endpoint_url, "--region", "us-east-1",
        "--transactions-table", t.tx, "--images-table", t.images,
        "--locks-table", t.locks, "--data-tables", t.data,
    ]  # fmt: skip

    def run(*args: str) -> tuple[int, str]:
        capsys.readouterr()
        status = main([*common, *args])
        return status, capsys.readouterr().out

    return run


def test_given_a_stuck_transfer_when_on_call_inspects_lists_and_recovers_then_it_is_settled(
    ddbtx: Callable[..., tuple[int, str]],
    endpoint_env: Any,
    young_tm: TransactionManager,
    janitor_tables: JanitorTables,
    seed: Callable[..., None],
    ddb: Any,
) -> None:
    # Given a pending transfer whose coordinator died, and a held mutex
    t = janitor_tables
    seed(a=100, b=100)
    tx_id = abandon(young_tm, t.data, "pending", ("a", "b"))
    assert Mutex(ddb, t.locks, owner="worker-7").acquire("report")

    # When on-call inspects it
    status, out = ddbtx("--json", "inspect", tx_id)
    # Then its state and both held locks are shown
    shown = json.loads(out)
    assert status == 0 and shown["state"] == "pending" and shown["locks_held"] == 2

    # When on-call lists the locks
    status, out = ddbtx("--json", "locks")
    # Then the mutex holder and the transaction's item locks are listed
    listed = json.loads(out)
    assert [(r["resource"], r["owner"]) for r in listed["locks"]] == [("report", "worker-7")]
    assert sorted(i["key"]["pk"]["S"] for i in listed["item_locks"]) == ["a", "b"]
    assert {i["transaction_id"] for i in listed["item_locks"]} == {tx_id}

    # When on-call recovers it (as a table), and inspects an unknown id
    status, out = ddbtx("recover", tx_id)
    missing_status, _ = ddbtx("inspect", "no-such-tx")
    # Then it is rolled back and nothing is locked; the unknown id fails
    assert status == 0 and "rolled_back" in out
    assert missing_status == 1
    assert_clean(ddb, t)


def test_given_stale_records_when_on_call_sweeps_then_the_report_is_printed(
    ddbtx: Callable[..., tuple[int, str]],
    endpoint_env: Any,
    old_tm: TransactionManager,
    janitor_tables: JanitorTables,
    seed: Callable[..., None],
    ddb: Any,
) -> None:
    # Given a committed transfer whose coordinator died before completing it
    seed(a=100, b=100)
    abandon(old_tm, janitor_tables.data, "committed", ("a", "b"))

    # When on-call sweeps now, as a full scan
    status, out = ddbtx("sweep", "--full")

    # Then the report shows the roll-forward and the books are settled
    assert status == 0
    row = next(line for line in out.splitlines() if "rolled forward" in line)
    assert row.split()[-2] == "1"
    assert_clean(ddb, janitor_tables)
