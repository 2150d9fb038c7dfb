"""Workload 1 under pytest: every fault kind at every call index of small transactions.

The command-line runner covers every shape (``python -m tests.faults.run --full``);
these keep a representative slice in the ordinary suite, on both backends.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from .env import Env
from .report import Report, assert_no_anomalies
from .single import Schedule, check_schedule, run_single

pytest_plugins = ("faults.fixtures",)


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_given_one_crash_at_any_call_when_the_sweeper_completes_then_all_or_nothing_and_clean(
    env: Env, make_report: Callable[[str], Report], ending: str
) -> None:
    # Given an insert, an update and a delete, and each crash kind at each call index
    report = make_report("single")
    # When the victim dies there and another coordinator or the sweeper takes over
    run_single(
        env,
        report,
        shape_filter=[("insert", "update", "delete")],
        endings=(ending,),
        kinds=("before", "after", "lost", "throttle"),
        sample=2,
    )
    # Then every schedule ended atomic, matching the decided state, with nothing left
    assert report.counts["schedules"] >= 10
    assert_no_anomalies(report)


def test_given_a_read_lock_and_an_update_when_the_coordinator_pauses_then_the_competitor_wins(
    env: Env, make_report: Callable[[str], Report]
) -> None:
    # Given a coordinator that pauses past the rollback age before each of its calls in turn,
    # while a sweeper rolls it back and a competitor overwrites its items
    report = make_report("single")
    run_single(
        env, report, shape_filter=[("read", "update")], endings=("commit",), kinds=("pause",)
    )
    # Then the competitor's writes stand and the paused coordinator's late calls change nothing
    assert report.counts["schedules"] >= 8
    assert_no_anomalies(report)


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_given_a_pause_before_the_lock_call_when_the_victim_ends_then_no_lock_is_left(
    env: Env, make_report: Callable[[str], Report], ending: str
) -> None:
    """Regression: these schedules found stray locks, fixed in a4f65fd and 021d5c7."""
    # Given a victim paused just before locking its item, rolled back and completed meanwhile
    report = make_report("single")
    # When it wakes up, locks the item, applies its write, then commits or rolls back
    assert check_schedule(env, Schedule(("update",), ending, "pause", 1, "sweeper"), report)
    # Then it undoes its late lock: the competitor's write stands and nothing is left
    assert_no_anomalies(report)


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_given_any_call_sent_again_late_when_a_competitor_overwrote_the_items_then_it_stands(
    env: Env, make_report: Callable[[str], Report], ending: str
) -> None:
    # Given an insert, an update and a delete (and a read lock with an update), and each of
    # the victim's calls in turn remembered as sent
    report = make_report("single")
    # When the victim finishes, a rescuer sweeps, a competitor overwrites every item, and the
    # remembered call arrives twice more, verbatim, before a sweep of the data table
    run_single(
        env,
        report,
        shape_filter=[("insert", "update", "delete"), ("read", "update")],
        endings=(ending,),
        kinds=("copy",),
    )
    # Then the competitor's writes stand, with nothing left: every copy met the fence
    assert report.counts["schedules"] >= 30
    assert_no_anomalies(report)
