"""Run one schedule on a :class:`World`: the participants' steps, interleaved, then checks.

Each participant is a step (a generator, as the library's protocol is) that makes
its public calls through the protocol's own steps: a coordinator ``begin``s or
``resume``s (``Opener.resume``), sends requests (``request``, ``write_many``) and
ends (``end.commit`` / ``end.rollback``); a sweeper makes one ``Sweeper.pass_step``;
an operator tries ``break_lock_step`` on each item, then ``recover_step``. The
:class:`~.interleave.Interleaver` runs them all on this thread. The end is a final
sweep on the sync API, then the invariants.
"""

from __future__ import annotations

import os
import random
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from unittest import mock

from ddbtx import TransactionManager, aio, recovery
from ddbtx import schema as s
from ddbtx._base.effects import Step
from ddbtx._stores import entry_rows
from ddbtx.chaos import Crash
from ddbtx.errors import DdbtxError, TransactionNotFoundError
from ddbtx.sweeper import Sweeper

from .interleave import Forced, Interleaver, Policy, Transport, Wait, raised
from .model import CHAIN, Item, Seen, check, read_record, request_params, with_chain
from .schedule import ITEMS, OPS, Schedule
from .world import DATA, IMAGES, TX, World

try:  # pytest puts tests/ on the path; ``python -m tests.explore`` does not
    from helpers import FakeClock, leftover, unfenced
except ImportError:  # pragma: no cover - the command-line runner
    from tests.helpers import FakeClock, leftover, unfenced

#: The sweeper rolls back a pending record unchanged for this long; a pause outlasts it.
ROLLBACK_AFTER = timedelta(seconds=60)
PAUSE_SECONDS = 61.0
#: Finished records are kept (never deleted in a schedule): the final check reads them.
KEEP = timedelta(days=30)
#: Times a participant looks for a record not written yet before it gives up.
AWAIT_TRIES = 12


