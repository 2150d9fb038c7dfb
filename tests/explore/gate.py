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


def _idle_worker(frame: FrameType) -> bool:
    """A pool worker waiting in ``work_queue.get`` (a C call: no frame of its own) with
    nothing queued: it runs nothing until a participant submits work."""
    code = frame.f_code
    if not (
        os.path.basename(code.co_filename) == "thread.py"
        and code.co_name == "_worker"
        and "work_queue.get" in linecache.getline(code.co_filename, frame.f_lineno)
    ):
        return False
    queue = frame.f_locals.get("work_queue")
    return queue is None or queue.empty()


def _waiting_on_thread(frame: FrameType) -> bool:
    """Blocked until another thread acts: futures' wait, Event.wait, Thread.join.

    A thread whose event is already set (or whose future is done) was woken and
    only waits for the CPU: it is running, not blocked.
    """
    code = frame.f_code
    if os.path.basename(code.co_filename) != "threading.py" or code.co_name not in (
        "wait",
        "_wait_for_tstate_lock",
    ):
        return False
    outer: FrameType | None = frame
    while outer is not None:
        name = os.path.basename(outer.f_code.co_filename)
        this = outer.f_locals.get("self")
        if name == "threading.py" and isinstance(this, threading.Event):
            return not this.is_set()
        if name == "_base.py" and outer.f_code.co_name in ("result", "exception"):
            return this is not None and not this.done()
        outer = outer.f_back
    return True


@dataclass
class Gate:
    """Serialises a schedule's calls: :meth:`step` is the door, :meth:`drive` the watchman.

    The thread that makes the threads still (by arriving at the gate, or by
    ending) chooses the next one itself, so a participant that the policy lets
    go on does so without a thread switch. The watchman (the thread running
    :meth:`drive`) decides only when a thread went still without telling
    (a pool worker turning idle), and reports hangs.
    """

    policy: Policy
    advance: Callable[[float], None]  #: moves the fake clock
    tick: float = 0.005  #: simulated seconds each step takes
    max_steps: int = 3000
    trace: list[str] = field(default_factory=list)
    problem: str | None = None
    dead: set[str] = field(default_factory=set)
    parked: dict[str, int] = field(default_factory=dict)  #: owner -> others' steps left
    stalled: str | None = None  #: the participant a ``stall`` fault holds, until woken
    _cv: threading.Condition = field(default_factory=threading.Condition)
    _waiting: list[Waiter] = field(default_factory=list)
    _granted: Waiter | None = None
    _seq: int = 0
    _closed: bool = False
    _open: bool = False  #: set by drive(), once every participant thread has started
    _baseline: set[threading.Thread] = field(default_factory=set)
    _done: set[threading.Thread] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._baseline = set(threading.enumerate())

    # -- the door (participant threads) -------------------------------------------

    def step(self, owner: str, label: str) -> None:
        """Wait here until this thread's next action is chosen to go."""
        with self._cv:
            if self._closed:
                raise Stopped(f"schedule stopped: {self.problem}")
            if owner in self.dead:
                raise Crash(f"{owner} is dead")
            self._seq += 1
            me = Waiter(owner, label, threading.get_ident(), self._seq)
            self._waiting.append(me)
            self._decide(trust_blocked=False)
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

    def stall(self, owner: str, steps: int) -> None:
        """Park ``owner`` until another participant is about to mark the record completed
        (see :meth:`wake_stalled`), or for ``steps`` of the others' steps."""
        with self._cv:
            self.stalled = owner
            self.parked[owner] = steps

    def wake_stalled(self, owner: str) -> bool:
        """``owner`` is about to mark the record completed: let a stalled participant
        (another, still parked) go on; whether there was one."""
        with self._cv:
            stalled = self.stalled
            if stalled is None or stalled == owner or self.parked.get(stalled, 0) <= 0:
                return False
            self.stalled = None
            self.parked[stalled] = 0
            return True

    def kill(self, owner: str) -> None:
        with self._cv:
            self.dead.add(owner)

    def leave(self) -> None:
        """The calling participant thread ends now."""
        with self._cv:
            self._done.add(threading.current_thread())
            self._decide(trust_blocked=False)
            self._cv.notify_all()

    # -- choosing ----------------------------------------------------------------------------

    def _participants(self) -> list[threading.Thread]:
        # Not filtered on is_alive(): a thread just started is not "alive" until it has
        # signalled its start, while the thread that started it waits for that signal.
        me = threading.current_thread()
        gone = self._baseline | self._done
        return [t for t in threading.enumerate() if t not in gone and t is not me]

    def _snapshot(self) -> tuple[bool, bool, tuple[int, ...]]:
        """(still, anyone left, the blocked threads), under the lock.

        Idle pool workers count as gone: they run nothing until a participant
        submits work, and that participant is then running or waiting on it.
        """
        frames = sys._current_frames()
        at_gate = {w.ident for w in self._waiting}
        blocked: list[int] = []
        left = False
        me = threading.get_ident()
        for thread in self._participants():
            ident = thread.ident or 0
            if ident in at_gate:
                left = True
                continue
            frame = frames.get(ident)
            if frame is None:  # starting or ending this instant
                return False, True, ()
            if _idle_worker(frame):
                continue
            left = True
            if ident == me or not _waiting_on_thread(frame):
                return False, True, ()
            blocked.append(ident)
        return True, left, tuple(sorted(blocked))

    def _decide(self, *, trust_blocked: bool) -> bool:
        """If every participant is still, let one waiting thread go (under the lock).

        A thread seen blocked may have been woken a moment ago; only the
        watchman, after seeing the same picture twice, trusts such a view.
        """
        if self._closed or not self._open or not self._waiting:
            return False
        if self._granted is not None and not self._granted.resumed:
            return False
        still, _, blocked = self._snapshot()
        if not still or (blocked and not trust_blocked):
            return False
        if len(self.trace) >= self.max_steps:
            self._stop(f"livelock? {self.max_steps} steps without finishing")
            return False
        waiters = sorted(self._waiting, key=lambda w: (w.owner, w.label, w.seq))
        free = [w for w in waiters if self.parked.get(w.owner, 0) <= 0]
        chosen = self.policy.choose(free or waiters, len(self.trace))
        for owner, left in list(self.parked.items()):
            self.parked[owner] = 0 if owner == chosen.owner else max(0, left - 1)
        self.trace.append(f"{chosen.owner}:{chosen.label}")
        self._waiting.remove(chosen)
        self.advance(self.tick)
        chosen.go = True
        self._granted = chosen
        self._cv.notify_all()
        return True

    def _stop(self, problem: str) -> None:
        self.problem = self.problem or problem
        self._closed = True
        self._cv.notify_all()

    # -- the watchman --------------------------------------------------------------------

    def drive(self) -> None:
        """Watch the schedule to its end: decide for silent threads, report hangs."""
        with self._cv:
            self._open = True
            last_change = time.monotonic()
            last_seen: tuple[int, tuple[int, ...]] | None = None
            while True:
                still, left, blocked = self._snapshot()
                if not left:
                    break
                seen = (len(self.trace), blocked)
                if seen != last_seen:
                    last_seen, last_change = seen, time.monotonic()
                elif still and self._decide(trust_blocked=True):
                    continue
                if time.monotonic() - last_change > HANG_SECONDS:
                    what = "every thread blocked" if still else "a thread never reached the gate"
                    self._stop(f"hang: {what} for {HANG_SECONDS:.0f}s ({len(self.trace)} steps)")
                    break
                self._cv.wait(SETTLE_SECONDS)
            # Wake anyone still waiting so the threads can end.
            self._closed = True
            self._cv.notify_all()
