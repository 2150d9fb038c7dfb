"""``python app.py`` synthesizes offline; cdk.json pins the installed CDK's feature flags;
the stack reports what an operator needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

import aws_cdk
import pytest
from cdk_support import ROOT, Synth, render
from infra.assembly import build_app

#: The session-cached synth fixtures (a plugin rather than a conftest; see there).
pytest_plugins = ("cdk_fixtures",)


def recommended_flags() -> dict[str, object]:
    """The feature flags ``cdk init`` would write for the installed aws-cdk-lib."""
    version = metadata.version("aws-cdk-lib")
    bundle = Path(aws_cdk.__file__).parent / "_jsii" / f"aws-cdk-lib@{version}.jsii.tgz"
    with tarfile.open(bundle) as tar:
        member = tar.extractfile("package/recommended-feature-flags.json")
        assert member is not None
        flags: dict[str, object] = json.load(member)
    return flags


def test_given_cdk_json_then_it_runs_app_py_and_pins_the_installed_cdks_flags() -> None:
    cdk_json = json.loads((ROOT / "cdk.json").read_text(encoding="utf-8"))
    assert cdk_json["app"] == "python3 app.py"
    assert cdk_json["context"] == recommended_flags()


def test_given_a_fresh_shell_without_credentials_or_network_when_app_py_runs_then_it_synthesizes(
    tmp_path: Path,
) -> None:
    # Given no AWS credentials or region, and every proxy pointing at a closed port
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    dead = "http://127.0.0.1:9"
    env.update(
        HTTP_PROXY=dead,
        HTTPS_PROXY=dead,
        http_proxy=dead,
        https_proxy=dead,
        AWS_EC2_METADATA_DISABLED="true",
        CDK_OUTDIR=str(tmp_path),
    )
    # When the app runs on its own, as `cdk synth` would run it
    done = subprocess.run(
        [sys.executable, "app.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # Then it writes a template, with nothing left for cdk-nag to complain about
    assert done.returncode == 0, done.stderr[-3000:]
    template = json.loads((tmp_path / "ddbtx.template.json").read_text(encoding="utf-8"))
    assert "AWS::DynamoDB::Table" in {r["Type"] for r in template["Resources"].values()}
    report = json.loads((tmp_path / "validation-report.json").read_text(encoding="utf-8"))
    assert report["pluginReports"] == []


def test_given_an_unusable_context_value_then_the_app_is_not_built(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="context 'sweepRateMinutes'"):
        build_app({"sweepRateMinutes": "0"}, outdir=tmp_path)


def test_given_default_app_then_outputs_name_tables_functions_and_the_recovery_command(
    default: Synth,
) -> None:
    # Given the default synth; When we read its outputs
    outputs = {k: render(v["Value"]) for k, v in default.raw["Outputs"].items()}
    tables, janitors = default.stack.tables, default.stack.janitors
    recovery = default.logical_id(janitors.recovery.function)
    # Then
    assert outputs["TransactionsTableName"] == default.logical_id(tables.transactions)
    assert outputs["ImagesTableName"] == default.logical_id(tables.images)
    assert outputs["LocksTableName"] == default.logical_id(tables.locks)
    assert outputs["DataTableNames"] == default.logical_id(tables.data_tables[0])
    assert outputs["SweeperFunctionName"] == default.logical_id(janitors.sweeper.function)
    assert outputs["RecoveryFunctionName"] == recovery
    assert outputs["RecoveryInvokeCommand"].startswith(
        f"aws lambda invoke --region AWS::Region --function-name {recovery} "
        "--cli-binary-format raw-in-base64-out --payload '{"
    )
    assert outputs["AlarmTopicArn"] == default.logical_id(default.stack.monitoring.topic)
