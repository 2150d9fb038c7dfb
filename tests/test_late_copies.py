"""Late copies of a finished transaction's writes (issue 34, item 3): what a skeptical
reviewer did, as a test.

A transaction T1 works on x, y, z, w and v (and commits, or rolls back); every write it sends
is recorded as sent. A later transaction T2 deletes x, overwrites y and w, and re-creates z
and v. Then copies of T1's recorded writes arrive late, sent verbatim by a plain client, and
a sweep runs. Whatever arrived, the data must be what T2 left, with no lock. T1 is one of:

- ``mixed``: insert x, update y, delete z (the reviewer's transaction);
- ``same-item``: several writes to one item: insert x and update it, update y twice,
  update z and delete it;
- ``read-locks``: read w (present) and v (absent) under read locks, update y;
- ``entry-rows``: ``mixed`` with its record's entries in rows of their own.

- every single copy;
- every pair of copies in their original order (before the fence, 5 of the 10 pairs to one
  item broke: a lock and the write under it overwrote T2's data, or a lock with its delete
  mark and the completing delete removed the item T2 re-created);
- random sets of up to four copies, in any order (``slow``: ``make faults``).

The singles of every scenario and the pairs of ``mixed`` run in ``make test``; the pairs of the
other scenarios and the random sets are ``slow``.

Both emulators. On dynalite, which has no ``TransactWriteItems`` (AWS has), a copy of x's
locking insert followed by a copy of its unlock re-creates x after T2 deleted it: the one
case docs/protocol.md names as not survived there, skipped on dynalite only.
"""

from __future__ import annotations

import contextlib
import copy
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from itertools import combinations
from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.model import OperationModel

from ddbtx import TransactionManager
from ddbtx import schema as s
from ddbtx._stores import entry_rows
from ddbtx.local import LocalDynamo
from ddbtx.sweeper import Sweeper
from helpers import FakeClock, Tables, data_state, leftover

WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})
OUTCOMES = ("commit", "rollback")


@dataclass(frozen=True)
class Call:
    """One write as its coordinator sent it: the operation and its parameters."""

    operation: str
    params: dict[str, Any]

    def __str__(self) -> str:
        key = self.params.get("Key") or self.params.get("Item", {})
        pk = key.get("pk", key.get("id", {}))
        return f"{self.operation}({next(iter(pk.values()), '?') if pk else '...'})"


class Recorder:
    """Every write a client sends, recorded as sent (before botocore builds the request)."""

    def __init__(self, client: Any) -> None:
        self.calls: list[Call] = []
        self.events = client.meta.events
        self.events.register("provide-client-params.dynamodb", self._record)

    def _record(self, params: dict[str, Any], model: OperationModel, **_: Any) -> None:
        if model.name in WRITES:
            self.calls.append(Call(model.name, copy.deepcopy(params)))

    def close(self) -> None:
        self.events.unregister("provide-client-params.dynamodb", self._record)


class Abandon(Exception):
    """Raised inside T1's work to roll it back."""


def item(pk: str, n: int) -> dict[str, Any]:
    return {"pk": {"S": pk}, "n": {"N": str(n)}}


Data = Any  # a transaction's sync coordinator (ddbtx.Transaction)


def _update(tx: Data, table: str, pk: str, expression: str, value: int) -> None:
    tx.update_item(
        TableName=table,
        Key={"pk": {"S": pk}},
        UpdateExpression=expression,
        ExpressionAttributeValues={":v": {"N": str(value)}},
    )


def mixed(tx: Data, table: str) -> None:
    tx.put_item(TableName=table, Item=item("x", 10))
    _update(tx, table, "y", "SET n = :v", 10)
    tx.delete_item(TableName=table, Key={"pk": {"S": "z"}})


def same_item(tx: Data, table: str) -> None:
    tx.put_item(TableName=table, Item=item("x", 10))
    _update(tx, table, "x", "ADD n :v", 1)
    _update(tx, table, "y", "SET n = :v", 10)
    _update(tx, table, "y", "ADD n :v", 5)
    _update(tx, table, "z", "SET n = :v", 7)
    tx.delete_item(TableName=table, Key={"pk": {"S": "z"}})


