"""``python -m tests.faults.run``: every fault workload on both backends, and the figures table.

Examples
--------
$ python -m tests.faults.run                      # the CI size (``make faults``)
$ python -m tests.faults.run --full               # every schedule, longer histories
$ python -m tests.faults.run --backend moto --only single --seed 1 \\
      --schedule update/commit/pause/1/sweeper/0  # replay one schedule

Exit status 1 when any anomaly is found or any mutant escapes. Every random
choice is seeded; the concurrent workloads' thread interleavings still vary
between runs, so their replay reruns the same seeded plan.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ddbtx.local import KINDS

from .bank import run_bank
from .env import Env, started_env
from .listappend import run_history, run_list_append
from .lockload import run_locks
from .mutants import MUTANTS, by_name, run_mutants
from .report import Report
from .single import check_schedule, parse, run_single


@dataclass(frozen=True)
class Size:
    """How much of each workload one run does."""

    single_sample: int | None  # combinations of shape, ending, fault and rescuer (None: all)
    histories: int  # list-append histories
    history_txs: int  # transactions per process in each list-append history
    bank_runs: int
    bank_rounds: int  # transactions per process in each bank run
    lock_rounds: int  # acquisitions per process in each lock run


CI = Size(single_sample=10, histories=6, history_txs=40, bank_runs=1, bank_rounds=20, lock_rounds=8)
FULL = Size(
    single_sample=None, histories=20, history_txs=60, bank_runs=10, bank_rounds=40, lock_rounds=40
)


@dataclass(frozen=True)
class Replay:
    """Narrowing to one case, from a replay line."""

    schedule: str | None = None
    history_seed: int | None = None
    mutant: str | None = None


Workload = Callable[[Env, Report, Size, Replay], None]


def _single(env: Env, report: Report, size: Size, only: Replay) -> None:
    if only.schedule:
        check_schedule(env, parse(only.schedule), report)
        return
    run_single(env, report, sample=size.single_sample)


def _list_append(env: Env, report: Report, size: Size, only: Replay) -> None:
    if only.history_seed is not None:
        run_history(env, report, only.history_seed, size.history_txs, **LIST_APPEND_FAULTS)
        return
    run_list_append(
        env, report, histories=size.histories, txns=size.history_txs, **LIST_APPEND_FAULTS
    )


#: Fewer pauses past the rollback age than the bank's (each rolls back every pending
#: transaction): histories that commit more, so each checks more.
LIST_APPEND_FAULTS = {"crash_rate": 0.06, "pause_rate": 0.01}


def _bank(env: Env, report: Report, size: Size, only: Replay) -> None:
    seeds = [only.history_seed] if only.history_seed is not None else None
    for seed in seeds or [report.seed * 10_000 + n for n in range(size.bank_runs)]:
        run_bank(env, report, rounds=size.bank_rounds, seed=seed)


def _locks(env: Env, report: Report, size: Size, only: Replay) -> None:
    run_locks(env, report, rounds=size.lock_rounds, seed=only.history_seed)


def _mutants(env: Env, report: Report, size: Size, only: Replay) -> None:
    run_mutants(env, report, [only.mutant] if only.mutant else None)


WORKLOADS: dict[str, Workload] = {
    "single": _single,
    "bank": _bank,
    "listappend": _list_append,
    "locks": _locks,
    "mutants": _mutants,
}


def run(kinds: list[str], only: list[str], seed: int, size: Size, narrow: Replay) -> list[Report]:
    reports: list[Report] = []
    extra = ("--full",) if size is FULL else ()
    for kind in kinds:
        with started_env(kind) as env:
            for name in only:
                report = Report(name, kind, seed, replay_args=extra)
                started = time.monotonic()
                if narrow.mutant and name != "mutants":
                    with by_name(narrow.mutant).patch():
                        WORKLOADS[name](env, report, size, narrow)
                else:
                    WORKLOADS[name](env, report, size, narrow)
                elapsed = round(time.monotonic() - started)
                print(f"{kind:9} {name:10} {elapsed:5}s {dict(report.counts)}", file=sys.stderr)
                reports.append(report)
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
    header += ["anomalies (must be 0)", "mutants caught"]
    for kind in [*dict.fromkeys(r.backend for r in reports), "total"]:
        mine = [r for r in reports if kind in (r.backend, "total")]
        cells = [kind]
        cells += [str(sum(r.counts[c] for r in mine)) for c, _ in COLUMNS]
        cells.append(str(sum(len(r.anomalies) for r in mine)))
        caught = sum(r.counts["mutants_caught"] for r in mine)
        tried = sum(r.counts["mutants"] for r in mine)
        cells.append(f"{caught}/{tried}")
        rows.append(cells)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.run", description=__doc__)
    parser.add_argument("--backend", choices=[*KINDS, "both"], default="both")
    parser.add_argument("--only", action="append", choices=sorted(WORKLOADS))
    parser.add_argument(
        "--skip", action="append", default=[], choices=sorted(WORKLOADS), help="leave one out"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--full", action="store_true", help="the long run: every schedule")
    parser.add_argument("--schedule", help="replay one single-fault schedule")
    parser.add_argument("--history-seed", type=int, help="replay one bank/list-append/lock run")
    parser.add_argument("--mutant", choices=[m.name for m in MUTANTS], help="run under a mutant")
    parser.add_argument("--histories", type=int, help="list-append histories (default: the size's)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)  # injected faults log errors by design
    kinds = list(KINDS) if args.backend == "both" else [args.backend]
    narrow = Replay(args.schedule, args.history_seed, args.mutant)
    size = FULL if args.full else CI
    if args.histories is not None:
        if args.histories < 1:
            parser.error("--histories must be at least 1")
        size = replace(size, histories=args.histories)
    chosen = [w for w in args.only or list(WORKLOADS) if w not in args.skip]
    reports = run(kinds, chosen, args.seed, size, narrow)
    print(table(reports))
    escaped = [r for r in reports if r.counts["mutants_caught"] < r.counts["mutants"]]
    bad = [r for r in reports if r.anomalies] + escaped
    for report in reports:
        if report.anomalies:
            print(f"\n{report.backend} {report.workload}:\n{report.summary()}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
