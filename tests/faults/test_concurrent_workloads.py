"""Workloads 2 to 4 under pytest: bank, list-append histories and locks, with faults and sweepers.

Small sizes here; ``python -m tests.faults.run`` runs them larger and prints the figures.
"""

from __future__ import annotations

from collections.abc import Callable

from .bank import run_bank
from .env import Env
from .listappend import run_list_append
from .lockload import run_locks
from .report import Report, assert_no_anomalies

pytest_plugins = ("faults.fixtures",)


def test_given_transfers_crashes_and_pauses_when_swept_then_every_committed_audit_sees_the_total(
    env: Env, make_report: Callable[[str], Report]
) -> None:
    # Given three processes making conditional transfers and audits, crashing and pausing,
    # with two sweepers running between them
    report = make_report("bank")
    # When the run ends and the sweeper completes everything
    run_bank(env, report, rounds=12)
    # Then each committed audit summed to the total, the total holds and nothing is locked
    assert report.counts["transactions"] >= 12
    assert_no_anomalies(report)


def test_given_list_append_transactions_under_faults_then_the_history_has_no_anomaly(
    env: Env, make_report: Callable[[str], Report]
) -> None:
    # Given processes running 1-5 reads and appends per transaction, plus read-committed reads
    report = make_report("listappend")
    # When crashes, pauses, skewed clocks and concurrent sweepers hit them
    run_list_append(env, report, histories=1, txns=15)
    # Then no G0, G1a, G1b, G1c or G2-item, no lost or partial append, nothing left locked
    assert report.counts["histories"] == 1
    assert_no_anomalies(report)


def test_given_lock_holders_that_crash_and_pause_then_grants_and_fenced_writes_stay_ordered(
    env: Env, make_report: Callable[[str], Report]
) -> None:
    # Given FIFO and lease lock clients with skewed clocks, crashing and pausing past the lease
    report = make_report("locks")
    # When they take turns on one resource, writing under their fencing tokens
    run_locks(env, report, rounds=5)
    # Then tokens rise with every grant, holders overlap only after a pause, writes never interleave
    assert report.counts["lock_acquisitions"] >= 10
    assert_no_anomalies(report)
