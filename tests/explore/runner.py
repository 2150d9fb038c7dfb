"""Run one schedule on a :class:`World`: participants' threads, the gate, a final sweep, checks.

Only public entry points drive the protocol: ``TransactionManager.begin/resume``,
``Transaction`` requests, ``commit``/``rollback``, ``Sweeper.run``,
``recovery.break_lock`` (on each item) and ``recovery.recover``, and
``TransactionManager.sweep``.
"""

from __future__ import annotations

import os
import random
import threading
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from unittest import mock

from ddbtx import TransactionManager
from ddbtx import schema as s
from ddbtx.chaos import Crash
from ddbtx.errors import DdbtxError, TransactionNotFoundError
from ddbtx.recovery import break_lock, recover
from ddbtx.sweeper import Sweeper

from .gate import Gate, Policy, Waiter
from .model import Item, Seen, check, read_record, request_params
from .schedule import ITEMS, OPS, Schedule
from .world import DATA, IMAGES, TX, World

try:  # pytest puts tests/ on the path; ``python -m tests.explore`` does not
    from helpers import FakeClock
except ImportError:  # pragma: no cover - the command-line runner
    from tests.helpers import FakeClock

#: The sweeper rolls back a pending record unchanged for this long; a pause outlasts it.
ROLLBACK_AFTER = timedelta(seconds=60)
PAUSE_SECONDS = 61.0
#: Finished records are kept (never deleted in a schedule): the final check reads them.
KEEP = timedelta(days=30)
#: Times a participant looks for a record not written yet before it gives up.
AWAIT_TRIES = 12


class Forced:
    """Exhaustive mode's policy: follow ``pick`` (indexes into the sorted waiters), then
    keep running the same participant while it can (no preemption). Records every choice."""

    def __init__(self, pick: tuple[int, ...]) -> None:
        self.pick = pick
        self.taken: list[tuple[int, list[str]]] = []  #: (index chosen, owners waiting)
        self._last: str | None = None

    def choose(self, waiters: list[Waiter], step: int) -> Waiter:
        if step < len(self.pick) and self.pick[step] < len(waiters):
            index = self.pick[step]
        else:
            same = [i for i, w in enumerate(waiters) if w.owner == self._last]
            index = same[0] if same else 0
        self.taken.append((index, [w.owner for w in waiters]))
        self._last = waiters[index].owner
        return waiters[index]


@dataclass
class Result:
    schedule: Schedule
    problems: list[str] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    fired: bool = False
    choices: list[tuple[int, list[str]]] = field(default_factory=list)


@contextmanager
def _seeded_tokens(seed: int) -> Iterator[None]:
    """Transaction ids and nonces from a seeded generator, so a replay makes the same ones."""
    rng = random.Random(seed)
    lock = threading.Lock()

    def token_hex(nbytes: int = 32) -> str:
        with lock:
            return rng.randbytes(nbytes).hex()

    with mock.patch("secrets.token_hex", token_hex):
        yield


