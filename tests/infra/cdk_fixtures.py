"""Fixtures for the CDK tests, loaded by each test module through ``pytest_plugins``.

Synthesizing the app takes seconds, so each distinct context is synthesized once per
test session and shared by every test that asks for it. This is a plugin rather than
``tests/infra/conftest.py`` because a second top-level ``conftest`` module would replace
``tests/conftest.py`` in ``sys.modules``, and other suites import helpers from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cdk_support import Synth, SynthFactory, synthesize


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> SynthFactory:
    """``synth(**context)``: the app synthesized with those context values (cached)."""
    cache: dict[str, Synth] = {}

    def make(**context: Any) -> Synth:
        key = json.dumps(context, sort_keys=True)
        if key not in cache:
            outdir: Path = tmp_path_factory.mktemp("cdk-out")
            cache[key] = synthesize(context, outdir)
        return cache[key]

    return make


@pytest.fixture(scope="module")
def default(synth: SynthFactory) -> Synth:
    """The stack exactly as ``cdk deploy`` with no options builds it."""
    return synth()
