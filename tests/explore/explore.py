"""Many schedules: random ones, the exhaustive smallest configuration, shrinking, replay lines."""

from __future__ import annotations

import itertools
import random
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from .runner import Result, run_schedule
from .schedule import FAULT_KINDS, Fault, Schedule, Script, random_schedule, smaller
from .world import World

#: Re-runs a shrink may spend on one failure.
SHRINK_BUDGET = 60


def replay_line(kind: str, schedule: Schedule, mutant: str | None = None) -> str:
    args = ["python", "-m", "tests.explore", "--backend", kind, "--replay", schedule.spec()]
    if mutant:
        args += ["--mutant", mutant]
    return shlex.join(args)


@dataclass
class Finding:
    backend: str
    schedule: Schedule  #: the smallest failing schedule found
    problems: list[str]
    mutant: str | None = None

    def report(self) -> str:
        lines = [f"ANOMALY on {self.backend}: {self.problems[0]}"]
        lines += [f"    {p}" for p in self.problems[1:5]]
        lines.append("    replay: " + replay_line(self.backend, self.schedule, self.mutant))
        return "\n".join(lines)


@dataclass
class Tally:
    backend: str
    schedules: int = 0
    fired: int = 0
    seconds: float = 0.0
    findings: list[Finding] = field(default_factory=list)

    def line(self) -> str:
        rate = self.schedules / self.seconds if self.seconds else 0.0
        return (
            f"{self.backend:9} {self.schedules:6} schedules  {self.fired:6} faults fired  "
            f"{self.seconds:7.1f}s  {rate:6.1f}/s  {len(self.findings)} anomalies"
        )


def patched(mutant: str | None) -> Any:
    """The named mutant of tests/faults/mutants.py in place (no copy of the registry)."""
    if not mutant:
        return nullcontext()
    try:
        from faults.mutants import by_name  # under pytest (tests/ on the path)
    except ImportError:
        from tests.faults.mutants import by_name
    return by_name(mutant).patch()


def shrink(world: World, result: Result, budget: int = SHRINK_BUDGET) -> Result:
    """Greedily drop coordinators, requests, the fault...; keep any change that still fails."""
    best = result
    tries = 0
    improved = True
    while improved and tries < budget:
        improved = False
        for candidate in smaller(best.schedule):
            tries += 1
            again = run_schedule(world, candidate)
            if again.problems:
                best, improved = again, True
                break
            if tries >= budget:
                break
    return best


def explore(
    world: World,
    schedules: Iterator[Schedule | Result],
    *,
    mutant: str | None = None,
    stop_after: int | None = None,
    do_shrink: bool = True,
    progress: Callable[[Tally], None] | None = None,
) -> Tally:
    """Run ``schedules`` on ``world`` (or take results already run); every failure is shrunk
    and kept with its replay line."""
    tally = Tally(world.kind)
    started = time.monotonic()
    with patched(mutant):
        for item in schedules:
            result = item if isinstance(item, Result) else run_schedule(world, item)
            tally.schedules += 1
            tally.fired += result.fired
            if result.problems:
                if do_shrink:
                    result = shrink(world, result)
                finding = Finding(world.kind, result.schedule, result.problems, mutant)
                tally.findings.append(finding)
                print(finding.report(), file=sys.stderr, flush=True)
                if stop_after is not None and len(tally.findings) >= stop_after:
                    break
            if progress is not None and tally.schedules % 200 == 0:
                tally.seconds = time.monotonic() - started
                progress(tally)
    tally.seconds = time.monotonic() - started
    return tally


def random_schedules(seed: int, count: int) -> Iterator[Schedule]:
    rng = random.Random(seed)
    for _ in range(count):
        yield random_schedule(rng)


# --- systematic mode ------------------------------------------------------------------------

#: The configurations systematic mode enumerates, by name. ``smallest``: two coordinators,
#: two requests in all, each commits. ``pairs``: two coordinators with two requests each
#: (both update a and b, in opposite orders: every lock is contended), each commits.
CONFIGS: dict[str, tuple[tuple[Script, ...], ...]] = {
    "smallest": (
        (Script(("ua", "ub")), Script(())),
        (Script(("ua",)), Script(("ub",))),
        (Script(("ua",)), Script(("ua",))),
    ),
    "pairs": ((Script(("ua", "ub")), Script(("ub", "ua"))),),
}


def exhaustive(
    world: World,
    preemptions: int,
    mutant: str | None = None,
    progress: Callable[[Tally], None] | None = None,
    config: str = "smallest",
) -> Tally:
    """Every fault (participant, kind, call) x every interleaving with <= ``preemptions``
    preemptions, for each script pair of ``CONFIGS[config]``."""
    runs = _exhaustive(world, preemptions, CONFIGS[config])
    return explore(world, runs, mutant=mutant, progress=progress)


def _exhaustive(
    world: World, bound: int, configuration: tuple[tuple[Script, ...], ...]
) -> Iterator[Result]:
    for scripts in configuration:
        # c1 goes out through the asyncio client: the bound covers both drivers at once.
        base = Schedule(seed=0, policy="forced", workers=1, scripts=scripts, aio=("c1",))
        yield from _interleavings(world, run_schedule(world, base), bound)
        for owner, kind in itertools.product(base.owners, FAULT_KINDS):
            for at in itertools.count():
                first = run_schedule(world, replace(base, fault=Fault(owner, kind, at)))
                if not first.fired:
                    break  # the participant makes fewer calls than that
                yield from _interleavings(world, first, bound)


def _interleavings(world: World, first: Result, bound: int) -> Iterator[Result]:
    """Depth-first over the gate's choices from ``first`` (no forced choice), every
    prefix with at most ``bound`` preemptions; each interleaving is run once."""
    stack: list[Result | tuple[int, ...]] = [first]
    while stack:
        top = stack.pop()
        result = (
            top
            if isinstance(top, Result)
            else run_schedule(world, replace(first.schedule, pick=top))
        )
        yield result
        taken = result.choices
        for step in range(len(result.schedule.pick), len(taken)):
            index, owners = taken[step]
            for alt in range(len(owners)):
                if alt == index or owners[alt] == owners[index]:
                    continue
                new = (*(i for i, _ in taken[:step]), alt)
                if _preemptions(new, taken) <= bound:
                    stack.append(new)


def _preemptions(pick: tuple[int, ...], taken: list[tuple[int, list[str]]]) -> int:
    """Switches away from a participant that could have gone on (at the gate again)."""
    count = 0
    last: str | None = None
    for step, index in enumerate(pick):
        owners = taken[step][1] if step < len(taken) else []
        if index >= len(owners):
            break
        if last is not None and last in owners and owners[index] != last:
            count += 1
        last = owners[index]
    return count
