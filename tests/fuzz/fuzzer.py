"""The fuzz loop: Hypothesis draws cases, each is sent both ways, and a tally says how it went."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, given, settings

from oracle.runner import Twins

from . import known as k
from .runner import Difference, condition_alone, differences, native, through_ddbtx
from .strategies import Case, cases


@dataclass(frozen=True)
class Finding:
    """A case whose differences no known class explains, or an example of a known class."""

    case: Case
    differences: tuple[Difference, ...]

    def __str__(self) -> str:
        return "\n".join([f"  case: {self.case!r}", *(f"    {d}" for d in self.differences)])


@dataclass
class Tally:
    """One emulator's run: how many cases, and what became of each."""

    twins: Twins = field(repr=False)
    emulator: str
    examples: int = 0
    via: Counter[str] = field(default_factory=Counter)
    agreed: int = 0
    #: Cases not compared, by the emulator's deviation from AWS
    skipped: Counter[str] = field(default_factory=Counter)
    #: Cases that differ as a known class does, by class; and one example of each
    known: Counter[str] = field(default_factory=Counter)
    examples_of: dict[str, Finding] = field(default_factory=dict)
    unknown: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    def record(self, case: Case) -> Finding | None:
        """Send ``case`` both ways and count it; the finding if no known class explains it."""
        self.examples += 1
        self.via["aio" if case.aio else "sync"] += 1
        deviation = k.unsendable(self.emulator, case)
        if deviation is not None:
            self.skipped[deviation.name] += 1
            return None
        theirs = native(self.twins, case)
        deviation = k.deviation(self.emulator, case, theirs)
        if deviation is not None:
            self.skipped[deviation.name] += 1
            return None
        ours = through_ddbtx(self.twins, case)
        deviation = k.deviation(self.emulator, case, theirs, ours)
        if deviation is not None:
            self.skipped[deviation.name] += 1
            return None
        found = differences(theirs, ours)
        if not found:
            self.agreed += 1
            return None
        finding = Finding(case, tuple(found))
        alone = condition_alone(self.twins, case) if k.wants_condition_alone(case, theirs) else None
        sides = k.Sides(theirs, ours, alone)
        explained = k.known(self.emulator, case, sides, {d.field for d in found})
        if explained is None:
            self.unknown.append(finding)
            return finding
        self.known[explained.name] += 1
        self.examples_of.setdefault(explained.name, finding)
        return None

    def never_hit(self) -> list[str]:
        """Known classes listed for this emulator that no case of the run hit."""
        return [
            c.name for c in k.KNOWN if self.emulator in c.emulators and c.name not in self.known
        ]

    def summary(self, *, strict: bool) -> str:
        vias = ", ".join(f"{n} {via}" for via, n in sorted(self.via.items()))
        lines = [
            f"fuzz on {self.emulator}: {self.examples} examples ({vias}) in {self.seconds:.0f} s",
            f"  agreed: {self.agreed}",
            f"  not compared (the emulator deviates from AWS): {sum(self.skipped.values())}",
            *(f"    {name}: {n}" for name, n in self.skipped.most_common()),
            f"  known differences: {sum(self.known.values())}",
            *(f"    {name} ({_fields(name)}): {n}" for name, n in self.known.most_common()),
            f"  unknown differences: {len(self.unknown)}",
        ]
        missed = self.never_hit()
        if missed:
            verdict = "fails the run" if strict else "not strict at this budget"
            lines.append(f"  known classes never hit ({verdict}): {', '.join(missed)}")
        for name, finding in self.examples_of.items():
            lines += [f"  example of {name}:", str(finding)]
        for finding in self.unknown[:10]:
            lines += ["  UNKNOWN:", str(finding)]
        return "\n".join(lines)

    def passed(self, *, strict: bool) -> bool:
        return not self.unknown and not (strict and self.never_hit())


def _fields(name: str) -> str:
    """What a known class may differ in: "message", or more (a real difference)."""
    (known,) = (c for c in k.KNOWN if c.name == name)
    return ", ".join(sorted(known.fields))


def fuzz(twins: Twins, emulator: str, examples: int, *, shrink: bool = False) -> Tally:
    """Run ``examples`` cases on one emulator's twins, with a fixed seed; the tally.

    ``shrink``: stop at the first unknown difference and let Hypothesis shrink it to a
    minimal case (the falsifying example it prints); else every case runs and counts.
    """
    tally = Tally(twins, emulator)
    phases = (Phase.explicit, Phase.generate, Phase.shrink) if shrink else (Phase.generate,)

    @settings(
        max_examples=examples,
        derandomize=True,
        deadline=None,
        database=None,
        phases=phases,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )
    @given(cases())
    def one(case: Case) -> None:
        finding = tally.record(case)
        assert not (shrink and finding), f"unknown difference:\n{finding}"

    started = time.monotonic()
    one()
    tally.seconds = time.monotonic() - started
    return tally
