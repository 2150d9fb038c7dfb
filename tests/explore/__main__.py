"""``python -m tests.explore``: seeded interleavings of many coordinators on one transaction.

Examples
--------
$ python -m tests.explore --schedules 2000 --backend both    # random schedules
$ python -m tests.explore --exhaustive --backend moto       # the smallest configuration
$ python -m tests.explore --backend moto --replay 'seed=7 pol=pct3 mw=1 c0=ua:commit ...'
$ python -m tests.explore --schedules 300 --mutant blind-retry   # must report anomalies

Exit status: 0 when no anomaly is found (with ``--mutant``: when the mutant IS caught).
"""

from __future__ import annotations

import argparse
import logging
import sys

from .explore import CONFIGS, Tally, exhaustive, explore, random_schedules, replay_line
from .runner import run_schedule
from .schedule import Schedule
from .world import BACKENDS, started


def _replay(kind: str, spec: str, mutant: str | None, verbose: bool) -> Tally:
    from .explore import patched

    schedule = Schedule.parse(spec)
    with started(kind) as world, patched(mutant):
        result = run_schedule(world, schedule)
    tally = Tally(kind, schedules=1, fired=int(result.fired))
    for seen in result.seen:
        print(f"  saw: {seen.line()}")
    if verbose:
        for n, step in enumerate(result.trace):
            print(f"  {n:4} {step}")
    if result.problems:
        from .explore import Finding

        tally.findings.append(Finding(kind, schedule, result.problems, mutant))
        print(tally.findings[0].report())
    print(("FAILS: " if result.problems else "passes: ") + replay_line(kind, schedule, mutant))
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.explore", description=__doc__)
    parser.add_argument("--schedules", type=int, default=500, help="random schedules per backend")
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--exhaustive", action="store_true", help="the smallest configuration")
    parser.add_argument("--preemptions", type=int, default=2, help="exhaustive mode's bound")
    parser.add_argument(
        "--config", choices=sorted(CONFIGS), default="smallest", help="exhaustive mode's scripts"
    )
    parser.add_argument("--replay", metavar="SCHEDULE", help="run one schedule line")
    parser.add_argument("--mutant", help="a mutant of tests/faults/mutants.py in place")
    parser.add_argument("--no-shrink", action="store_true")
    parser.add_argument("--stop-after", type=int, help="stop a backend after N anomalies")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the call trace")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)  # injected faults log errors by design
    kinds = list(BACKENDS) if args.backend == "both" else [args.backend]
    tallies: list[Tally] = []
    for kind in kinds:
        if args.replay:
            tallies.append(_replay(kind, args.replay, args.mutant, args.verbose))
            continue
        with started(kind) as world:
            if args.exhaustive:
                tally = exhaustive(
                    world,
                    args.preemptions,
                    args.mutant,
                    progress=lambda t: print(t.line(), file=sys.stderr, flush=True),
                    config=args.config,
                )
            else:
                # Each backend gets its own slice of seeds: together they cover more.
                seed = args.seed * 1_000_003 + kinds.index(kind)
                tally = explore(
                    world,
                    random_schedules(seed, args.schedules),
                    mutant=args.mutant,
                    stop_after=args.stop_after,
                    do_shrink=not args.no_shrink,
                    progress=lambda t: print(t.line(), file=sys.stderr, flush=True),
                )
        print(tally.line(), flush=True)
        tallies.append(tally)
    found = sum(len(t.findings) for t in tallies)
    total = sum(t.schedules for t in tallies)
    print(f"total     {total:6} schedules  {found} anomalies")
    if args.mutant:
        return 0 if found else 1
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
