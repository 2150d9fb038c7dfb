"""``python -m tests.faults.run``: every fault workload on both backends, and the figures table.

Examples
--------
$ python -m tests.faults.run                      # the CI size (``make faults``)
$ python -m tests.faults.run --full               # every schedule, longer histories
$ python -m tests.faults.run --backend moto --only single --seed 1 \\
      --schedule update/commit/pause/1/sweeper/0  # replay one schedule

Exit status 1 when any anomaly is found or any mutant escapes.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from ddbtx.local import KINDS

from .env import Env, started_env
from .report import Report
from .single import check_schedule, parse, run_single


@dataclass(frozen=True)
class Size:
    """How much of each workload one run does."""

    single_sample: int | None  # combinations of shape, finish, fault and rescuer (None: all)
    histories: int  # list-append histories
    history_txs: int  # transactions per history
    bank_rounds: int
    lock_rounds: int


CI = Size(single_sample=10, histories=3, history_txs=40, bank_rounds=3, lock_rounds=2)
FULL = Size(single_sample=None, histories=20, history_txs=120, bank_rounds=20, lock_rounds=10)

Workload = Callable[[Env, Report, Size], None]


def _single(env: Env, report: Report, size: Size) -> None:
    run_single(env, report, sample=size.single_sample)


def workloads() -> dict[str, Workload]:
    return {"single": _single}


def run(kinds: list[str], only: list[str], seed: int, size: Size) -> list[Report]:
    reports: list[Report] = []
    table = workloads()
    for kind in kinds:
        with started_env(kind) as env:
            for name in only:
                report = Report(name, kind, seed)
                started = time.monotonic()
                table[name](env, report, size)
                report.counts["seconds"] = round(time.monotonic() - started)
                reports.append(report)
                print(f"{kind:9} {name:10} {dict(report.counts)}", file=sys.stderr, flush=True)
    return reports


COLUMNS = (
    ("schedules", "schedules run"),
    ("histories", "histories checked"),
    ("transactions", "transactions"),
    ("lock_acquisitions", "lock acquisitions"),
)


def table(reports: list[Report]) -> str:
    """The figures as a Markdown table: one row per backend, then the total."""
    rows = []
    header = ["backend", *(label for _, label in COLUMNS)]
    header += ["anomalies (must be 0)", "mutants caught", "known core bugs (xfail)"]
    for kind in [*dict.fromkeys(r.backend for r in reports), "total"]:
        mine = [r for r in reports if kind in (r.backend, "total")]
        cells = [kind]
        cells += [str(sum(r.counts[c] for r in mine)) for c, _ in COLUMNS]
        cells.append(str(sum(len(r.anomalies) for r in mine)))
        caught = sum(r.counts["mutants_caught"] for r in mine)
        tried = sum(r.counts["mutants"] for r in mine)
        cells.append(f"{caught}/{tried}")
        cells.append(str(sum(len(cases) for r in mine for cases in r.known.values())))
        rows.append(cells)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.run", description=__doc__)
    parser.add_argument("--backend", choices=[*KINDS, "both"], default="both")
    parser.add_argument("--only", action="append", choices=sorted(workloads()))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--full", action="store_true", help="the long run: every schedule")
    parser.add_argument("--schedule", help="replay one single-fault schedule (with --only single)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)  # injected faults log errors by design
    kinds = list(KINDS) if args.backend == "both" else [args.backend]
    if args.schedule:
        return replay_schedule(kinds, args.seed, args.schedule)
    reports = run(kinds, args.only or list(workloads()), args.seed, FULL if args.full else CI)
    print(table(reports))
    bad = [r for r in reports if r.anomalies or r.counts["mutants_caught"] < r.counts["mutants"]]
    for report in bad:
        print(f"\n{report.backend} {report.workload}:\n{report.summary()}")
    for report in reports:
        for defect, cases in report.known.items():
            print(f"\nknown core bug on {report.backend}: {defect} ({len(cases)}), e.g.")
            print(f"  {cases[0]}")
    return 1 if bad else 0


def replay_schedule(kinds: list[str], seed: int, spec: str) -> int:
    schedule = parse(spec)
    failed = False
    for kind in kinds:
        with started_env(kind) as env:
            report = Report("single", kind, seed)
            check_schedule(env, schedule, report)
            known = [case for cases in report.known.values() for case in cases]
            print(f"{kind}: {len(report.anomalies)} anomalies, {len(known)} known core bug")
            for line in report.anomalies + known:
                print(line)
            failed = failed or bool(report.anomalies or known)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
