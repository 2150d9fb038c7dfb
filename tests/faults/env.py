"""The harness's world: one backend, the protocol tables, a fake clock, coordinators, a sweeper.

Everything here works both under pytest (built from the ``tests/conftest.py``
fixtures by :mod:`fixtures`) and in ``python -m tests.faults.run`` (built from
a freshly started emulator), so a failure found by one replays in the other.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ddbtx import SweepOutcome, TransactionManager, aio
from ddbtx import schema as s
from ddbtx.local import LocalDynamo
from ddbtx.locks import create_lock_table
from ddbtx.tables import create_data_table

try:
    from drivers import EventLoopThread, Synced  # under pytest: tests/ is on the path
    from helpers import leftover
except ImportError:  # python -m tests.faults.run
    from tests.drivers import EventLoopThread, Synced
    from tests.helpers import leftover

_LOOP: list[EventLoopThread] = []


def event_loop() -> EventLoopThread:
    """The process's event loop for asyncio coordinators (a daemon thread, made once)."""
    if not _LOOP:
        _LOOP.append(EventLoopThread())
    return _LOOP[0]


#: Seconds without a change after which the sweeper rolls a pending transaction back.
ROLLBACK_AGE = 60.0
#: Keep completed records this long in the sweeps that check outcomes (deleted later).
KEEP = timedelta(hours=1)


class SkewClock:
    """One shared simulated time line; each coordinator reads it with its own offset.

    Sleeping advances the shared time, so a coordinator that waits makes every
    other coordinator's view of its TX record older, as a real pause would.
    """

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start
        self._lock = threading.Lock()

    def advance(self, seconds: float) -> None:
        # Atomic: two threads adding at once must never move time backwards.
        with self._lock:
            self.now += seconds

    def view(self, offset: float) -> Callable[[], float]:
        return lambda: self.now + offset