def read_locks(tx: Data, table: str) -> None:
    assert tx.get_item(TableName=table, Key={"pk": {"S": "w"}})["Item"]["n"] == {"N": "1"}
    assert "Item" not in tx.get_item(TableName=table, Key={"pk": {"S": "v"}})
    _update(tx, table, "y", "SET n = :v", 10)


#: T1 by scenario, and whether its record's entries go to rows of their own.
SCENARIOS: dict[str, tuple[Callable[[Data, str], None], bool]] = {
    "mixed": (mixed, False),
    "same-item": (same_item, False),
    "read-locks": (read_locks, False),
    "entry-rows": (mixed, True),
}


@dataclass
class Scene:
    """The data table, a manager per transaction, and the sweeper that runs last."""

    ddb: Any
    tables: Tables
    clock: FakeClock
    make_tm: Callable[..., TransactionManager]
    backend: str
    work: Callable[[Data, str], None] = mixed

    def reset(self) -> None:
        """Given: x and v absent, y, z and w = 1, no lock anywhere."""
        for pk in ("x", "v"):
            self.ddb.delete_item(TableName=self.tables.data, Key={"pk": {"S": pk}})
        for pk in ("y", "z", "w"):
            self.ddb.put_item(TableName=self.tables.data, Item=item(pk, 1))

    def first(self, outcome: str) -> list[Call]:
        """T1, recorded: the scenario's work, then commit or roll back."""
        tm = self.make_tm(max_workers=1)
        recorder = Recorder(tm.client)
        try:
            with tm.transaction() as tx:
                self.work(tx, self.tables.data)
                if outcome == "rollback":
                    raise Abandon
        except Abandon:
            pass
        recorder.close()
        return recorder.calls

    def later(self) -> dict[str, Any]:
        """T2: deletes x, overwrites y and w, re-creates z and v. What it leaves is the
        expected state."""
        data = self.tables.data
        with self.make_tm().transaction() as tx:
            tx.delete_item(TableName=data, Key={"pk": {"S": "x"}})
            for pk, n in (("y", 20), ("z", 30), ("w", 40), ("v", 50)):
                tx.put_item(TableName=data, Item=item(pk, n))
        return data_state(self.ddb, data)

    def deliver(self, calls: list[Call]) -> None:
        """The copies, late and verbatim, each answered or refused as DynamoDB decides."""
        for call in calls:
            method = getattr(self.ddb, _snake(call.operation))
            # a copy whose condition fails is refused: that is the point
            with contextlib.suppress(ClientError):
                method(**copy.deepcopy(call.params))

    def sweep(self) -> None:
        """An hour later, the sweeper: stale records, then stray locks in the data table."""
        self.clock.advance(3600)
        Sweeper(
            self.make_tm(),
            rollback_after=timedelta(minutes=1),
            delete_after=timedelta(days=1),
            data_tables=[self.tables.data],
            persist_cursor=False,
        ).run()

    def case(self, outcome: str, pick: Callable[[list[Call]], list[Call]]) -> str | None:
        """One case: T1, T2, the copies ``pick`` chooses, a sweep; what went wrong, if any."""
        self.reset()
        calls = self.first(outcome)
        expected = self.later()
        copies = pick(calls)
        if self.backend == "dynalite" and insert_then_unlock(copies):
            # dynalite has no TransactWriteItems, so x's unlock went alone: see the docstring
            return None
        self.deliver(copies)
        self.sweep()
        # The fence stays on items and moves with every lock, a late copy's too: the data
        # is compared without it (data_state), and no other protocol attribute may be left.
        found = data_state(self.ddb, self.tables.data)
        if found == expected and not any(leftover(i) for i in found.values()):
            return None
        return f"copies {[str(c) for c in copies]}: expected {expected}, found {found}"


