"""First contact with the tooling: what `make` installs, the pinned CDK CLI, the Node note.

These read the Makefile's plan (``make -n``) and run small subprocesses; none touches
DynamoDB. The end-to-end proofs are CI steps in ``.ci/run`` (a fresh clone's
``make test``, ``make synth`` with the pinned CLI, the wheel's demo).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def make_plan(*targets: str) -> list[str]:
    """The commands ``make`` would run for ``targets`` from scratch (nothing is executed)."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    out = subprocess.run(
        # --no-print-directory: run under another make (CI's `make test`), make would add
        # "Entering/Leaving directory" lines to the plan
        [make, "-n", "-B", "--no-print-directory", *targets],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.splitlines()


def test_given_a_fresh_clone_when_setup_bootstraps_uv_then_the_system_python_is_never_changed() -> (
    None
):
    # Given a clone with nothing installed (make -B: every step runs)
    # When make plans `make setup`
    plan = make_plan("setup")

    # Then uv comes from a private venv under the project, at the pinned version
    assert any(line.startswith("python3 -m venv .tools") for line in plan)
    pinned = re.search(r"^UV_VERSION := (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert pinned is not None
    assert (
        f'.tools/bin/python -m pip install --quiet --disable-pip-version-check "uv=={pinned[1]}"'
        in plan
    )
    # And no step installs into the interpreter it was started with (PEP 668 refuses that)
    assert not [line for line in plan if re.search(r"(^|\s)python3? -m pip\b", line)]
    # And every later step uses that uv
    assert ".tools/bin/uv sync --frozen --all-extras" in plan
    assert ".tools/" in (ROOT / ".gitignore").read_text().splitlines()


def test_given_the_cdk_cli_when_pinned_then_an_exact_2x_runs_inside_the_environment() -> None:
    # Given package.json and its lock file
    pins = json.loads((ROOT / "package.json").read_text())["devDependencies"]
    locked = json.loads((ROOT / "package-lock.json").read_text())["packages"]

    # Then the CLI is an exact 2.x release (3.x rejects this app's cloud-assembly schema)
    assert re.fullmatch(r"2\.\d+\.\d+", pins["aws-cdk"])
    assert locked["node_modules/aws-cdk"]["version"] == pins["aws-cdk"]
    # And make runs that CLI, inside the uv environment, for every CDK job
    for target in ("synth", "diff", "deploy", "bootstrap", "destroy"):
        assert any(
            line.startswith(".tools/bin/uv run --frozen node_modules/.bin/cdk " + target)
            for line in make_plan(target)
        ), target
    # And synth ends by saying where the template is
    assert any("template: cdk.out/" in line for line in make_plan("synth"))


@pytest.fixture
def old_node(tmp_path: Path) -> dict[str, str]:
    """An environment whose ``node`` is an end-of-life v20 (a script printing its version)."""
    node = tmp_path / "node"
    node.write_text("#!/bin/sh\necho v20.1.0\n")
    node.chmod(node.stat().st_mode | stat.S_IEXEC)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JSII_SILENCE")}
    env["PATH"] = f"{tmp_path}{os.pathsep}{env['PATH']}"
    return env


def test_given_an_old_node_when_the_cdk_app_loads_then_one_line_replaces_the_banner(
    old_node: dict[str, str],
) -> None:
    # Given node v20 on the PATH
    # When the app's package is imported (before aws_cdk starts node)
    probe = "import os, infra; print(os.environ['JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION'])"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=old_node, capture_output=True, text=True
    )

    # Then one plain line names the version and what to use, and jsii's banner is silenced
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "note: Node.js v20.1.0 is no longer supported by the AWS CDK (it supports 22 and 24);"
        " it still runs, but use Node 22+"
    ]
    assert done.stdout.strip() == "20"
    assert "b'" not in done.stderr


