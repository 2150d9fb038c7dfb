"""The operator drill (issue 37): what on-call does the day after a crash, each step a real
process as in production. `ddbtx local` serves DynamoDB; a coordinator process is killed
with SIGKILL mid-transaction; `ddbtx pending` finds it, `ddbtx sweep --dry-run` shows the
plan, the recovery function run here (`ddbtx invoke`) inspects it, `ddbtx recover` rolls it
back, and `ddbtx pending` ends empty. moto backs `ddbtx local` (dynalite is the same
commands; the CLI's tests run on both)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from ddbtx import TransactionManager
from ddbtx.local import free_port
from ddbtx.tables import create_data_table

from .support import ROOT

CLI = "import sys; from ddbtx.cli import main; sys.exit(main())"

#: A coordinator that locks and writes two accounts, says so, and waits to be killed.
COORDINATOR = """
import sys, time, boto3
from ddbtx import TransactionManager
tm = TransactionManager(boto3.client("dynamodb"), "Transactions", "TransactionImages")
tx = tm.begin()
for pk, by in (("alice", "-10"), ("bob", "10")):
    tx.update_item(TableName="Accounts", Key={"pk": {"S": pk}},
                   UpdateExpression="ADD balance :by", ExpressionAttributeValues={":by": {"N": by}})
print(tx.id, flush=True)
time.sleep(600)
"""


@pytest.fixture
def local_env() -> Iterator[dict[str, str]]:
    """`ddbtx local` in a process of its own; the environment its exports give a shell."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, "local", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("export "):
            env.update(word.split("=", 1) for word in line.split()[1:])
            if "AWS_DEFAULT_REGION" in env:
                break
    try:
        yield env
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)


def ddbtx(env: dict[str, str], *args: str) -> tuple[int, str]:
    """One `ddbtx` command, as on-call types it; its status and stdout."""
    done = subprocess.run(
        [sys.executable, "-c", CLI, "--data-tables", "Accounts", *args],
        env=env, capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    return done.returncode, done.stdout


def test_given_a_coordinator_killed_mid_transaction_when_on_call_drills_then_it_is_found_and_undone(
    local_env: dict[str, str],
) -> None:
    # Given `ddbtx local`, the tables and two accounts
    client: Any = boto3.client(
        "dynamodb",
        endpoint_url=local_env["AWS_ENDPOINT_URL_DYNAMODB"],
        region_name=local_env["AWS_DEFAULT_REGION"],
        aws_access_key_id=local_env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=local_env["AWS_SECRET_ACCESS_KEY"],
    )
    TransactionManager(client, "Transactions", "TransactionImages").create_tables()
    create_data_table(client, "Accounts")
    for pk in ("alice", "bob"):
        client.put_item(TableName="Accounts", Item={"pk": {"S": pk}, "balance": {"N": "100"}})
    # And a coordinator process that has locked and written both, then is killed (kill -9)
    coordinator = subprocess.Popen(
        [sys.executable, "-c", COORDINATOR], stdout=subprocess.PIPE, text=True, env=local_env
    )
    assert coordinator.stdout is not None
    tx_id = coordinator.stdout.readline().strip()
    coordinator.send_signal(signal.SIGKILL)
    coordinator.wait(timeout=10)

    # When on-call lists what is not completed
    status, out = ddbtx(local_env, "--json", "pending", "--rollback-after", "0")
    # Then the killed transaction is there, holding both locks, to be rolled back
    (found,) = json.loads(out)
    assert status == 0 and found["transaction_id"] == tx_id
    assert (found["state"], found["locks_held"]) == ("pending", 2)
    assert found["plan"].startswith("roll back")

    # When on-call asks for a sweep's plan without changing anything
    status, out = ddbtx(local_env, "--json", "sweep", "--dry-run", "--rollback-after", "0")
    # Then the plan is the same rollback
    plan = json.loads(out)
    assert [t["plan"][:9] for t in plan["transactions"]] == ["roll back"]

    # When the recovery function, run here, inspects it
    event = json.dumps({"action": "inspect", "transaction_id": tx_id})
    status, out = ddbtx(local_env, "invoke", "recovery", event)
    # Then it answers as Lambda would: pending, both locks held
    answer = json.loads(out)
    assert (status, answer["ok"], answer["result"]["locks_held"]) == (0, True, 2)

    # When on-call recovers it with the CLI
    status, out = ddbtx(local_env, "--json", "recover", tx_id)
    # Then it is rolled back: both balances as before, and nothing is pending any more
    assert (status, json.loads(out)["outcome"]) == (0, "rolled_back")
    balances = {
        pk: client.get_item(TableName="Accounts", Key={"pk": {"S": pk}})["Item"]["balance"]["N"]
        for pk in ("alice", "bob")
    }
    assert balances == {"alice": "100", "bob": "100"}
    assert ddbtx(local_env, "--json", "pending") == (0, "[]\n")