@dataclass
class Result:
    schedule: Schedule
    problems: list[str] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    fired: bool = False
    choices: list[tuple[int, list[str]]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  #: every request sent, as text


@contextmanager
def _seeded_tokens(seed: int) -> Iterator[None]:
    """Transaction ids and nonces from a seeded generator, so a replay makes the same ones.

    Ids also take the fake clock's time, kept strictly increasing within a process:
    each schedule starts that count afresh, as a process of its own would.
    """
    rng = random.Random(seed)

    def token_hex(nbytes: int = 32) -> str:
        return rng.randbytes(nbytes).hex()

    with mock.patch("secrets.token_hex", token_hex), mock.patch("ddbtx._stores.record._last_ns", 0):
        yield


class _Run:
    """One schedule in progress."""

    def __init__(self, world: World, schedule: Schedule) -> None:
        self.world = world
        self.sc = schedule
        self.clock = FakeClock()
        self.policy: Policy | Forced = (
            Forced(schedule.pick)
            if schedule.pick or schedule.policy == "forced"
            else Policy(schedule.seed, schedule.policy, schedule.owners)
        )
        self.seen: list[Seen] = []
        self.problems: list[str] = []
        self.put_items: dict[str, Item] = {}
        self.rng = random.Random(schedule.seed ^ 0x5EED)
        self.tms: dict[str, Any] = {}
        self.rows: dict[str, list[Item]] | None = None

    # -- participants --------------------------------------------------------------------

    def manager(self, owner: str) -> Any:
        """``owner``'s manager: the asyncio one for a coordinator on the asyncio transport."""
        settings: dict[str, Any] = {
            "clock": self.clock.time,
            "monotonic": self.clock.monotonic,
            "lock_wait": 5.0,
            "stale_after": 3.0,
            "key_schemas": {DATA: ("pk",)},
            "rng": random.Random(f"{self.sc.seed}/{owner}"),
        }
        if owner in self.sc.aio:
            return aio.TransactionManager(self.world.aio_client, TX, IMAGES, **settings)
        return TransactionManager(
            self.world.client, TX, IMAGES, max_workers=self.sc.workers, **settings
        )

    def transport(self, owner: str) -> Transport:
        if owner in self.sc.aio:
            return Transport(self.world.aio_client, self.world.wait)
        return Transport(self.world.client)

    def note(self, obs: Seen) -> None:
        self.seen.append(obs)

    def attempt(
        self,
        owner: str,
        action: str,
        step: Step[Any],
        requests: list[tuple[str, str, str]] | tuple[()] = (),
    ) -> Step[tuple[bool, Any]]:
        """Make one public call; note what it returned (a Crash ends the participant)."""
        try:
            value = yield from step
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

    def wait_for_record(self, owner: str, action: str, make: Callable[[], Step[Any]]) -> Step[Any]:
        """Run ``make()`` until the record exists (it raises TransactionNotFoundError or
        returns None before), letting the others run in between; its value, or None."""
        for _ in range(AWAIT_TRIES):
            try:
                value = yield from make()
            except TransactionNotFoundError:
                value = None
            if value is not None:
                return (yield from self.attempt(owner, action, _given(value)))[1]
            yield Wait("await record", park=6)
        self.note(Seen(owner, action, "no record"))
        return None

    def coordinator(self, i: int) -> Step[None]:
        owner = f"c{i}"
        tm = self.tms[owner]
        script = self.sc.scripts[i]
        if i == 0:
            tx = self.tx0
        else:
            try:
                tx = yield from self.wait_for_record(
                    owner, "resume", lambda: tm.opener.resume(self.tx0.id)
                )
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
                yield from self.attempt(owner, what, tx.write_many(body), writes)
                continue
            params = request_params(name, op, pk, self.put_value(name))
            action = f"{name} {op} {pk}"
            yield from self.attempt(owner, action, tx.request(op, params), [(name, op, pk)])
        end = tx.end.commit() if script.ending == "commit" else tx.end.rollback()
        yield from self.attempt(owner, script.ending, end)

    @staticmethod
    def put_value(name: str) -> int:
        """A put's ``n``: unique per request (c2r1 -> 1021)."""
        return 1000 + 10 * int(name[1]) + int(name[3:])

    def sweeper(self) -> Step[None]:
        sweeper = Sweeper(
            self.tms["sw"],
            rollback_after=ROLLBACK_AFTER,
            delete_after=KEEP,
            data_tables=[DATA],
            persist_cursor=False,
        )
        yield from self.attempt("sw", "sweeper run", sweeper.pass_step())

    def recover(self) -> Step[None]:
        tm = self.tms["rc"]

        def probe() -> Step[Any]:
            # An operator who finds the items locked tries break_lock on each first: a
            # lock of a transaction not completed (pending or decided) must be refused.
            for pk in ITEMS:
                key = {"pk": {"S": pk}}
                yield from self.attempt(
                    "rc", f"break_lock {pk}", recovery.break_lock_step(tm, DATA, key)
                )
            result = yield from recovery.recover_step(tm, self.tx0.id)
            return None if result["outcome"] == "missing" else result

        try:
            yield from self.wait_for_record("rc", "recover", probe)
        except DdbtxError as exc:
            self.note(Seen("rc", "recover", type(exc).__name__))

    # -- the whole run ----------------------------------------------------------------

    def execute(self) -> Result:
        sc = self.sc
        for owner in sc.owners:
            self.tms[owner] = self.manager(owner)
        for i, script in enumerate(sc.scripts):
            for j, r in enumerate(script.requests):
                name = f"c{i}r{j}"
                put = request_params(name, "put", r[1], self.put_value(name))
                self.put_items[name] = put["Item"]
        driver = Interleaver(
            self.policy,
            self.clock.advance,
            {owner: self.transport(owner) for owner in sc.owners},
            self.world.roles,
            sc.fault,
            rng=self.rng,
            workers=sc.workers,
            pause_seconds=PAUSE_SECONDS,
        )
        with _seeded_tokens(sc.seed):
            self.tx0 = self.tms["c0"].new_transaction()
            steps: dict[str, Step[None]] = {
                f"c{i}": self.coordinator(i) for i in range(len(sc.scripts))
            }
            if sc.sweeper:
                steps["sw"] = self.sweeper()
            if sc.recover:
                steps["rc"] = self.recover()
            driver.run(steps)
            for tm in self.tms.values():
                if isinstance(tm, TransactionManager):
                    tm.close()
        for owner, value in driver.results.items():
            error = raised(value)
            if error is not None and not isinstance(error, Crash):
                self.problems.append(f"{owner} died: {type(error).__name__}: {error}")
        if driver.problem:
            self.problems.append(driver.problem)
        raw, items, residue = self.final_sweep()
        problems = self.problems + check(raw, items, residue, self.seen, self.put_items)
        choices = self.policy.taken if isinstance(self.policy, Forced) else []
        return Result(sc, problems, self.seen, driver.trace, driver.fired, choices, driver.calls)

    # -- the end: drive everything to its end, then look ---------------------------------

    def final_sweep(self) -> tuple[Item | None, dict[str, Item], list[str]]:
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
            if raw is None or raw.get(s.TX_COMPLETED) == {"BOOL": True}:
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
            self.rows = self.world.rows()
            raw = self._header(tx_id)
            residue = self.residue(tx_id, raw)
        # the fence stays on items (docs/protocol.md): the values are compared without it
        items = {row["pk"]["S"]: unfenced(row) for row in self.rows[DATA]}
        return raw, items, residue

    def _header(self, tx_id: str) -> Item | None:
        resp = self.world.admin.get_item(
            TableName=TX,
            Key={s.TX_PK: {"S": tx_id}, s.TX_SK: {"S": s.TX_HEADER_SK}},
            ConsistentRead=True,
        )
        item: Item | None = resp.get("Item")
        if item is None or s.TX_TAIL not in item:
            return item
        # Entries in rows: the header as if it held them, read along the chain as stored.
        mine = [row for row in self.world.rows()[TX] if row[s.TX_PK]["S"] == tx_id]
        return with_chain(item, mine)

    def residue(self, tx_id: str, raw: Item | None) -> list[str]:
        """Protocol attributes, images and unnamed body rows left behind."""
        out = []
        for item in sorted(self.rows[DATA], key=lambda i: i["pk"]["S"]):
            left = leftover(item)
            if left:
                out.append(f"item {item['pk']['S']} keeps {left}")
        if self.rows[IMAGES]:
            out.append(f"{len(self.rows[IMAGES])} image rows left")
        named = read_record(raw).spilled_rows if raw else set()
        chain = set(raw.get(CHAIN, ())) if raw else set()
        for row in self.rows[TX]:
            sk = row[s.TX_SK]["S"]
            if sk == s.TX_HEADER_SK or row[s.TX_PK]["S"] != tx_id or sk in named | chain:
                continue
            # An entry row whose acceptance never came is on no chain: its TTL takes it.
            if not (sk.startswith("e#") and s.TX_TTL in row):
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
    budget = entry_rows.ROWS_AFTER
    if schedule.rows:
        entry_rows.ROWS_AFTER = 0  # the second add of every record moves it to rows
    try:
        return run.execute()
    finally:
        entry_rows.ROWS_AFTER = budget
        world.reset(getattr(run, "rows", None))


def _given(value: Any) -> Step[Any]:
    """A step that sends nothing and returns ``value``."""
    return value
    yield  # a generator: the ``yield`` makes it one
