"""The explorer's driver: many protocol steps interleaved on one thread, in a seeded order.

The library's protocol is steps (:mod:`ddbtx._base.effects`): generators that yield a
``Call``, a ``Sleep`` or a ``Gather`` and are sent the answer. The sync driver
runs one step on a blocking client and a pool, the asyncio driver as tasks; this
one holds every participant's :class:`~ddbtx._base.effects.Run` at once. Each run that
waits on a call (or a pause) is a *waiter*; the policy picks one, the driver
performs that one effect and resumes that run, and picks again. A ``Gather``
becomes child runs of the same participant, interleaved like the rest.

Nothing here waits for threads to go still: there are no threads, no wall clock
and no settle delay, so a seed gives the same sequence of calls, byte for byte,
every time. Faults are the driver's to inject as it performs a call (crash before
or after it, an answer lost and the request resent, a pause, a stall, late copies of
earlier writes), so no client hook is involved, and a call goes out through boto3 or
aiobotocore alike
(:func:`ddbtx._base.drive.perform`, the one both drivers use).
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from ddbtx import schema as s
from ddbtx._base.drive import perform
from ddbtx._base.effects import Call, Gather, Run, Sleep, Step, first_failure
from ddbtx.chaos import Crash

from .schedule import Fault

#: Others' steps a stalled participant waits at most.
STALL_STEPS = 400
#: Late copies one ``copy`` fault delivers at most.
MAX_COPIES = 3
#: The calls a late copy may repeat: every write.
WRITES = frozenset(
    {"put_item", "update_item", "delete_item", "batch_write_item", "transact_write_items"}
)


class Stopped(Crash):
    """The explorer ended the schedule (its step budget): every participant dies here."""


@dataclass(frozen=True)
class Wait:
    """An explorer-only effect: a participant lets the others run (``park`` of their
    steps first), e.g. while it waits for a record to appear."""

    label: str
    park: int = 0


@dataclass
class Waiter:
    owner: str  #: the participant ("c0".."c3", "sw", "rc")
    label: str  #: what it is about to do, e.g. "UpdateItem data a"
    seq: int  #: arrival order (ties only)
    strand: Strand


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


class Forced:
    """Systematic mode's policy: follow ``pick`` (indexes into the sorted waiters), then
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
class Strand:
    """One run in progress: a participant's, or one step of a participant's gather."""

    owner: str
    run: Run[Any]
    parent: Strand | None = None
    seq: int = 0  #: when it arrived at its current effect
    index: int = -1  #: the participant's call number of its current call
    attempt: int = 0  #: attempts of its current call already sent
    label: str = ""
    #: A gather in progress: its steps not started yet, and the outcome of each.
    queued: list[tuple[int, Step[Any]]] = field(default_factory=list)
    outcomes: list[Any] = field(default_factory=list)
    running: int = 0
    filling: bool = False  #: starting the gather's steps (their ends wait for it)
    slot: int = 0  #: this strand's place in its parent's outcomes


@dataclass
class Transport:
    """How a participant's calls go out: a boto3 client, or an asyncio client whose
    awaitables ``wait`` runs to their end (aiobotocore, or moto seen as one)."""

    client: Any
    wait: Callable[[Any], Any] | None = None

    def send(self, call: Call) -> Any:
        answer = perform(self.client, _no_sleep, call)
        return answer if self.wait is None else self.wait(answer)


def _no_sleep(seconds: float) -> None:  # pragma: no cover - Sleep is the driver's own
    raise AssertionError("the explorer performs pauses itself")


