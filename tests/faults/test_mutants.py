"""Workload 5: each broken protocol variant is caught by at least one checker.

The real protocol passes the same probes in test_single_faults.py and
test_concurrent_workloads.py; here each mutant must make its probe fail.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from .env import Env
from .listappend import run_list_append
from .mutants import MUTANTS, Mutant, by_name, caught
from .report import Report

pytest_plugins = ("faults.fixtures",)


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_given_a_broken_protocol_variant_then_a_checker_catches_it(
    env: Env, mutant: Mutant
) -> None:
    # Given the protocol with one step broken, for this run only
    # When the mutant's probe workload runs
    found = caught(env, mutant, seed=1)
    # Then at least one anomaly is reported, with the line that replays it
    assert found.anomalies, f"mutant {mutant.name} escaped every checker"
    assert "--mutant " + mutant.name in found.anomalies[0]


def test_given_commits_that_restore_images_then_the_history_checker_reports_lost_appends(
    env: Env, make_report: Callable[[str], Report]
) -> None:
    # Given completion that puts every committed item's image back (the mutant), and one
    # process with no faults and no skew, so that some appends surely commit: under faults
    # and competition every append of a short history can be rolled back, and then there
    # is nothing for the mutant to lose (1 run in 7 on moto, before)
    report = make_report("listappend")
    # When a list-append history runs under it
    with by_name("restore-after-commit").patch():
        run_list_append(
            env,
            report,
            histories=1,
            txns=6,
            processes=1,
            crash_rate=0.0,
            pause_rate=0.0,
            skew=False,
        )
    # Then the history checker itself sees the damage, not only the single-fault checker
    assert report.anomalies
    assert "lost-append" in report.anomalies[0] or "G1" in report.anomalies[0]
