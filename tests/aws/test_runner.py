"""``python -m tests.aws.run`` (``make test-aws``) without AWS: its skip path, its
confirmation, and its clean-up, against the emulators standing in for AWS."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from aws import run
from ddbtx.local import LocalDynamo


def call(*args: str) -> tuple[int, list[str]]:
    lines: list[str] = []
    return run.main(list(args), lines.append), lines


def test_given_no_credentials_then_one_line_says_so_and_it_exits_0(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    # Given an environment with no credentials anywhere boto3 looks
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv(run.CONFIRM_VARIABLE, "1")

    # When the runner starts, even confirmed
    status, lines = call("--yes")

    # Then it says why in one line and exits 0 (nothing to run is not a failure)
    assert status == 0
    assert len(lines) == 1 and "no AWS credentials" in lines[0]


def tables(ddb: Any) -> set[str]:
    return set(ddb.list_tables()["TableNames"])


def test_given_credentials_but_no_confirmation_then_it_prints_the_plan_and_runs_nothing(
    endpoint_env: LocalDynamo, ddb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given credentials (the emulator's) and no confirmation
    monkeypatch.delenv(run.CONFIRM_VARIABLE, raising=False)
    before = tables(ddb)

    # When the runner starts
    status, lines = call()

    # Then it prints each step with its request count and the total, asks for
    # confirmation, exits 2 and creates nothing
    text = "\n".join(lines)
    expected = run.expected_requests()
    assert status == 2
    assert f"~{expected['crash']:,} requests" in text
    assert "--yes" in lines[-1] and run.CONFIRM_VARIABLE in lines[-1]
    assert "tests/oracle" in text  # named, run once it exists
    assert tables(ddb) == before


def test_given_a_failing_test_that_leaves_a_table_then_the_runner_deletes_only_its_tables(
    endpoint_env: LocalDynamo, ddb: Any
) -> None:
    # Given a table of someone else's whose name even starts like the runner's
    keep = f"{run.TABLE_PREFIX}not-ours-{uuid.uuid4().hex[:6]}"
    ddb.create_table(
        TableName=keep,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
    )

    # When the runner runs a test that creates a table with its prefix and fails
    status, lines = call("--yes", "--path", "tests/aws/leftover_case.py")

    # Then the run fails, the leftover table is deleted and named, and no other is touched
    text = "\n".join(lines)
    assert status == 1, text
    assert "1 failed" in text
    deleted = [line for line in lines if line.startswith("deleted 1 leftover table(s): ")]
    assert deleted and deleted[0].endswith("orphan"), text
    assert not [t for t in tables(ddb) if t.endswith("orphan")]
    assert keep in tables(ddb)
    ddb.delete_table(TableName=keep)


@pytest.mark.parametrize("prefix", ["", run.TABLE_PREFIX, "orders-"])
def test_clean_up_refuses_a_prefix_that_is_not_one_run_s(prefix: str) -> None:
    with pytest.raises(ValueError, match="refusing"):
        run.delete_tables(None, prefix)
