"""One gate for every DynamoDB call of a schedule, and the seeded policy that orders them.

Threads stay real: every coordinator runs in its own thread, and the library
may run per-item steps in its own pool. Each thread that is about to send a
request (or to sleep) stops at the gate. When every live thread of the
schedule is either stopped there, finished, or blocked waiting for another
thread (a pool's futures, an idle pool worker), the controller lets exactly
one stopped thread go, chosen by the policy from the sorted waiting set, and
then waits again until everything is still. The order of calls is therefore a
function of the policy's seed alone.
"""

from __future__ import annotations

import linecache
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

from ddbtx.chaos import Crash

#: Wall seconds the gate waits for the threads to become still before it calls it a hang.
HANG_SECONDS = 30.0
#: Wall seconds a "blocked" observation must stay unchanged before it is trusted (a thread
#: woken a moment ago still shows the frame it waited in).
SETTLE_SECONDS = 0.002


class Stopped(Crash):
    """The explorer ended the schedule (hang or step budget): every coordinator dies here."""


@dataclass
class Waiter:
    owner: str  #: the participant ("c0".."c3", "sweeper", "recover")
    label: str  #: what it is about to do, e.g. "UpdateItem data a"
    ident: int  #: the thread
    seq: int  #: arrival order (ties only)
    go: bool = False
    resumed: bool = False


class Policy:
    """Chooses the next call: uniformly at random, or PCT (priority change points).

    PCT gives every participant a random priority and always runs the highest
    one that is waiting; at ``depth - 1`` random steps the running participant
    drops to the lowest priority. Long runs of one coordinator while the others
    wait (a stall) come out naturally; bugs needing ``depth`` ordering
    constraints are found with probability about 1/(n * k^(depth-1)).
    """

    def __init__(self, seed: int, kind: str, owners: list[str], horizon: int = 150) -> None:
        if kind != "rand" and not (kind.startswith("pct") and kind[3:].isdigit()):
            raise ValueError(f"policy must be 'rand' or 'pct<depth>', not {kind!r}")
        self.kind = kind
        self.rng = random.Random(seed)
        shuffled = owners[:]
        self.rng.shuffle(shuffled)
        self.priority = {owner: float(n) for n, owner in enumerate(shuffled)}
        depth = int(kind[3:]) if kind.startswith("pct") else 1
        self.change_points = set(self.rng.sample(range(horizon), max(0, depth - 1)))

    def choose(self, waiters: list[Waiter], step: int) -> Waiter:
        if self.kind == "rand":
            return self.rng.choice(waiters)
        top = max(self.priority.get(w.owner, -1.0) for w in waiters)
        mine = [w for w in waiters if self.priority.get(w.owner, -1.0) == top]
        chosen = self.rng.choice(mine)
        if step in self.change_points:
            self.priority[chosen.owner] = min(self.priority.values()) - 1.0
        return chosen


def _blocked(frame: FrameType | None) -> bool:
    """Is a thread (not at the gate) waiting for another thread, rather than running?"""
    if frame is None:
        return True
    code = frame.f_code
    base = os.path.basename(code.co_filename)
    if base == "threading.py" and code.co_name in ("wait", "_wait_for_tstate_lock"):
        return True  # futures' wait, Event.wait, Thread.join
    if base == "thread.py" and code.co_name == "_worker":
        # An idle pool worker sits in ``work_queue.get`` (a C call: no frame of its own).
        return "work_queue.get" in linecache.getline(code.co_filename, frame.f_lineno)
    return False


