"""Every DynamoDB test runs twice: against moto's server and against dynalite.

Both emulators are started once per test session (per xdist worker) on free
loopback ports. Each test gets its own table names, so tests never see each
other's data and can run in parallel.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from aws.backend import RemoteDynamo, remote_selected, table_prefix
from ddbtx import TransactionManager
from ddbtx.local import KINDS, LocalDynamo
from ddbtx.tables import create_data_table
from drivers import EventLoopThread, Scenario
from helpers import FakeClock, Tables

#: moto and dynalite; or only real DynamoDB under ``python -m tests.aws.run`` (see tests/aws).
BACKENDS = ("aws",) if remote_selected() else KINDS


@pytest.fixture(scope="session")
def emulators() -> Iterator[dict[str, LocalDynamo]]:
    if remote_selected():
        yield {"aws": RemoteDynamo()}  # type: ignore[dict-item]
        return
    started: dict[str, LocalDynamo] = {}
    try:
        for kind in KINDS:
            started[kind] = LocalDynamo(kind).start()
        yield started
    finally:
        for emu in started.values():
            emu.stop()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, emulators: dict[str, LocalDynamo]) -> LocalDynamo:
    """The emulator this test instance runs against (``moto`` or ``dynalite``)."""
    emu: LocalDynamo = emulators[request.param]
    return emu


@pytest.fixture
def ddb(backend: LocalDynamo) -> Any:
    """A low-level boto3 DynamoDB client on the current backend."""
    return backend.client()


@pytest.fixture
def table_name(ddb: Any) -> Iterator[Callable[[str], str]]:
    """Make unique table names for this test; the tables are deleted afterwards."""
    made: list[str] = []
    run = uuid.uuid4().hex[:10]

    def make(role: str) -> str:
        name = f"{table_prefix()}{role}-{run}"
        made.append(name)
        return name

    yield make
    existing = set(ddb.list_tables()["TableNames"])
    for name in made:
        if name in existing:
            ddb.delete_table(TableName=name)


@pytest.fixture
def data_table(ddb: Any, table_name: Callable[[str], str]) -> str:
    """An empty data table (hash key ``pk``): the writes a lock protects, or a step's."""
    name = table_name("data")
    create_data_table(ddb, name)
    return name


@pytest.fixture(scope="session")
def event_loop_thread() -> Iterator[EventLoopThread]:
    """One event loop for the asyncio driver's objects (``ddbtx.aio``) of this session
    (xdist worker); sync test bodies run their coroutines on it (see ``drivers``)."""
    loop = EventLoopThread()
    yield loop
    loop.close()


@pytest.fixture
def run(event_loop_thread: EventLoopThread) -> Callable[[Scenario], Any]:
    """``run(scenario)``: run a coroutine function to its end on the event-loop thread."""

    def go(scenario: Scenario) -> Any:
        return event_loop_thread.run(scenario())

    return go


