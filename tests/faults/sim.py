"""Concurrent coordinators with crashes, pauses and skewed clocks, and sweepers running among them.

Each simulated process is a thread with its own coordinator (its own client and
clock offset of up to twice the rollback age either way); with ``aio``, about half
of them are asyncio coordinators (``ddbtx.aio`` on an aiobotocore client of their
own, run on the shared event loop), so sync and asyncio coordinators contend for
the same items. Before each
transaction a seeded choice may arm a crash (before, after, or a lost response)
or a pause at one of its next calls; a crashed coordinator is replaced by a
fresh one, as a restarted process would be. Every few transactions two
sweepers run at once, concurrently with the live coordinators.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from ddbtx import Transaction, TransactionManager
from ddbtx.chaos import Crash
from ddbtx.errors import DdbtxError, TransactionCommittedError
from ddbtx.sweeper import Sweeper

from .env import ROLLBACK_AGE, Env, event_loop
from .history import FAIL, INFO, OK
from .inject import Fault

T = TypeVar("T")

#: Transactions between two rounds of the concurrent sweepers.
SWEEP_EVERY = 6
#: The share of processes on the asyncio driver when a simulation mixes both.
AIO_SHARE = 0.5


def janitor(env: Env, tm: TransactionManager, *, rollback_after: float = ROLLBACK_AGE) -> Sweeper:
    """The sweeper Lambda's core, on this environment's tables, without a persisted cursor."""
    return Sweeper(
        tm,
        rollback_after=timedelta(seconds=rollback_after),
        delete_after=timedelta(0),
        decided_grace=timedelta(0),
        data_tables=[env.data_table],
        persist_cursor=False,
        safety_margin=0.0,
    )


class Process:
    """One simulated process: a coordinator that may crash and be restarted."""

    def __init__(self, sim: Simulation, number: int) -> None:
        self.sim = sim
        self.number = number
        self.rng = random.Random(sim.seed * 1000 + number)
        self.offset = self.rng.uniform(-2 * ROLLBACK_AGE, 2 * ROLLBACK_AGE) if sim.skew else 0.0
        # Drawn apart from ``rng``: a history's other choices stay as they were without aio.
        on_aio = random.Random(sim.seed * 7919 + number).random() < AIO_SHARE
        self.driver = "aio" if sim.aio and on_aio else "sync"
        self.tm: Any = None
        self.tm = self.restart()

    def restart(self) -> Any:
        """A fresh coordinator for this process, with no memory (after a crash): a
        ``TransactionManager``, or for an asyncio process ``ddbtx.aio``'s behind sync calls."""
        env = self.sim.env
        rng = random.Random(self.rng.random())
        if self.driver == "sync":
            return env.coordinator(offset=self.offset, client=env.client(fresh=True), rng=rng)
        if self.tm is not None:
            event_loop().discard(self.tm.client)  # the dead process's connections go with it
        return env.aio_coordinator(offset=self.offset, fresh=True, rng=rng)

    def arm(self) -> Fault | None:
        """A seeded draw: a crash (before, after, or a lost answer) or a pause, or nothing."""
        draw = self.rng.random()
        at = self.rng.randrange(12)
        if draw < self.sim.crash_rate:
            kind = self.rng.choice(("before", "after", "lost"))
            return Fault(self.tm.client, kind, at, self.sim.pause, stay_dead=True)
        if draw < self.sim.crash_rate + self.sim.pause_rate:
            return Fault(self.tm.client, "pause", at, self.sim.pause)
        return None

    def transact(self, body: Callable[[Transaction], T]) -> tuple[str, T | None]:
        """Run ``body`` then commit, under a possible fault; (ok | fail | info, body's result)."""
        fault = self.arm()
        tx = self.tm.begin()
        result: T | None = None
        try:
            result = body(tx)
            tx.commit()
            status = OK
        except Crash:
            status = INFO
        except DdbtxError:
            status = self.resolve(tx)
        finally:
            if fault is not None:
                fault.close()
        if status == INFO:
            self.tm = self.restart()  # the process died: a new one starts with no memory
        else:
            self.sim.counts["transactions"] += 1
        self.sim.tick()
        return status, result

    def resolve(self, tx: Transaction) -> str:
        """After an error, roll back: the outcome is then known (or the process died)."""
        try:
            tx.rollback()
            return FAIL
        except TransactionCommittedError:
            return OK
        except (DdbtxError, Crash):
            return INFO


class Simulation:
    """Processes, a shared simulated clock, and the sweepers that run between them."""

    def __init__(
        self,
        env: Env,
        seed: int,
        *,
        processes: int = 3,
        crash_rate: float = 0.1,
        pause_rate: float = 0.05,
        skew: bool = True,
        aio: bool = False,
    ) -> None:
        self.env = env
        self.aio = aio
        self.seed = seed
        self.crash_rate = crash_rate
        self.pause_rate = pause_rate
        self.skew = skew
        self.counts: dict[str, int] = {"transactions": 0, "sweeps": 0}
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._done = 0
        self._round = threading.Condition()
        self._rounds_due = 0
        self._stop = False
        self.processes = [Process(self, n) for n in range(processes)]

    # -- the world moving on ----------------------------------------------------------

    def pause(self) -> None:
        """A process sleeps past the rollback age; a sweeper runs meanwhile."""
        self.env.clock.advance(3 * ROLLBACK_AGE)
        self._sweep_once()

    def tick(self) -> None:
        with self._lock:
            self._done += 1
            due = self._done % SWEEP_EVERY == 0
        self.env.clock.advance(0.5)
        if due:
            with self._round:
                self._rounds_due += 2  # two sweepers at once
                self._round.notify_all()

    def _sweep_once(self) -> None:
        sweeper = janitor(self.env, self.env.coordinator(client=self.env.client(fresh=True)))
        try:
            sweeper.run()
            with self._lock:
                self.counts["sweeps"] += 1
        except Exception as exc:  # a sweeper that fails leaves work behind: a finding
            with self._lock:
                self.errors.append(f"sweeper: {exc!r}")

    def _sweeper_loop(self) -> None:
        while True:
            with self._round:
                while self._rounds_due == 0 and not self._stop:
                    self._round.wait()
                if self._stop and self._rounds_due == 0:
                    return
                self._rounds_due -= 1
            self._sweep_once()

    # -- running -----------------------------------------------------------------

    def run(self, work: Callable[[Process], None]) -> None:
        """Run ``work`` in every process concurrently with two sweeper threads, then recover."""
        sweepers = [threading.Thread(target=self._sweeper_loop) for _ in range(2)]
        workers = [threading.Thread(target=self._guard, args=(work, p)) for p in self.processes]
        for thread in sweepers + workers:
            thread.start()
        for thread in workers:
            thread.join()
        with self._round:
            self._stop = True
            self._round.notify_all()
        for thread in sweepers:
            thread.join()
        self.recover()

    def _guard(self, work: Callable[[Process], None], process: Process) -> None:
        try:
            work(process)
        except Exception as exc:  # a process must only ever fail through ddbtx errors
            with self._lock:
                self.errors.append(f"process {process.number}: {exc!r}")

    def recover(self) -> None:
        """After the run: time passes beyond any skew, and the sweeper completes everything."""
        self.env.clock.advance(10 * ROLLBACK_AGE)
        for _ in range(2):
            self._sweep_once()
