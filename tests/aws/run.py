"""``make test-aws``: the differential oracle, the crash tests and a short contention run
against real DynamoDB, on uniquely prefixed on-demand tables deleted afterwards.

Emulators are not AWS (dynalite and moto each deviate in places); this runs what
matters most against the real service in your account. It needs AWS credentials
and a region from the usual places (profile, environment, SSO); without
credentials it says so in one line and exits 0. It first prints what it will run
and about how many requests that is (measured on moto, see ``--measure``), and
only runs with ``--yes`` or ``DDBTX_AWS_TESTS=1``.

Every table is named ``ddbtx-test-<random>-...``; whatever the run leaves (a
failed or interrupted test) is deleted at the end, and only tables with that
run's prefix. ``AWS_ENDPOINT_URL_DYNAMODB`` points it at another endpoint (the
runner's own tests use an emulator).

Examples
--------
$ python -m tests.aws.run                      # the plan and the request count; runs nothing
$ python -m tests.aws.run --yes                # run everything
$ DDBTX_AWS_TESTS=1 python -m tests.aws.run --only crash
$ python -m tests.aws.run --measure            # refresh the request counts, on moto

Exit status: 0 all passed (or skipped: no credentials), 1 a step failed,
2 not confirmed or not configured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
EXPECTED_FILE = Path(__file__).with_name("expected_requests.json")
CONFIRM_VARIABLE = "DDBTX_AWS_TESTS"
TABLE_PREFIX = "ddbtx-test-"


@dataclass(frozen=True)
class Step:
    """One part of the run: pytest on some test paths, or the contention run."""

    name: str
    paths: tuple[str, ...] = ()  # pytest paths, relative to the repository; () = contention

    def present(self) -> bool:
        return not self.paths or any((ROOT / p).exists() for p in self.paths)


#: By name: the steps run by default, in this order.
STEPS = {
    "oracle": Step("oracle", ("tests/oracle",)),
    "crash": Step("crash", ("tests/test_crash.py",)),
    "contention": Step("contention"),
}
#: The contention run: a bounded bank workload, so its request count is stable.
CONTENTION = {"workers": 4, "accounts": 4, "attempts": 6}

Out = Callable[[str], None]


# --- configuration -------------------------------------------------------------------


def credentials_problem() -> str | None:
    """Why this cannot run against AWS (one line), or None."""
    import boto3

    session = boto3.Session()
    if session.get_credentials() is None:
        return (
            "test-aws: skipped, no AWS credentials found (configure a profile, AWS_PROFILE, "
            "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
        )
    return None


def region() -> str | None:
    import boto3

    name: str | None = boto3.Session().region_name
    return name


def expected_requests() -> dict[str, int]:
    if not EXPECTED_FILE.exists():
        return {}
    data: dict[str, int] = json.loads(EXPECTED_FILE.read_text())
    return data


# --- counting ------------------------------------------------------------------------


@contextmanager
def counted() -> Iterator[Counter[str]]:
    """DynamoDB calls of every client made from boto3's default session meanwhile."""
    import boto3

    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def on_call(model: Any, **_: Any) -> None:
        with lock:
            counts[model.name] += 1

    boto3.setup_default_session()
    events = boto3.DEFAULT_SESSION.events  # type: ignore[union-attr]
    events.register("before-call.dynamodb", on_call)
    try:
        yield counts
    finally:
        events.unregister("before-call.dynamodb", on_call)


# --- the steps -----------------------------------------------------------------------