def insert_then_unlock(copies: list[Call]) -> bool:
    """Whether a copy of a locking insert comes before a copy of an unlock of its item."""
    inserts = [
        i
        for i, c in enumerate(copies)
        if c.operation == "PutItem" and s.ATTR_TRANSIENT in c.params.get("Item", {})
    ]
    unlocks = [
        (i, c.params["Key"])
        for i, c in enumerate(copies)
        if c.operation == "UpdateItem"
        and str(c.params.get("UpdateExpression", "")).startswith("REMOVE")
    ]
    return any(
        i < j and copies[i].params["Item"]["pk"] == key["pk"] for i in inserts for j, key in unlocks
    )


def _snake(operation: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in operation).lstrip("_")


@pytest.fixture
def scene(
    request: pytest.FixtureRequest,
    ddb: Any,
    tables: Tables,
    clock: FakeClock,
    make_tm: Callable[..., TransactionManager],
    backend: LocalDynamo,
    monkeypatch: pytest.MonkeyPatch,
) -> Scene:
    """The scene of the scenario a test is parametrized with (indirectly)."""
    work, in_rows = SCENARIOS[request.param]
    if in_rows:
        monkeypatch.setattr(entry_rows, "ROWS_AFTER", 0)  # every add after the creation
    return Scene(ddb, tables, clock, make_tm, backend.kind, work)


#: Every scenario, for the singles; for the pairs, all but ``mixed`` are ``slow``.
EVERY = pytest.mark.parametrize("scene", list(SCENARIOS), indirect=True)
PAIRS = pytest.mark.parametrize(
    "scene",
    [name if name == "mixed" else pytest.param(name, marks=pytest.mark.slow) for name in SCENARIOS],
    indirect=True,
)


def recorded_count(scene: Scene, outcome: str) -> int:
    scene.reset()
    count = len(scene.first(outcome))
    scene.later()
    return count


def failures(
    scene: Scene, outcome: str, picks: Iterator[Callable[[list[Call]], list[Call]]]
) -> list[str]:
    """What went wrong in each case, up to the first: one is enough to fail, and the cases
    after it cost a transaction pair each."""
    for pick in picks:
        found = scene.case(outcome, pick)
        if found is not None:
            return [found]
    return []


@EVERY
@pytest.mark.parametrize("outcome", OUTCOMES)
def test_given_a_finished_transaction_when_any_one_of_its_writes_arrives_late_then_data_stands(
    scene: Scene, outcome: str
) -> None:
    # Given T1 (the scenario's work; committed or rolled back), then T2 over the same items
    n = recorded_count(scene, outcome)
    assert n >= 7  # the record's writes, the locks, the applies, the completions
    # When one recorded write of T1's arrives late (each in turn), and a sweep runs
    picks = (lambda calls, i=i: [calls[i]] for i in range(n))
    # Then every time the data is what T2 left, with no lock
    assert failures(scene, outcome, picks) == []


@PAIRS
@pytest.mark.parametrize("outcome", OUTCOMES)
def test_given_a_finished_transaction_when_two_writes_arrive_late_in_order_then_data_stands(
    scene: Scene, outcome: str
) -> None:
    # Given T1 and T2 as above
    n = recorded_count(scene, outcome)
    # When two recorded writes arrive late, in their original order (every pair), and a sweep
    picks = (lambda calls, i=i, j=j: [calls[i], calls[j]] for i, j in combinations(range(n), 2))
    # Then every time the data is what T2 left, with no lock
    assert failures(scene, outcome, picks) == []


@pytest.mark.slow
@EVERY
@pytest.mark.parametrize("outcome", OUTCOMES)
def test_given_a_finished_transaction_when_random_sets_of_copies_arrive_then_data_stands(
    scene: Scene, outcome: str
) -> None:
    # Given T1 and T2 as above
    n = recorded_count(scene, outcome)
    rng = random.Random(34)
    sets = [[rng.randrange(n) for _ in range(rng.randint(1, 4))] for _ in range(200)]
    # When 200 random sets of up to four copies arrive late, in any order, and a sweep
    picks = (lambda calls, chosen=chosen: [calls[i] for i in chosen] for chosen in sets)
    # Then every time the data is what T2 left, with no lock
    assert failures(scene, outcome, picks) == []
