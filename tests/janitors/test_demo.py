"""``ddbtx demo``: an embedded emulator, crashing coordinators, and the sweeper handler."""

from __future__ import annotations

import logging

import pytest

from ddbtx.cli import main

pytest_plugins = ("janitors.fixtures",)


def test_given_a_fresh_machine_when_the_demo_runs_then_it_shows_damage_sweeps_and_ends_clean(
    capsys: pytest.CaptureFixture[str], ddbtx_logger: logging.Logger
) -> None:
    # Given nothing but this package (the demo starts its own DynamoDB)
    # When the demo runs a small bank with killed coordinators
    status = main(["demo", "--workers", "3", "--transfers", "4", "--seed", "3"])

    # Then it reports the damage, the sweeper handler's work, and a clean end
    out = capsys.readouterr().out
    assert "after crashes" in out and "sweeper handler report" in out
    assert "ROLLBACK_AFTER_SECONDS=0" in out
    assert "CLEAN: balances add up to 800" in out and "NOT CLEAN" not in out
    assert status == 0
