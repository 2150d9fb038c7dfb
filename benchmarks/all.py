"""Run every benchmark in turn with its default sizes.

Usage::

    python -m benchmarks            # or: python -m benchmarks.all
    python -m benchmarks --backend dynalite
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from . import coldstart, contention, large, latency, locks, requests, streams, sweep, transfers
from ._common import backend_argument

#: Every benchmark taking ``--backend``, in the order they run.
ON_EMULATORS: tuple[tuple[str, Callable[..., object]], ...] = (
    ("requests", requests.main),
    ("latency", latency.main),
    ("locks", locks.main),
    ("contention", contention.main),
    ("sweep", sweep.main),
    ("large", large.main),
)


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    backend_argument(parser)
    args = parser.parse_args(argv)
    for name, run in ON_EMULATORS:
        out(f"== benchmarks.{name} ==\n")
        run(["--backend", args.backend], out)
        out("")
    out("== benchmarks.transfers ==\n")  # one emulator: the two drivers side by side
    transfers.main(["--backend", "moto" if args.backend == "moto" else "dynalite"], out)
    out("")
    out("== benchmarks.coldstart ==\n")
    coldstart.main([], out)
    if args.backend != "dynalite":  # streams exist on moto only
        out("")
        out("== benchmarks.streams ==\n")
        streams.main([], out)


if __name__ == "__main__":
    main()