@dataclass
class Gate:
    """Serialises a schedule's calls; :meth:`drive` is the controller, :meth:`step` the door."""

    policy: Policy
    advance: Callable[[float], None]  #: moves the fake clock
    tick: float = 0.005  #: simulated seconds each step takes
    max_steps: int = 3000
    trace: list[str] = field(default_factory=list)
    problem: str | None = None
    dead: set[str] = field(default_factory=set)
    parked: dict[str, int] = field(default_factory=dict)  #: owner -> others' steps left
    _cv: threading.Condition = field(default_factory=threading.Condition)
    _waiting: list[Waiter] = field(default_factory=list)
    _seq: int = 0
    _closed: bool = False
    _baseline: set[threading.Thread] = field(default_factory=set)
    _done: set[threading.Thread] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._baseline = set(threading.enumerate())

    # -- the door (participant threads) -------------------------------------------

    def step(self, owner: str, label: str) -> None:
        """Wait here until the controller lets this thread's next action go."""
        with self._cv:
            if self._closed:
                raise Stopped(f"schedule stopped: {self.problem}")
            if owner in self.dead:
                raise Crash(f"{owner} is dead")
            self._seq += 1
            me = Waiter(owner, label, threading.get_ident(), self._seq)
            self._waiting.append(me)
            self._cv.notify_all()
            while not me.go:
                if self._closed:
                    self._waiting.remove(me)
                    raise Stopped(f"schedule stopped: {self.problem}")
                self._cv.wait()
            me.resumed = True
            self._cv.notify_all()

    def park(self, owner: str, steps: int) -> None:
        """Keep ``owner`` waiting while others can run, for up to ``steps`` of their steps."""
        with self._cv:
            self.parked[owner] = steps

    def leave(self) -> None:
        """The calling participant thread ends now: the controller need not wait for it."""
        with self._cv:
            self._done.add(threading.current_thread())
            self._cv.notify_all()

    def kill(self, owner: str) -> None:
        with self._cv:
            self.dead.add(owner)

    # -- the controller -----------------------------------------------------------------

    def _participants(self) -> list[threading.Thread]:
        me = threading.current_thread()
        gone = self._baseline | self._done
        return [t for t in threading.enumerate() if t not in gone and t is not me and t.is_alive()]

    def _snapshot(self) -> tuple[bool, bool, tuple[int, ...]]:
        """(still, anyone alive, the blocked threads) under the lock."""
        frames = sys._current_frames()
        at_gate = {w.ident for w in self._waiting}
        blocked: list[int] = []
        alive = False
        for thread in self._participants():
            alive = True
            ident = thread.ident or 0
            if ident in at_gate:
                continue
            if not _blocked(frames.get(ident)):
                return False, True, ()
            blocked.append(ident)
        return True, alive, tuple(sorted(blocked))

    def _settle(self) -> bool:
        """Wait until every participant is still; False when they have all finished."""
        started = time.monotonic()
        previous: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        while True:
            still, alive, blocked = self._snapshot()
            if not alive:
                return False
            if still:
                seen = (blocked, tuple(sorted(w.seq for w in self._waiting)))
                if not blocked or seen == previous:
                    if self._waiting:
                        return True
                    # Everyone waits on someone and no one is at the gate: a deadlock.
                    if time.monotonic() - started > HANG_SECONDS:
                        self._stop("hang: every thread blocked, none at the gate")
                        return False
                previous = seen
                self._cv.wait(SETTLE_SECONDS)
                continue
            previous = None
            if time.monotonic() - started > HANG_SECONDS:
                self._stop(f"hang: a thread ran for {HANG_SECONDS:.0f}s without reaching the gate")
                return False
            # Arrivals and finished coordinators notify; an idle pool worker does not.
            self._cv.wait(0.005)

    def _stop(self, problem: str) -> None:
        self.problem = self.problem or problem
        self._closed = True
        self._cv.notify_all()

    def drive(self) -> None:
        """Run the schedule to its end, one call at a time."""
        with self._cv:
            while self._settle():
                if len(self.trace) >= self.max_steps:
                    self._stop(f"livelock? {self.max_steps} steps without finishing")
                    continue
                waiters = sorted(self._waiting, key=lambda w: (w.owner, w.label, w.seq))
                free = [w for w in waiters if self.parked.get(w.owner, 0) <= 0]
                chosen = self.policy.choose(free or waiters, len(self.trace))
                for owner, left in list(self.parked.items()):
                    self.parked[owner] = 0 if owner == chosen.owner else max(0, left - 1)
                self.trace.append(f"{chosen.owner}:{chosen.label}")
                self._waiting.remove(chosen)
                self.advance(self.tick)
                chosen.go = True
                self._cv.notify_all()
                started = time.monotonic()
                while not chosen.resumed and not self._closed:
                    if time.monotonic() - started > HANG_SECONDS:
                        self._stop("hang: a released thread never resumed")
                    self._cv.wait(0.01)
            # Wake anyone still waiting so the threads can end.
            self._closed = True
            self._cv.notify_all()