@pytest.fixture
def endpoint_env(backend: LocalDynamo, monkeypatch: pytest.MonkeyPatch) -> LocalDynamo:
    """Point boto3's own endpoint override at the backend (as a deployed handler sees it)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", backend.endpoint_url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    return backend


# --- leaked lock holders ---------------------------------------------------------


def live_heartbeats() -> dict[threading.Thread, list[Any]]:
    """Heartbeat threads of lock clients still renewing a lock, with the locks they renew.

    A thread with nothing left to renew ends by itself within a period, so only one
    that still holds a lock outlives its test for good.
    """
    found: dict[threading.Thread, list[Any]] = {}
    for thread in threading.enumerate():
        keeper = getattr(getattr(thread, "_target", None), "__self__", None)
        held = keeper.held() if keeper is not None and hasattr(keeper, "held") else []
        if "-heartbeat-" in thread.name and held:
            found[thread] = held
    return found


@pytest.fixture(autouse=True)
def no_leaked_lock_holder() -> Iterator[None]:
    """Fail a test that leaves a lock client heartbeating after it ends.

    Such a thread outlives its table and its emulator, and its failed heartbeats are
    logged as warnings into whichever test runs next in the same worker (the README
    test, which fails on any warning, failed so on loaded whole-suite runs). A test
    that wants a dead holder stops its heartbeats (``client._heartbeats.close()``);
    one done with a client closes it.
    """
    before = set(live_heartbeats())
    yield
    leaked = {t.name: held for t, held in live_heartbeats().items() if t not in before}
    assert not leaked, f"lock clients still heartbeating after the test: {leaked}"


# --- transaction fixtures -------------------------------------------------------


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def tables(ddb: Any, table_name: Callable[[str], str]) -> Tables:
    """Protocol tables plus one data table (hash key ``pk``), all empty."""
    names = Tables(table_name("tx"), table_name("img"), table_name("data"))
    TransactionManager(ddb, names.tx, names.images).create_tables()
    create_data_table(ddb, names.data)
    return names


@pytest.fixture
def make_tm(
    backend: LocalDynamo, tables: Tables, clock: FakeClock
) -> Callable[..., TransactionManager]:
    """A coordinator: its own client and manager on the shared tables and fake clock.

    ``max_attempts`` sets botocore's attempts per call (1: throttling is final at once).
    """

    def make(max_attempts: int = 3, **options: Any) -> TransactionManager:
        settings: dict[str, Any] = {
            "clock": clock.time,
            "monotonic": clock.monotonic,
            "sleep": clock.sleep,
            "lock_wait": 5.0,
            "stale_after": 3.0,
        }
        settings.update(options)
        client = backend.client(max_attempts=max_attempts)
        return TransactionManager(client, tables.tx, tables.images, **settings)

    return make


@pytest.fixture
def tm(make_tm: Callable[..., TransactionManager]) -> TransactionManager:
    return make_tm()


@pytest.fixture
def seed(ddb: Any, tables: Tables) -> Callable[..., None]:
    """Put plain items into the data table: seed(a=100, b=5) -> balance attributes."""

    def put(**balances: int) -> None:
        for pk, balance in balances.items():
            ddb.put_item(
                TableName=tables.data, Item={"pk": {"S": pk}, "balance": {"N": str(balance)}}
            )

    return put


# --- per-file progress ----------------------------------------------------------


class FileProgress:
    """Under pytest-xdist, a line as each test file finishes: its outcome counts and when.

    xdist prints only dots; with files of very different lengths that says little
    about how far a run is. Registered in the controller only.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.remaining: dict[str, int] = {}
        self.outcomes: dict[str, dict[str, int]] = {}
        self.started = time.monotonic()

    @pytest.hookimpl
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if self.remaining:
            return  # every worker collects the same tests
        for nodeid in ids:
            path = nodeid.split("::", 1)[0]
            self.remaining[path] = self.remaining.get(path, 0) + 1

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        path = report.nodeid.split("::", 1)[0]
        outcomes = self.outcomes.setdefault(path, {})
        if report.when == "call" or report.outcome != "passed":
            outcomes[report.outcome] = outcomes.get(report.outcome, 0) + 1
        if report.when != "teardown" or path not in self.remaining:
            return
        self.remaining[path] -= 1
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if self.remaining[path] == 0 and reporter is not None:
            counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items()))
            elapsed = time.monotonic() - self.started
            # xdist's dots do not end their line; ours goes on a line of its own.
            reporter.write(f"\n{path}: {counts} (at {elapsed // 60:.0f}m{elapsed % 60:02.0f}s)\n")


def pytest_configure(config: pytest.Config) -> None:
    workers = config.getoption("numprocesses", default=None)
    if hasattr(config, "workerinput") or not workers or config.getoption("collectonly"):
        return  # not under xdist (pytest prints per file itself), or a worker
    config.pluginmanager.register(FileProgress(config), "ddbtx-file-progress")


# --- the fast tier of fault-product tests ---------------------------------------------
#
# A test marked ``fault_product(axis)`` runs a fault at every call for each value of its
# ``axis`` parameter (the fault kind, the ending, ...) on each backend. `make test` (the fast
# tier, CI's budget) keeps half of that product, chosen like a chessboard's squares: a value
# runs on moto where the next runs on dynalite, so each value and each backend still meets
# the test; `make faults` (``-m slow``) runs the other half.


@pytest.hookimpl(tryfirst=True)  # before `-m 'not slow'` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("fault_product")
        callspec = getattr(item, "callspec", None)
        if marker is None or callspec is None:
            continue
        axis = marker.args[0]
        backend = callspec.params.get("backend")
        square = BACKENDS.index(backend) if backend in BACKENDS else 0
        if (square + _position(item, axis, callspec.params[axis])) % 2:
            item.add_marker(pytest.mark.slow)


def _position(item: pytest.Item, axis: str, value: Any) -> int:
    """Where ``value`` stands among the values the test's ``axis`` parametrization lists
    (pytest's own indices count the whole product)."""
    for mark in item.iter_markers("parametrize"):
        names = mark.args[0]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        if axis not in names:
            continue
        column = names.index(axis)
        rows = [_row(entry, len(names)) for entry in mark.args[1]]
        return [row[column] for row in rows].index(value)
    raise pytest.UsageError(f"{item.nodeid}: fault_product({axis!r}) names no parametrize")


def _row(entry: Any, width: int) -> tuple[Any, ...]:
    """One parametrize entry as its tuple of values (a ``pytest.param`` carries them)."""
    if hasattr(entry, "marks") and hasattr(entry, "values"):
        return tuple(entry.values)
    return (entry,) if width == 1 else tuple(entry)
