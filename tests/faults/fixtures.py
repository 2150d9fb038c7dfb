"""Pytest plugin for the fault tests: the harness :class:`Env` on the suite's backend and tables.

Loaded with ``pytest_plugins = ("faults.fixtures",)``; not a conftest, which
would displace ``tests/conftest.py`` (see the note in tests/infra).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ddbtx.local import LocalDynamo
from helpers import Tables

from .env import Env
from .report import Report


@pytest.fixture
def env(backend: LocalDynamo, tables: Tables, table_name: Callable[[str], str]) -> Env:
    """The suite's backend and fresh tables (a locks table on demand), with skewed clocks."""
    return Env(backend, tables.tx, tables.images, tables.data, table_name("locks"))


@pytest.fixture
def make_report(backend: LocalDynamo, request: pytest.FixtureRequest) -> Callable[[str], Report]:
    """A report named for its runner workload (``--only``), so replay lines work as printed."""

    def make(workload: str) -> Report:
        return Report(workload, backend.kind, seed=1, pytest_node=request.node.nodeid)

    return make