class _Run:
    """One schedule in progress."""

    def __init__(self, world: World, schedule: Schedule) -> None:
        self.world = world
        self.sc = schedule
        self.clock = FakeClock()
        self.policy: Any = (
            Forced(schedule.pick)
            if schedule.pick or schedule.policy == "forced"
            else Policy(schedule.seed, schedule.policy, schedule.owners)
        )
        self.gate = Gate(self.policy, self.clock.advance)
        self.seen: list[Seen] = []
        self.problems: list[str] = []
        self.put_items: dict[str, Item] = {}
        self._lock = threading.Lock()
        self.rng = random.Random(schedule.seed ^ 0x5EED)
        self.tms: dict[str, TransactionManager] = {}
        self.rows: dict[str, list[Item]] | None = None

    # -- participants --------------------------------------------------------------------

    def manager(self, owner: str, client: Any) -> TransactionManager:
        def sleep(seconds: float) -> None:
            self.gate.step(owner, "sleep")  # a wait lets the others run
            self.clock.advance(seconds)

        return TransactionManager(
            client,
            TX,
            IMAGES,
            clock=self.clock.time,
            monotonic=self.clock.monotonic,
            sleep=sleep,
            lock_wait=5.0,
            stale_after=3.0,
            max_workers=self.sc.workers,
            key_schemas={DATA: ("pk",)},
            rng=random.Random(f"{self.sc.seed}/{owner}"),
        )

    def note(self, obs: Seen) -> None:
        with self._lock:
            self.seen.append(obs)

    def attempt(
        self,
        owner: str,
        action: str,
        fn: Callable[[], Any],
        requests: list[tuple[str, str, str]] | tuple[()] = (),
    ) -> tuple[bool, Any]:
        """Make one public call; note what it returned (a Crash ends the participant)."""
        try:
            value = fn()
        except DdbtxError as exc:
            self.note(Seen(owner, action, type(exc).__name__, tuple(requests)))
            return False, exc
        except Crash:
            self.note(Seen(owner, action, "crash", tuple(requests)))
            raise
        except Exception as exc:
            self.note(Seen(owner, action, f"unexpected {type(exc).__name__}", tuple(requests)))
            self.problems.append(
                f"{owner} {action} raised {type(exc).__name__}: {exc} at {_where(exc)}"
            )
            return False, exc
        self.note(Seen(owner, action, "ok", tuple(requests)))
        return True, value

    def wait_for_record(self, owner: str, action: str, fn: Callable[[], Any]) -> Any:
        """Call ``fn`` until the record exists (it raises TransactionNotFoundError or returns
        None before), letting the others run in between; its value, or None."""
        for _ in range(AWAIT_TRIES):
            try:
                value = fn()
            except TransactionNotFoundError:
                value = None
            if value is not None:
                return self.attempt(owner, action, lambda v=value: v)[1]
            self.gate.park(owner, 6)
            self.gate.step(owner, "await record")
        self.note(Seen(owner, action, "no record"))
        return None

    def coordinator(self, i: int) -> None:
        owner = f"c{i}"
        tm = self.tms[owner]
        script = self.sc.scripts[i]
        if i == 0:
            tx = self.tx0
        else:
            try:
                tx = self.wait_for_record(owner, "resume", lambda: tm.resume(self.tx0.id))
            except DdbtxError as exc:
                self.note(Seen(owner, "resume", type(exc).__name__))
                return
            if tx is None:
                return
        named = [(f"c{i}r{j}", OPS[r[0]], r[1]) for j, r in enumerate(script.requests)]
        writes = [n for n in named if n[1] != "get"]
        batched = script.batch and len(writes) >= 2
        for name, op, pk in named:
            if batched and op != "get":
                if (name, op, pk) != writes[0]:
                    continue
                body = [
                    {o.capitalize(): request_params(nm, o, p, self.put_value(nm))}
                    for nm, o, p in writes
                ]
                what = "write_all " + " ".join(f"{nm}:{o}:{p}" for nm, o, p in writes)
                self.attempt(owner, what, lambda b=body: tx.write_all(b), writes)
                continue
            params = request_params(name, op, pk, self.put_value(name))
            call = getattr(tx, f"{op}_item")
            action = f"{name} {op} {pk}"
            self.attempt(owner, action, lambda c=call, p=params: c(**p), [(name, op, pk)])
        self.attempt(owner, script.finish, getattr(tx, script.finish))

    @staticmethod
    def put_value(name: str) -> int:
        """A put's ``n``: unique per request (c2r1 -> 1021)."""
        return 1000 + 10 * int(name[1]) + int(name[3:])

    def sweeper(self) -> None:
        sweeper = Sweeper(
            self.tms["sw"],
            rollback_after=ROLLBACK_AFTER,
            delete_after=KEEP,
            data_tables=[DATA],
            persist_cursor=False,
        )
        self.attempt("sw", "sweeper run", sweeper.run)

    def recover(self) -> None:
        def probe() -> Any:
            # An operator who finds the items locked tries break_lock on each first: a
            # lock of an unfinished transaction (pending or decided) must be refused.
            for pk in ITEMS:
                key = {"pk": {"S": pk}}
                self.attempt("rc", f"break_lock {pk}", lambda k=key: break_lock(tm, DATA, k))
            result = recover(tm, self.tx0.id)
            return None if result["outcome"] == "missing" else result

        tm = self.tms["rc"]

        try:
            self.wait_for_record("rc", "recover", probe)
        except DdbtxError as exc:
            self.note(Seen("rc", "recover", type(exc).__name__))

    def pause(self, owner: str) -> None:
        self.clock.advance(PAUSE_SECONDS)
        self.gate.park(owner, self.rng.randint(10, 80))

    def thread(self, owner: str, body: Callable[[], None]) -> threading.Thread:
        def run() -> None:
            try:
                body()
            except Crash:
                pass
            except BaseException as exc:  # a failure of the explorer itself, reported
                self.problems.append(f"{owner} thread died: {type(exc).__name__}: {exc}")
            finally:
                self.gate.leave()

        return threading.Thread(target=run, name=f"explore-{owner}", daemon=True)

    # -- the whole run ----------------------------------------------------------------

    def execute(self) -> Result:
        sc = self.sc
        doors = {owner: self.world.doors[owner] for owner in sc.owners}
        for owner, door in doors.items():
            door.open(self.gate, owner, sc.fault, self.world.roles, lambda o=owner: self.pause(o))
            self.tms[owner] = self.manager(owner, door.client)
        for i, script in enumerate(sc.scripts):
            for j, r in enumerate(script.requests):
                name = f"c{i}r{j}"
                put = request_params(name, "put", r[1], self.put_value(name))
                self.put_items[name] = put["Item"]
        threads = []
        with _seeded_tokens(sc.seed):
            self.tx0 = self.tms["c0"].begin()
            bodies: dict[str, Callable[[], None]] = {
                f"c{i}": (lambda i=i: self.coordinator(i)) for i in range(len(sc.scripts))
            }
            if sc.sweeper:
                bodies["sw"] = self.sweeper
            if sc.recover:
                bodies["rc"] = self.recover
            threads = [self.thread(owner, body) for owner, body in bodies.items()]
            for t in threads:
                t.start()
            self.gate.drive()
            for t in threads:
                t.join(timeout=30)
            fired = any(d.fired for d in doors.values())
            for door in doors.values():
                door.close()
            for tm in self.tms.values():
                tm.close()  # the per-item pool's threads
        if self.gate.problem:
            self.problems.append(self.gate.problem)
        if any(t.is_alive() for t in threads):
            self.problems.append("a participant thread never ended")
        raw, items, residue = self.settle()
        problems = self.problems + check(raw, items, residue, self.seen, self.put_items)
        choices = self.policy.taken if isinstance(self.policy, Forced) else []
        return Result(sc, problems, self.seen, self.gate.trace, fired, choices)

    # -- the end: drive everything to its end, then look ---------------------------------

    def settle(self) -> tuple[Item | None, dict[str, Item], list[str]]:
        """A final sweep (no gate, no fault), then the record, the items and any residue."""
        tm = TransactionManager(
            self.world.final_client,
            TX,
            IMAGES,
            clock=self.clock.time,
            monotonic=self.clock.monotonic,
            sleep=self.clock.advance,
            key_schemas={DATA: ("pk",)},
            max_workers=1,
        )
        self.clock.advance(10 * PAUSE_SECONDS)
        tx_id = self.tx0.id
        for _ in range(3):
            raw = self._header(tx_id)
            if raw is None or raw.get(s.TX_FINISHED) == {"BOOL": True}:
                break
            tm.sweep(tx_id, rollback_after=timedelta(seconds=1), delete_after=KEEP)
        self.rows = self.world.rows()
        residue = self.residue(tx_id, raw)
        if residue:
            # Stray locks are the sweeper's scan pass's job: only what it leaves is wrong.
            Sweeper(
                tm,
                rollback_after=timedelta(seconds=1),
                delete_after=KEEP,
                decided_grace=timedelta(0),
                data_tables=[DATA],
                persist_cursor=False,
            ).run()
            raw = self._header(tx_id)
            self.rows = self.world.rows()
            residue = self.residue(tx_id, raw)
        items = {row["pk"]["S"]: row for row in self.rows[DATA]}
        return raw, items, residue

    def _header(self, tx_id: str) -> Item | None:
        resp = self.world.admin.get_item(
            TableName=TX,
            Key={s.TX_PK: {"S": tx_id}, s.TX_SK: {"S": s.TX_HEADER_SK}},
            ConsistentRead=True,
        )
        item: Item | None = resp.get("Item")
        return item

    def residue(self, tx_id: str, raw: Item | None) -> list[str]:
        """Protocol attributes, images and unnamed body rows left behind."""
        out = []
        for item in sorted(self.rows[DATA], key=lambda i: i["pk"]["S"]):
            left = sorted(a for a in item if a.startswith(s.RESERVED_PREFIX))
            if left:
                out.append(f"item {item['pk']['S']} keeps {left}")
        if self.rows[IMAGES]:
            out.append(f"{len(self.rows[IMAGES])} image rows left")
        named = read_record(raw).spilled_rows if raw else set()
        for row in self.rows[TX]:
            sk = row[s.TX_SK]["S"]
            if sk != s.TX_HEADER_SK and row[s.TX_PK]["S"] == tx_id and sk not in named:
                out.append(f"body row {sk} left")
        return out


def _where(exc: BaseException) -> str:
    """Where an unexpected error came from (for a RecursionError: the frames that loop)."""
    stack = traceback.extract_tb(exc.__traceback__)
    where = stack[-4:]
    if isinstance(exc, RecursionError):
        counts = Counter((f.filename, f.lineno) for f in stack)
        where = [f for f in stack if counts[(f.filename, f.lineno)] > 5][:4]
    return " < ".join(f"{f.name} ({os.path.basename(f.filename)}:{f.lineno})" for f in where[::-1])


def run_schedule(world: World, schedule: Schedule) -> Result:
    """Execute and check one schedule on the world (left reset for the next one)."""
    run = _Run(world, schedule)
    try:
        return run.execute()
    finally:
        world.reset(getattr(run, "rows", None))
