"""Pytest plugin for the fault tests: the harness :class:`Env` on the suite's backend and tables.

Loaded with ``pytest_plugins = ("faults.fixtures",)``; not a conftest, which
would displace ``tests/conftest.py`` (see the note in tests/infra).
"""

from __future__ import annotations

import pytest

from ddbtx.local import LocalDynamo
from helpers import Tables

from .env import Env
from .report import Report


@pytest.fixture
def env(backend: LocalDynamo, tables: Tables) -> Env:
    """The suite's backend and fresh tables, with a skew-capable clock."""
    return Env(backend, tables.tx, tables.images, tables.data)


@pytest.fixture
def report(backend: LocalDynamo, request: pytest.FixtureRequest) -> Report:
    """A report named after the test; its anomalies carry a replay command line."""
    return Report(request.node.originalname.removeprefix("test_"), backend.kind, seed=1)