@dataclass
class Env:
    """A backend with empty protocol tables and one data table (hash key ``pk``)."""

    backend: LocalDynamo
    tx_table: str
    images_table: str
    data_table: str
    locks_table: str = ""
    clock: SkewClock = field(default_factory=SkewClock)
    _clients: dict[int, Any] = field(default_factory=dict)
    _aio_clients: dict[int, Any] = field(default_factory=dict)
    _locks_made: bool = False

    @property
    def kind(self) -> str:
        return self.backend.kind

    def client(self, max_attempts: int = 3, *, fresh: bool = False) -> Any:
        """A client on the backend; shared per ``max_attempts`` unless ``fresh``."""
        if fresh or max_attempts not in self._clients:
            # LocalDynamo already serves moto one request at a time, the per-item
            # atomicity the concurrent workloads rely on.
            client = self.backend.client(max_attempts=max_attempts)
            if fresh:
                return client
            self._clients[max_attempts] = client
        return self._clients[max_attempts]

    def coordinator(
        self,
        *,
        offset: float = 0.0,
        client: Any = None,
        max_attempts: int = 3,
        **options: Any,
    ) -> TransactionManager:
        """A coordinator whose wall clock is the shared time plus ``offset`` seconds (skew)."""
        return TransactionManager(
            client if client is not None else self.client(max_attempts),
            self.tx_table,
            self.images_table,
            **{**self._settings(offset), **options},
        )

    def aio_coordinator(
        self, *, offset: float = 0.0, max_attempts: int = 3, fresh: bool = False, **options: Any
    ) -> Any:
        """The asyncio manager (``ddbtx.aio``, on aiobotocore) with :meth:`coordinator`'s
        settings, its coroutines run behind sync calls (the same test code drives both).
        ``fresh``: on a client of its own (a fault armed on it hits it alone)."""
        loop = event_loop()
        if fresh:
            client = loop.client(self.backend, max_attempts)
        else:
            if max_attempts not in self._aio_clients:
                self._aio_clients[max_attempts] = loop.client(self.backend, max_attempts)
            client = self._aio_clients[max_attempts]
        clock = self.clock

        async def sleep(seconds: float) -> None:
            clock.advance(seconds)

        settings = {**self._settings(offset), "sleep": sleep, **options}
        manager = aio.TransactionManager(client, self.tx_table, self.images_table, **settings)
        return Synced(manager, loop, deep=True)

    def _settings(self, offset: float) -> dict[str, Any]:
        return {
            "clock": self.clock.view(offset),
            "monotonic": self.clock.view(0.0),
            "sleep": self.clock.advance,
            "lock_wait": 5.0,
            "stale_after": 3.0,
            "max_workers": 1,
            # Known key schema: no DescribeTable call shifts the fault's call index.
            "key_schemas": {self.data_table: ("pk",)},
        }

    def lock_table(self) -> str:
        """The :mod:`ddbtx.locks` table, created on first use."""
        if not self._locks_made:
            create_lock_table(self.client(), self.locks_table)
            self._locks_made = True
        return self.locks_table

    # -- the sweeper -------------------------------------------------------------

    def stale_records(
        self, tm: TransactionManager, rollback_after: float, delete_after: timedelta
    ) -> Iterator[str]:
        """TX ids the sweep index lists: stale pending, decided not completed, completed and old."""
        now = tm.clock()
        pending_cut = str(int((now - rollback_after) * 1000))
        completed_cut = str(int((now - delete_after.total_seconds()) * 1000))
        for shard in range(s.SWEEP_SHARDS):
            for state, cut in (
                (s.STATE_PENDING, pending_cut),
                (s.STATE_COMMITTED, None),
                (s.STATE_ROLLED_BACK, None),
                (s.STATE_COMPLETED_TAG, completed_cut),
            ):
                condition = "#sw = :sw"
                values: dict[str, Any] = {":sw": {"S": f"{state}#{shard}"}}
                if cut is not None:
                    condition += " AND #ts <= :cut"
                    values[":cut"] = {"N": cut}
                yield from self._query_ids(tm.client, condition, values)

    def _query_ids(self, client: Any, condition: str, values: dict[str, Any]) -> Iterator[str]:
        names = {"#sw": s.TX_SWEEP_KEY}
        if "#ts" in condition:
            names["#ts"] = s.TX_UPDATED
        params: dict[str, Any] = {
            "TableName": self.tx_table,
            "IndexName": s.SWEEP_INDEX,
            "KeyConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        while True:
            page = client.query(**params)
            for row in page["Items"]:
                yield row[s.TX_PK]["S"]
            if "LastEvaluatedKey" not in page:
                return
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def sweep_all(
        self,
        tm: TransactionManager,
        *,
        rollback_after: float = 0.0,
        delete_after: timedelta = KEEP,
    ) -> Counter[SweepOutcome]:
        """The sweeper: move every stale or not completed TX record along (found by the index).

        Stands in for the sweeper Lambda's core until it lands: the same index
        query per shard, then :meth:`TransactionManager.sweep` per record.
        """
        found = sorted(set(self.stale_records(tm, rollback_after, delete_after)))
        return self.sweep_ids(tm, found, rollback_after=rollback_after, delete_after=delete_after)

    def sweep_ids(
        self,
        tm: TransactionManager,
        tx_ids: list[str],
        *,
        rollback_after: float = 0.0,
        delete_after: timedelta = KEEP,
    ) -> Counter[SweepOutcome]:
        """The sweeper's per-record step on known records (a schedule knows its own ids)."""
        outcomes: Counter[SweepOutcome] = Counter()
        age = timedelta(seconds=rollback_after)
        for tx_id in tx_ids:
            outcomes[tm.sweep(tx_id, rollback_after=age, delete_after=delete_after)] += 1
        return outcomes

    # -- inspection ------------------------------------------------------------

    def item(self, pk: str) -> dict[str, Any] | None:
        resp = self.client().get_item(
            TableName=self.data_table, Key={"pk": {"S": pk}}, ConsistentRead=True
        )
        item: dict[str, Any] | None = resp.get("Item")
        return item

    def header(self, tx_id: str) -> dict[str, Any] | None:
        resp = self.client().get_item(
            TableName=self.tx_table,
            Key={s.TX_PK: {"S": tx_id}, s.TX_SK: {"S": s.TX_HEADER_SK}},
            ConsistentRead=True,
        )
        item: dict[str, Any] | None = resp.get("Item")
        return item

    def residue(self, keys: list[str], tx_ids: list[str]) -> list[str]:
        """Everything the protocol left behind on these items and transactions."""
        problems: list[str] = []
        for pk in keys:
            item = self.item(pk) or {}
            left = leftover(item)
            if left:
                owner = item.get(s.ATTR_LOCK, {}).get("S", "").rsplit("/", 1)[0]
                problems.append(f"item {pk} keeps {left} (lock owner {owner or None})")
        client = self.client()
        for tx_id in tx_ids:
            images = client.query(
                TableName=self.images_table,
                KeyConditionExpression="#id = :id",
                ExpressionAttributeNames={"#id": s.IMAGE_PK},
                ExpressionAttributeValues={":id": {"S": tx_id}},
                ConsistentRead=True,
            )["Items"]
            if images:
                problems.append(f"tx {tx_id} keeps {len(images)} image rows")
            header = self.header(tx_id)
            if header is not None and header.get(s.TX_COMPLETED) != {"BOOL": True}:
                state = header[s.TX_STATE]["S"]
                problems.append(f"tx {tx_id} record not completed in state {state}")
        return problems


def create_env(backend: LocalDynamo) -> Env:
    """Fresh, uniquely named tables on a running backend (for the command-line runner)."""
    run = uuid.uuid4().hex[:10]
    env = Env(backend, f"tx-{run}", f"img-{run}", f"data-{run}", f"locks-{run}")
    client = env.client()
    TransactionManager(client, env.tx_table, env.images_table).create_tables()
    create_data_table(client, env.data_table)
    return env


def drop_env(env: Env) -> None:
    client = env.client()
    tables = [env.tx_table, env.images_table, env.data_table]
    for table in tables + ([env.locks_table] if env._locks_made else []):
        client.delete_table(TableName=table)


@contextmanager
def started_env(kind: str) -> Iterator[Env]:
    """Start an emulator, make the tables, and stop it afterwards."""
    with LocalDynamo(kind) as backend:  # type: ignore[arg-type]
        env = create_env(backend)
        try:
            yield env
        finally:
            drop_env(env)