def run_pytest(paths: Sequence[str], prefix: str, out: Out) -> tuple[bool, int]:
    """pytest on ``paths`` against the remote backend; (passed, DynamoDB calls made)."""
    with tempfile.TemporaryDirectory() as tmp:
        count_file = Path(tmp) / "count.json"
        env = {
            **os.environ,
            "DDBTX_TEST_BACKEND": "aws",
            "DDBTX_TABLE_PREFIX": prefix,
            "DDBTX_REQUEST_COUNT_FILE": str(count_file),
            "PYTHONPATH": os.pathsep.join(
                [str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")]
            ),
        }
        args = [sys.executable, "-m", "pytest", "-p", "aws.count", "-n", "0", "-q"]
        args += ["-p", "no:cacheprovider", "--rootdir", str(ROOT), *paths]
        done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
        for line in done.stdout.strip().splitlines()[-15:]:
            out(f"    {line}")
        calls = sum(json.loads(count_file.read_text()).values()) if count_file.exists() else 0
    return done.returncode == 0, calls


def run_contention(db: Any, prefix: str, out: Out) -> tuple[bool, int]:
    """A short bank workload under both policies; (invariants held, DynamoDB calls)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # benchmarks/ is a top-level package, not installed
    from benchmarks import contention

    work = contention.Workload(seconds=None, **CONTENTION)

    def name(role: str) -> str:
        return f"{prefix}{role}-{uuid.uuid4().hex[:8]}"

    with counted() as calls:
        outcomes, invariants = contention.measure(db, work, 1, name)
    for line in contention.report(db.kind, work, outcomes, invariants).splitlines():
        out(f"    {line}")
    held = invariants.total == invariants.expected and not invariants.locks
    return held, sum(calls.values())


def delete_tables(client: Any, prefix: str) -> list[str]:
    """Delete every table whose name starts with ``prefix``; their names."""
    if not prefix.startswith(TABLE_PREFIX) or len(prefix) <= len(TABLE_PREFIX):
        raise ValueError(f"refusing to delete tables by the prefix {prefix!r}")
    names: list[str] = []
    for page in client.get_paginator("list_tables").paginate():
        names += [n for n in page["TableNames"] if n.startswith(prefix)]
    deleted = []
    for name in names:
        try:
            client.delete_table(TableName=name)
            deleted.append(name)
        except client.exceptions.ResourceNotFoundException:
            pass  # deleted meanwhile (a test's own teardown)
    # DeleteTable only starts the deletion: wait until the names are free again.
    waiter = client.get_waiter("table_not_exists")
    for name in deleted:
        waiter.wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 120})
    return deleted


# --- entry point ---------------------------------------------------------------------


def plan(steps: Sequence[Step], extra: Sequence[str], out: Out) -> None:
    expected = expected_requests()
    total, unknown = 0, []
    for step in steps:
        if not step.present():
            out(f"  {step.name:<11} {', '.join(step.paths)} not present yet: skipped")
            continue
        n = expected.get(step.name)
        what = ", ".join(step.paths) or (
            "bank workload, {workers} workers, {accounts} accounts, {attempts} transfers each"
        ).format(**CONTENTION)
        count = f"~{n:,} requests" if n else "request count not measured yet (--measure)"
        out(f"  {step.name:<11} {what}: {count}")
        if n:
            total += n
        else:
            unknown.append(step.name)
    for path in extra:
        out(f"  {'(path)':<11} {path}: request count unknown")
        unknown.append(path)
    more = f" + {', '.join(unknown)}" if unknown else ""
    out(f"expected: ~{total:,} DynamoDB requests{more} (counted on moto; on-demand billing)")


def main(argv: Sequence[str] | None = None, out: Out = print) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.aws.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--yes", action="store_true", help="run (also: DDBTX_AWS_TESTS=1)")
    parser.add_argument(
        "--only", action="append", choices=list(STEPS), help="run only this step (repeatable)"
    )
    parser.add_argument(
        "--path", action="append", default=[], help="run these pytest paths instead of the steps"
    )
    parser.add_argument(
        "--measure",
        action="store_true",
        help=f"count each step's requests on moto into {EXPECTED_FILE.name}",
    )
    args = parser.parse_args(argv)
    steps = [] if args.path and not args.only else [STEPS[n] for n in (args.only or STEPS)]
    if args.measure:
        return measure(steps, out)
    problem = credentials_problem()
    if problem:
        out(problem)
        return 0
    if region() is None:
        out("test-aws: no AWS region configured: set AWS_REGION (or a profile's region)")
        return 2
    from .backend import RemoteDynamo

    db = RemoteDynamo()
    prefix = f"{TABLE_PREFIX}{uuid.uuid4().hex[:8]}-"
    out(f"test-aws: {db.endpoint_url}, tables named {prefix}*, deleted afterwards")
    plan(steps, args.path, out)
    if not (args.yes or os.environ.get(CONFIRM_VARIABLE) == "1"):
        out(f"not run: confirm with --yes or {CONFIRM_VARIABLE}=1")
        return 2
    return execute(db, steps, args.path, prefix, out)


def execute(db: Any, steps: Sequence[Step], extra: Sequence[str], prefix: str, out: Out) -> int:
    results: dict[str, tuple[bool, int]] = {}
    try:
        for step in steps:
            if not step.present():
                continue
            out(f"{step.name}:")
            if step.paths:
                results[step.name] = run_pytest(step.paths, prefix, out)
            else:
                results[step.name] = run_contention(db, prefix, out)
        if extra:
            out("paths:")
            results["paths"] = run_pytest(extra, prefix, out)
    finally:
        deleted = delete_tables(db.client(), prefix)
        listed = f": {', '.join(deleted)}" if deleted else ""
        out(f"deleted {len(deleted)} leftover table(s){listed}")
    for name, (passed, calls) in results.items():
        out(f"  {name:<11} {'passed' if passed else 'FAILED'}, {calls:,} requests")
    return 0 if all(passed for passed, _ in results.values()) else 1


def measure(steps: Sequence[Step], out: Out) -> int:
    """Run the steps on moto (started here) and store each one's request count."""
    from ddbtx.local import LOCAL_CREDENTIALS, LocalDynamo

    from .backend import RemoteDynamo

    counts = expected_requests()
    with LocalDynamo("moto") as moto:
        saved = {k: os.environ.get(k) for k in _LOCAL_ENV}
        os.environ.update(_local_env(moto.endpoint_url, LOCAL_CREDENTIALS))
        try:
            prefix = f"{TABLE_PREFIX}{uuid.uuid4().hex[:8]}-"
            db = RemoteDynamo()
            for step in steps:
                if not step.present():
                    out(f"{step.name}: not present yet")
                    continue
                out(f"{step.name}:")
                if step.paths:
                    passed, calls = run_pytest(step.paths, prefix, out)
                else:
                    passed, calls = run_contention(db, prefix, out)
                if not passed:
                    out(f"{step.name} failed on moto: not recorded")
                    return 1
                counts[step.name] = calls
                out(f"{step.name}: {calls:,} requests")
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    EXPECTED_FILE.write_text(json.dumps(counts, indent=2, sort_keys=True) + "\n")
    return 0


_LOCAL_ENV = (
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
)


def _local_env(endpoint: str, credentials: Mapping[str, str]) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL_DYNAMODB": endpoint,
        "AWS_ACCESS_KEY_ID": credentials["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": credentials["aws_secret_access_key"],
        "AWS_DEFAULT_REGION": credentials["region_name"],
    }


if __name__ == "__main__":
    sys.exit(main())