def test_given_a_fresh_clone_when_the_demo_is_made_then_npm_is_not_needed() -> None:
    # Given a clone with nothing installed (make -B: every step runs)
    # When make plans `make demo`
    plan = make_plan("demo")

    # Then it installs ddbtx's demo extra alone, at the locked versions, in a venv of its
    # own (not the dev environment), runs the demo (on moto) there, and never npm
    assert not [line for line in plan if "uv sync" in line]
    assert any("uv export" in line and "--frozen --extra demo" in line for line in plan)
    assert plan[-1] == ".tools/demo-venv/bin/ddbtx demo"
    assert not [line for line in plan if "npm" in line]


def test_given_the_lint_job_then_mypy_checks_the_core_the_cdk_app_and_both_handlers() -> None:
    # Given mypy's configuration and the lint job's plan
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    plan = " ".join(make_plan("lint"))

    # Then mypy --strict covers the core, infra/ and app.py, and each handler on its own
    assert config["strict"] is True
    assert set(config["files"]) == {"shared/python/ddbtx", "infra", "app.py"}
    assert (
        'for handler in functions/*/handler.py; do .tools/bin/uv run --frozen mypy "$handler"'
        in (plan)
    )
    assert sorted(p.parent.name for p in (ROOT / "functions").glob("*/handler.py")) == [
        "recovery",
        "sweeper",
    ]


#: Where a `pip install 'ddbtx[...]'` could be written for a user to copy.
USER_FACING = ("README.md", "docs", "shared/python/ddbtx", "Makefile", ".ci/run", "functions")


def test_given_the_package_is_not_published_then_no_text_says_pip_install_from_the_index() -> None:
    # Given ddbtx is not on PyPI (a checkout's `pip install '.[demo]'` works, or a git URL)
    texts = [
        path
        for top in USER_FACING
        for path in ([ROOT / top] if (ROOT / top).is_file() else (ROOT / top).rglob("*"))
        if path.is_file() and path.suffix in {"", ".md", ".py", ".txt", ".toml"}
    ]
    # When every user-facing text is searched for an install from the index
    wrong = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in texts
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
        # A direct reference (ddbtx[demo] @ git+https://...) installs from the repository.
        if re.search(r"pip install ['\"]?ddbtx\b(\[[^\]]*\])?+(?!\s*@)", line)
    ]
    # Then there is none
    assert len(texts) > 20
    assert wrong == []


def test_given_ci_then_it_builds_the_docs_checks_the_template_after_synth_and_tests_last() -> None:
    # Given CI's entry point
    steps = [
        line.strip().removeprefix("timed ")
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip().removeprefix("timed ").startswith("make ")
    ]
    # Then the docs are built, the template is checked once synthesized, and make test ends it
    assert "make docs" in steps
    assert steps.index("make check-template") > steps.index('make synth 2>&1 | tee "$synth_log"')
    assert steps[-1] == "make test"


# --- the core's layers and private names (make lint) ---------------------------------------

PACKAGE = ROOT / "shared" / "python" / "ddbtx"


def package_copy(tmp_path: Path, plant: dict[str, tuple[str, str]] | None = None) -> Path:
    """A copy of the core under ``tmp_path``; ``plant`` maps a module's file to (text to put
    after its ``from __future__`` line, text to append)."""
    copy = tmp_path / "ddbtx"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for name, (head, tail) in (plant or {}).items():
        path = copy / name
        text = path.read_text().replace(
            "from __future__ import annotations\n", f"from __future__ import annotations\n{head}", 1
        )
        path.write_text(text + tail)
    return copy


