"""The fuzz loop: Hypothesis draws cases, each is sent both ways, and a tally says how it went."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, given, settings

from oracle.runner import Twins

from . import deviations as k
from .runner import Difference, differences, native, through_ddbtx
from .strategies import Case, cases


@dataclass(frozen=True)
class Finding:
    """A case where ddbtx did not do what DynamoDB did: every field that differs."""

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
    #: Cases where ddbtx differs from DynamoDB
    differing: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    def record(self, case: Case) -> Finding | None:
        """Send ``case`` both ways and count it; the finding if ddbtx did otherwise."""
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
        self.differing.append(finding)
        return finding

    def summary(self) -> str:
        vias = ", ".join(f"{n} {via}" for via, n in sorted(self.via.items()))
        lines = [
            f"fuzz on {self.emulator}: {self.examples} examples ({vias}) in {self.seconds:.0f} s",
            f"  agreed: {self.agreed}",
            f"  not compared (the emulator deviates from AWS): {sum(self.skipped.values())}",
            *(f"    {name}: {n}" for name, n in self.skipped.most_common()),
            f"  differences: {len(self.differing)}",
        ]
        for finding in self.differing[:10]:
            lines += ["  DIFFERS:", str(finding)]
        return "\n".join(lines)

    def passed(self) -> bool:
        return not self.differing


def fuzz(twins: Twins, emulator: str, examples: int, *, shrink: bool = False) -> Tally:
    """Run ``examples`` cases on one emulator's twins, with a fixed seed; the tally.

    ``shrink``: stop at the first difference and let Hypothesis shrink it to a
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
        assert not (shrink and finding), f"ddbtx differs:\n{finding}"

    started = time.monotonic()
    one()
    tally.seconds = time.monotonic() - started
    return tally
