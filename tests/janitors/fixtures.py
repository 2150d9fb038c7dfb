"""Fixtures of the janitor tests, loaded with ``pytest_plugins = ("janitors.fixtures",)``.

The handlers run as Lambda runs them: configured by environment variables at
import (cold start), reaching the emulator through ``AWS_ENDPOINT_URL_DYNAMODB``,
called with realistic events and a Lambda context double. Their clock is the
real one, so transactions are made "old" or "young" with coordinators whose
fake clocks stand decades before or after any plausible real time; nothing
depends on how long a test takes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

from ddbtx import TransactionManager
from ddbtx.locks import create_lock_table
from helpers import FakeClock, Tables

from .support import (
    DELETE_AFTER,
    FAR_FUTURE,
    LONG_AGO,
    ROLLBACK_AFTER,
    JanitorTables,
    load_handler,
)


@pytest.fixture
def janitor_tables(tables: Tables, ddb: Any, table_name: Callable[[str], str]) -> JanitorTables:
    """The protocol tables, one data table and a locks table."""
    locks = table_name("locks")
    create_lock_table(ddb, locks)
    return JanitorTables(tables.tx, tables.images, tables.data, locks)


@pytest.fixture
def janitor_env(
    endpoint_env: Any, janitor_tables: JanitorTables, monkeypatch: pytest.MonkeyPatch
) -> JanitorTables:
    """The environment the CDK app gives both janitors, pointing at the emulator."""
    settings = {
        "TRANSACTIONS_TABLE": janitor_tables.tx,
        "IMAGES_TABLE": janitor_tables.images,
        "LOCKS_TABLE": janitor_tables.locks,
        "DATA_TABLES": janitor_tables.data,
        "ROLLBACK_AFTER_SECONDS": str(ROLLBACK_AFTER),
        "DELETE_AFTER_SECONDS": str(DELETE_AFTER),
        "SWEEP_PAGE_BUDGET": "50",
        "POWERTOOLS_METRICS_NAMESPACE": "ddbtx",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "LOG_LEVEL": "WARNING",
    }
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    return janitor_tables


@pytest.fixture
def ddbtx_logger() -> Iterator[logging.Logger]:
    """Put the ``ddbtx`` logger back as it was: a handler's cold start hands it
    Powertools' handler and stops propagation, which would hide its records from
    later tests in this worker."""
    log = logging.getLogger("ddbtx")
    saved = (list(log.handlers), log.propagate, log.level)
    yield log
    log.handlers, log.propagate = saved[0], saved[1]
    log.setLevel(saved[2])


@pytest.fixture
def sweeper(
    janitor_env: JanitorTables, monkeypatch: pytest.MonkeyPatch, ddbtx_logger: logging.Logger
) -> Callable[[], Any]:
    """Cold-start the sweeper handler with the environment as it is when called."""

    def cold_start() -> ModuleType:
        monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "ddbtx-sweeper")
        module = load_handler("sweeper")
        # Powertools keeps metrics in class-level state shared by every import in this
        # process (tests run two "instances" in threads); a cold start begins empty.
        module.metrics.clear_metrics()
        return module

    return cold_start


@pytest.fixture
def recovery(
    janitor_env: JanitorTables, monkeypatch: pytest.MonkeyPatch, ddbtx_logger: logging.Logger
) -> ModuleType:
    """The recovery handler, cold-started."""
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "ddbtx-recovery")
    return load_handler("recovery")


@pytest.fixture
def old_tm(make_tm: Callable[..., TransactionManager]) -> TransactionManager:
    """A coordinator whose records are decades old by the handlers' clock."""
    clock = FakeClock(LONG_AGO)
    return make_tm(clock=clock.time, monotonic=clock.monotonic, sleep=clock.sleep)


@pytest.fixture
def young_tm(make_tm: Callable[..., TransactionManager]) -> TransactionManager:
    """A coordinator whose records are fresh (in the future) by the handlers' clock."""
    clock = FakeClock(FAR_FUTURE)
    return make_tm(clock=clock.time, monotonic=clock.monotonic, sleep=clock.sleep)