class Interleaver:
    """Runs participants' steps to their end, one effect at a time, as ``policy`` orders.

    Parameters
    ----------
    policy
        :class:`Policy` or :class:`Forced`.
    advance
        Moves the fake clock (``tick`` per step, a pause's seconds, a ``pause`` fault's).
    transports
        Each participant's :class:`Transport`.
    roles
        Table name -> "tx", "img" or "data", for the calls' labels.
    fault
        The schedule's one fault, or None.
    rng
        Draws a paused participant's length of pause, in steps.
    workers
        How many steps of one gather may be in progress at once (1: one after the other).
    """

    def __init__(
        self,
        policy: Policy | Forced,
        advance: Callable[[float], None],
        transports: dict[str, Transport],
        roles: dict[str, str],
        fault: Fault | None,
        *,
        rng: random.Random,
        workers: int = 1,
        pause_seconds: float = 61.0,
        tick: float = 0.005,
        max_steps: int = 3000,
    ) -> None:
        self.policy = policy
        self.advance = advance
        self.transports = transports
        self.roles = roles
        self.fault = fault
        self.rng = rng
        self.workers = workers
        self.pause_seconds = pause_seconds
        self.tick = tick
        self.max_steps = max_steps
        self.trace: list[str] = []  #: "owner:label", one per step
        self.calls: list[str] = []  #: every request sent, in order, as JSON
        self.problem: str | None = None
        self.fired = False
        self.dead: set[str] = set()
        self.parked: dict[str, int] = {}  #: owner -> others' steps left
        self.stalled: str | None = None
        self.results: dict[str, Any] = {}  #: owner -> what its step returned or raised
        self._strands: list[Strand] = []
        self._seq = 0
        self._count: dict[str, int] = {}  #: owner -> calls made (retries apart)
        #: Every write sent so far (copies apart), with its sender: what a copy repeats.
        self.writes: list[tuple[str, Call]] = []
        self.copied = False

    # -- entry -------------------------------------------------------------------------

    def run(self, participants: dict[str, Step[Any]]) -> None:
        """Drive every participant's step to its end (or the step budget)."""
        for owner, step in participants.items():
            self._start(owner, step, None, 0)
        while self._strands:
            waiters = self._waiters()
            if len(self.trace) >= self.max_steps or not waiters:
                self.problem = (
                    f"livelock? {self.max_steps} steps without finishing"
                    if waiters
                    else "deadlock: every strand waits on a gather"
                )
                self._abandon()
                return
            free = [w for w in waiters if self.parked.get(w.owner, 0) <= 0]
            chosen = self.policy.choose(free or waiters, len(self.trace))
            for owner, left in list(self.parked.items()):
                self.parked[owner] = 0 if owner == chosen.owner else max(0, left - 1)
            self.trace.append(f"{chosen.owner}:{chosen.label}")
            self.advance(self.tick)
            self._step(chosen.strand)

    def kill(self, owner: str) -> None:
        self.dead.add(owner)

    # -- strands -----------------------------------------------------------------------

    def _start(self, owner: str, step: Step[Any], parent: Strand | None, slot: int) -> None:
        try:
            run = Run(step)
        except BaseException as exc:  # the step ended before its first effect
            self._ended(owner, parent, slot, exc)
            return
        strand = Strand(owner, run, parent, slot=slot)
        self._strands.append(strand)
        self._arrive(strand)

    def _arrive(self, strand: Strand) -> None:
        """``strand`` has a new effect (or ended): note it, open a gather, or finish it."""
        run = strand.run
        if run.done:
            self._strands.remove(strand)
            self._ended(strand.owner, strand.parent, strand.slot, run.result, ok=True)
            return
        effect = run.effect
        self._seq += 1
        strand.seq, strand.attempt = self._seq, 0
        if isinstance(effect, Gather):
            strand.label = "gather"
            strand.queued = list(enumerate(effect.steps))
            strand.outcomes = [None] * len(effect.steps)
            strand.running = 0
            self._fill(strand)
        elif isinstance(effect, Call):
            strand.label = self._label(effect)
            strand.index = self._count.get(strand.owner, 0)
            self._count[strand.owner] = strand.index + 1
            self._before(strand)
        elif isinstance(effect, Sleep):
            strand.label = "sleep"
        elif isinstance(effect, Wait):
            strand.label = effect.label
            self.parked[strand.owner] = effect.park
        else:  # pragma: no cover - a new kind of effect the explorer does not know
            raise TypeError(f"unknown effect {effect!r}")

    def _fill(self, parent: Strand) -> None:
        """Start the gather's next steps, up to ``workers`` at a time; resume the parent
        once all ended."""
        limit = max(1, self.workers)
        parent.filling = True
        while parent.queued and parent.running < limit:
            slot, step = parent.queued.pop(0)
            parent.running += 1
            self._start(parent.owner, step, parent, slot)  # may end at once
        parent.filling = False
        if not parent.queued and parent.running == 0:
            outcomes = parent.outcomes
            self._resume(parent, lambda: _gathered(outcomes))

    def _ended(
        self, owner: str, parent: Strand | None, slot: int, value: Any, *, ok: bool = False
    ) -> None:
        if parent is None:
            self.results[owner] = value if ok else _Raised(value)
            return
        parent.outcomes[slot] = value
        parent.running -= 1
        if not parent.filling:
            self._fill(parent)

    def _resume(self, strand: Strand, outcome: Callable[[], Any]) -> None:
        """Resume ``strand`` with what ``outcome`` gives, or throw in what it raises."""
        try:
            with strand.run.outcome() as out:
                out.value = outcome()
        except BaseException as exc:  # the step raised it out: the strand ends
            self._strands.remove(strand)
            self._ended(strand.owner, strand.parent, strand.slot, exc)
            return
        self._arrive(strand)

    def _waiters(self) -> list[Waiter]:
        waiters = [
            Waiter(t.owner, t.label, t.seq, t)
            for t in self._strands
            if not isinstance(t.run.effect, Gather)
        ]
        return sorted(waiters, key=lambda w: (w.owner, w.label, w.seq))

    def _abandon(self) -> None:
        """Every strand dies where it waits (a step may still yield once more while
        it unwinds: it is dropped all the same)."""
        strands, self._strands = self._strands, []
        for strand in strands:
            try:
                with strand.run.outcome():
                    raise Stopped(f"schedule stopped: {self.problem}")
            except BaseException:
                pass

    # -- one step ----------------------------------------------------------------------

    def _before(self, strand: Strand) -> None:
        """A pause or a stall fault holds the participant as it arrives at its call."""
        kind = self._fault_at(strand)
        if kind == "pause":
            self.fired = True
            self.advance(self.pause_seconds)  # time passes, and the others run first
            self.parked[strand.owner] = self.rng.randint(10, 80)
        elif kind == "stall":
            self.fired = True
            self.stalled = strand.owner  # the others run until one is about to complete
            self.parked[strand.owner] = STALL_STEPS

    def _fault_at(self, strand: Strand) -> str | None:
        fault = self.fault
        if fault is None or fault.owner != strand.owner or fault.at != strand.index:
            return None
        return fault.kind

    def _step(self, strand: Strand) -> None:
        effect = strand.run.effect
        if isinstance(effect, (Sleep, Wait)):
            seconds = effect.seconds if isinstance(effect, Sleep) else 0.0
            self.advance(seconds)
            self._resume(strand, lambda: None)
            return
        assert isinstance(effect, Call)
        owner = strand.owner
        if owner in self.dead:
            self._resume(strand, _crash(f"{owner} is dead"))
            return
        kind = self._fault_at(strand)
        if strand.label.endswith(" complete") and self._wake_stalled(owner):
            # Items completed, record not yet marked: the completer dies, the stalled one
            # goes on, and the record is completed again later.
            self.kill(owner)
            self._resume(strand, _crash(f"{owner}: crash before marking the record completed"))
            return
        if kind == "before":
            self.fired = True
            self.kill(owner)
            self._resume(strand, _crash(f"{owner}: crash before call {strand.index}"))
            return
        transport = self.transports[owner]
        if kind == "copy" and not self.copied:
            # Late copies of earlier writes arrive just before this call goes out.
            self.fired = self.copied = True
            self._deliver_copies()
        if kind == "lost" and strand.attempt == 0:
            # Applied by DynamoDB, but the answer never came: the SDK sends it again,
            # and the others may run in between.
            self.fired = True
            self._send(transport, effect, strand)
            strand.attempt = 1
            self._seq += 1
            strand.seq, strand.label = self._seq, strand.label + " retry1"
            return
        if kind == "after":
            self.fired = True
            self._send(transport, effect, strand)
            self.kill(owner)
            self._resume(strand, _crash(f"{owner}: crash after call {strand.index}"))
            return
        resent = strand.attempt > 0
        self._resume(strand, lambda: self._answer(transport, effect, strand, resent))

    def _deliver_copies(self) -> None:
        """One to three earlier writes of any party, sent again verbatim, in any order:
        what a late duplicate is to DynamoDB. Their answers go nowhere."""
        if not self.writes:
            return
        for _ in range(self.rng.randint(1, MAX_COPIES)):
            owner, call = self.rng.choice(self.writes)
            params = json.dumps(call.params, sort_keys=True, default=repr)
            self.calls.append(f"{owner} copy {call.operation} {params}")
            self.trace.append(f"{owner}:copy {self._label(call)}")
            with contextlib.suppress(ClientError):
                self.transports[owner].send(Call(call.operation, copy.deepcopy(call.params)))

    def _send(self, transport: Transport, call: Call, strand: Strand) -> Any:
        params = json.dumps(call.params, sort_keys=True, default=repr)
        self.calls.append(f"{strand.owner} {call.operation} {params}")
        if call.operation in WRITES:
            self.writes.append((strand.owner, Call(call.operation, copy.deepcopy(call.params))))
        try:
            return transport.send(call)
        except ClientError as exc:
            return exc

    def _answer(self, transport: Transport, call: Call, strand: Strand, resent: bool) -> Any:
        """Send ``call``; its response, or its error raised. Marked as sent more than once
        when an earlier attempt's answer was lost (as botocore's RetryAttempts says)."""
        answer = self._send(transport, call, strand)
        response = answer.response if isinstance(answer, ClientError) else answer
        meta = response.setdefault("ResponseMetadata", {})
        meta["RetryAttempts"] = max(int(meta.get("RetryAttempts", 0)), int(resent))
        if isinstance(answer, ClientError):
            raise answer
        return answer

    def _wake_stalled(self, owner: str) -> bool:
        """``owner`` is about to mark the record completed: let a stalled participant
        (another, still parked) go on; whether there was one."""
        stalled = self.stalled
        if stalled is None or stalled == owner or self.parked.get(stalled, 0) <= 0:
            return False
        self.stalled = None
        self.parked[stalled] = 0
        return True

    def _label(self, call: Call) -> str:
        params = call.params
        table = str(params.get("TableName") or "")
        role = self.roles.get(table, "")
        name = "".join(part.capitalize() for part in call.operation.split("_"))
        text = f"{name} {role}".strip()
        names = params.get("ExpressionAttributeNames") or {}
        if role == "data":
            key = params.get("Key") or params.get("Item") or {}
            pk = key.get("pk", {}).get("S")
            if pk:
                text += f" {pk}"
        elif role == "tx" and s.TX_COMPLETED in names.values():
            text += " complete"  # marks the record completed
        return text


@dataclass(frozen=True)
class _Raised:
    """What a participant's step raised out (it did not return)."""

    error: BaseException


def raised(value: Any) -> BaseException | None:
    """The exception a participant's step raised out, or None if it returned."""
    return value.error if isinstance(value, _Raised) else None


def _gathered(outcomes: list[Any]) -> list[Any]:
    """A gather's results in order, or its first failure raised (as both drivers do)."""
    first_failure(outcomes)
    return outcomes


def _crash(message: str) -> Callable[[], Any]:
    def crash() -> Any:
        raise Crash(message)

    return crash
