"""``ddbtx demo``: an embedded emulator, killed coordinators, and the sweep the handler makes.

The demo starts its own emulator, so it runs on each of the two here by name.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from ddbtx.cli import main
from ddbtx.demo import DemoResult, make_plan, run_demo
from ddbtx.local import KINDS, Kind

SMALL = {"workers": 3, "transfers": 4, "seed": 3}


def quiet_demo(emulator: Kind, **options: int) -> tuple[DemoResult, str]:
    out = io.StringIO()
    result = run_demo(emulator=emulator, console=Console(file=out, width=200), **options)
    return result, out.getvalue()


@pytest.mark.parametrize("emulator", KINDS)
def test_given_one_seed_when_the_demo_runs_twice_then_every_seed_decided_figure_repeats(
    emulator: Kind,
) -> None:
    # Given a seed
    # When the demo runs twice with it
    first, shown = quiet_demo(emulator, **SMALL)
    second, _ = quiet_demo(emulator, **SMALL)

    # Then both runs end clean, with every live transfer committed and every planned kill done
    plan = first.plan
    assert first.clean and second.clean
    assert first.outcome.committed == sum(map(len, plan.live)) and first.outcome.gave_up == 0
    assert first.outcome.killed == len(plan.killed) == 3
    # And every figure the seed decides is the same (only retries and what they leave vary)
    assert first.reproducible() == second.reproducible()
    # And the damage was real: the sweep had work, and says how it unlocked every item
    assert first.before.locked_items + first.before.lock_rows > 0
    assert first.report.lock_rows_deleted == 1
    unlocked = first.before.locked_items - first.after.locked_items
    assert f"the sweep unlocked {unlocked} item(s)" in shown
    assert "vary from run to run" in shown


def test_given_two_seeds_when_planned_then_the_plans_differ_and_no_account_can_run_short() -> None:
    # Given the default sizes
    # When two seeds plan their transfers
    one, other = (make_plan(seed=seed, workers=4, transfers=8, accounts=8) for seed in (1, 2))

    # Then the plans differ
    assert one != other
    for plan in (one, other):
        # And each account pays out at most its opening balance, in any order
        transfers = [t for mine in plan.live for t in mine] + list(plan.killed)
        for account in plan.accounts:
            assert sum(t.amount for t in transfers if t.source == account) <= plan.opening
        # And no two killed coordinators share an account (each dies at its planned call)
        touched = [a for t in plan.killed for a in (t.source, t.target)]
        assert len(touched) == len(set(touched))


def test_given_the_cli_when_the_demo_runs_then_it_ends_clean_with_no_log_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given nothing but this package
    # When `ddbtx demo` runs a small bank
    status = main(["demo", "--workers", "2", "--transfers", "3", "--seed", "4"])

    # Then it reports the damage, the sweep and a clean end, and nothing else on stderr
    captured = capsys.readouterr()
    assert "after crashes" in captured.out and "sweep report" in captured.out
    assert "ROLLBACK_AFTER_SECONDS=0" in captured.out
    assert "CLEAN: balances add up to 800" in captured.out and "NOT CLEAN" not in captured.out
    assert captured.err == ""
    assert status == 0


def test_given_an_unknown_emulator_when_the_demo_starts_then_one_line_names_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # When the demo is asked for an emulator that does not exist
    status = main(["demo", "--emulator", "dynamodb-local"])

    # Then one line says which ones exist
    assert capsys.readouterr().err == (
        "ddbtx: error: --emulator must be one of moto, dynalite, not 'dynamodb-local'\n"
    )
    assert status == 2
