"""Cold start: what ``import ddbtx`` pulls in, and how long it takes next to boto3.

Every figure comes from a fresh interpreter (a subprocess), so nothing is
cached in ``sys.modules``. A module counts as third-party when its top-level
package is neither in the standard library nor ddbtx itself; boto3's own
dependencies (botocore, jmespath, ...) are found by importing boto3 alone.

Usage::

    python -m benchmarks.coldstart                  # 5 runs per figure
    python -m benchmarks.coldstart --runs 3
"""

from __future__ import annotations

import argparse
import json
import pkgutil
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import ddbtx

from ._common import render

#: Modules that exist for development or the CLI extra, not for the Lambda layer.
NOT_IN_LAYER = frozenset({"ddbtx.local", "ddbtx.cli"})

_PROBE = """
import json, sys, time
for name in {before!r}:
    __import__(name)
start = time.perf_counter()
for name in {names!r}:
    __import__(name)
took = time.perf_counter() - start
print(json.dumps({{"seconds": took, "modules": sorted(sys.modules)}}))
"""


def probe(names: Sequence[str], before: Sequence[str] = ()) -> tuple[float, set[str]]:
    """Import ``names`` (after ``before``) in a fresh interpreter: seconds and modules."""
    code = _PROBE.format(names=list(names), before=list(before))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(done.stdout)
    return float(result["seconds"]), set(result["modules"])


def top_level(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def third_party(modules: set[str]) -> set[str]:
    stdlib = set(sys.stdlib_module_names) | {"__main__", "__mp_main__", "ddbtx"}
    return {m for m in top_level(modules) if m not in stdlib and not m.startswith("_")}


def layer_modules() -> list[str]:
    """Every ddbtx module that ships in the Lambda layer."""
    found = ["ddbtx"]
    for info in pkgutil.walk_packages(ddbtx.__path__, "ddbtx."):
        if info.name not in NOT_IN_LAYER:
            found.append(info.name)
    return sorted(found)


def layer_beyond_boto3() -> set[str]:
    """Third-party packages beyond boto3 and its dependencies that the whole layer loads."""
    _, boto3_modules = probe(["boto3"])
    _, modules = probe(layer_modules())
    return third_party(modules) - third_party(boto3_modules)


@dataclass(frozen=True)
class Imports:
    module: str
    third_party: set[str]
    beyond_boto3: set[str]


def check_imports(boto3_closure: set[str]) -> list[Imports]:
    out = []
    for name in layer_modules():
        _, modules = probe([name])
        extra = third_party(modules)
        out.append(Imports(name, extra, extra - boto3_closure))
    return out


@dataclass(frozen=True)
class ImportTime:
    label: str
    median_ms: float
    runs: list[float]


def time_import(
    label: str, names: Sequence[str], runs: int, before: Sequence[str] = ()
) -> ImportTime:
    seconds = [probe(names, before)[0] * 1000 for _ in range(runs)]
    return ImportTime(label, statistics.median(seconds), seconds)


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> list[Imports]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.coldstart",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters per figure")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    _, boto3_modules = probe(["boto3"])
    boto3_closure = third_party(boto3_modules)
    imports = check_imports(boto3_closure)
    rows = [
        [
            i.module,
            ", ".join(sorted(i.third_party)) or "-",
            ", ".join(sorted(i.beyond_boto3)) or "-",
        ]
        for i in imports
    ]
    out(
        render(
            "Third-party packages imported by each ddbtx module (fresh interpreter)",
            ["module", "third-party top-level packages", "beyond boto3 and its dependencies"],
            rows,
        )
    )
    out(f"boto3 and its dependencies: {', '.join(sorted(boto3_closure))}\n")
    times = [
        time_import("import boto3", ["boto3"], args.runs),
        time_import("import ddbtx", ["ddbtx"], args.runs),
        time_import("import ddbtx, ddbtx.locks", ["ddbtx", "ddbtx.locks"], args.runs),
        time_import("import ddbtx after boto3", ["ddbtx", "ddbtx.locks"], args.runs, ["boto3"]),
    ]
    base = times[0].median_ms
    out(
        render(
            f"Import time, median of {args.runs} fresh interpreters",
            ["import", "median ms", "vs import boto3", "runs (ms)"],
            [
                [
                    t.label,
                    f"{t.median_ms:.1f}",
                    f"{t.median_ms / base:.2f}x",
                    " ".join(f"{r:.0f}" for r in t.runs),
                ]
                for t in times
            ],
        )
    )
    out(
        "(import ddbtx loads botocore's exception module but not boto3; "
        "a Lambda handler imports boto3 anyway, so its extra cost is the last row)\n"
    )
    return imports


if __name__ == "__main__":
    main()
