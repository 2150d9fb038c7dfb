"""Workload 5: each broken protocol variant is caught by at least one checker.

The real protocol passes the same probes in test_single_faults.py and
test_concurrent_workloads.py; here each mutant must make its probe fail.
"""

from __future__ import annotations

import pytest

from .env import Env
from .mutants import MUTANTS, Mutant, caught

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