def lint_imports(package: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports with the project's contracts, run on the ``ddbtx`` under ``package``."""
    env = {**os.environ, "PYTHONPATH": str(package.parent), "COLUMNS": "200"}
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "lint-imports"),
            "--no-cache",
            "--config",
            str(ROOT / "pyproject.toml"),
        ],
        cwd=package.parent,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_given_the_lint_job_then_it_checks_the_layers_and_private_names() -> None:
    # Given the lint job's plan
    plan = make_plan("lint")

    # Then lint-imports runs the project's contracts on the core, and the private-name check
    assert "PYTHONPATH=shared/python .tools/bin/uv run --frozen lint-imports --no-cache" in plan
    assert ".tools/bin/uv run --frozen python -m tests.lint.private_names" in plan
    # And the contracts cover every module (exhaustive) and forbid any cycle
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    kinds = {c["type"]: c for c in config["contracts"]}
    assert kinds["layers"]["exhaustive"] is True
    assert kinds["acyclic_siblings"]["ancestors"] == ["ddbtx"]
    assert "exclude_type_checking_imports" not in config


def test_given_the_core_as_it_is_then_its_layers_hold(tmp_path: Path) -> None:
    # Given an unchanged copy of the core
    # When lint-imports checks it
    result = lint_imports(package_copy(tmp_path))

    # Then both contracts are kept
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 2 kept, 0 broken." in result.stdout


@pytest.mark.parametrize(
    "plant",
    [
        ("", "\n\ndef _planted() -> None:\n    from .. import manager  # noqa: F401\n"),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import manager\n",
            "",
        ),
    ],
    ids=["inside-a-function", "under-type-checking"],
)
def test_given_a_lower_module_importing_a_higher_one_then_lint_imports_fails_naming_it(
    tmp_path: Path, plant: tuple[str, str]
) -> None:
    # Given a copy of the core whose item steps import the manager's public module
    package = package_copy(tmp_path, {"_item_steps/lock.py": plant})

    # When lint-imports checks it
    result = lint_imports(package)

    # Then it fails: the layers are broken, and so is the no-cycle contract, each naming it
    assert result.returncode != 0
    assert "Contracts: 0 kept, 2 broken." in result.stdout
    assert "ddbtx._item_steps.lock -> ddbtx.manager" in result.stdout
    assert "._item_steps -> .manager" in result.stdout


def test_given_a_cycle_inside_one_layer_then_lint_imports_fails(tmp_path: Path) -> None:
    # Given a copy where the two CLI modules of the apps layer import each other again
    tail = "\n\ndef _planted() -> None:\n    from .. import cli  # noqa: F401\n"
    package = package_copy(tmp_path, {"_cli/progress.py": ("", tail)})

    # When lint-imports checks it
    result = lint_imports(package)

    # Then the layers allow it (one layer) but the no-cycle contract does not
    assert result.returncode != 0
    assert "Contracts: 1 kept, 1 broken." in result.stdout
    assert "._cli -> .cli" in result.stdout


def private_names(package: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.lint.private_names", str(package)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def test_given_the_core_as_it_is_then_no_module_reaches_into_private_names(
    tmp_path: Path,
) -> None:
    result = private_names(package_copy(tmp_path))
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize(
    ("plant", "named"),
    [
        (
            ("from .._item_steps.writes import _probe_value  # noqa: F401\n", ""),
            "_coordinator/transaction.py:4: imports the private name _probe_value"
            " from ddbtx._item_steps.writes",
        ),
        (
            ("", "\n\ndef _planted(tx: Any) -> Any:\n    return tx._check_pending\n"),
            "reaches into a private name: tx._check_pending",
        ),
        (
            ("", "\n\ndef _planted(lc: Any) -> Any:\n    return lc._clock\n"),
            "reaches into a private name: lc._clock (1 found, 0 allowed",
        ),
    ],
    ids=["import", "attribute", "attribute-allowed-elsewhere"],
)
def test_given_a_planted_reach_in_then_the_private_name_check_fails_naming_it(
    tmp_path: Path, plant: tuple[str, str], named: str
) -> None:
    # Given a copy of the core with one more reach-in into a private name
    package = package_copy(tmp_path, {"_coordinator/transaction.py": plant})

    # When the check runs on it
    result = private_names(package)

    # Then it fails, naming the file, the line and the name
    assert result.returncode == 1
    assert named in result.stdout
