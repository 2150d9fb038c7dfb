"""What a workload found: counts for the figures table, and anomalies with their replay line."""

from __future__ import annotations

import shlex
from collections import Counter
from dataclasses import dataclass, field

#: Columns of the figures table, in order.
COUNTS = ("schedules", "histories", "transactions", "lock_acquisitions")


def replay_command(backend: str, workload: str, seed: int, *extra: str) -> str:
    """The one-line command that runs exactly this case again."""
    args = ["python", "-m", "tests.faults.run", "--backend", backend, "--only", workload]
    args += ["--seed", str(seed), *extra]
    return shlex.join(args)


@dataclass
class Report:
    """Outcome of one workload on one backend."""

    workload: str
    backend: str
    seed: int
    counts: Counter[str] = field(default_factory=Counter)
    anomalies: list[str] = field(default_factory=list)
    #: Arguments every replay line of this report carries (e.g. the mutant in place).
    replay_args: tuple[str, ...] = ()
    #: The pytest node that made this report, if any: its sizes replay exactly.
    pytest_node: str | None = None

    def anomaly(self, message: str, *replay_args: str) -> None:
        replay = replay_command(
            self.backend, self.workload, self.seed, *self.replay_args, *replay_args
        )
        self.anomalies.append(f"{message}\n    replay: {replay}")

    def merge(self, other: Report) -> None:
        self.counts.update(other.counts)
        self.anomalies.extend(other.anomalies)

    def summary(self) -> str:
        shown = "\n".join(self.anomalies[:5])
        more = len(self.anomalies) - 5
        return shown + (f"\n... and {more} more" if more > 0 else "")


def assert_no_anomalies(report: Report) -> None:
    """Fail with every anomaly's replay line (and the pytest line that reran this test)."""
    rerun = f"\nrerun this test: pytest {shlex.quote(report.pytest_node or '')}"
    assert not report.anomalies, f"{len(report.anomalies)} anomalies:\n{report.summary()}{rerun}"
