"""`ddbtx local` (issue 37, item 3): an embedded DynamoDB served in the foreground until
interrupted, printing the exports a shell needs. Run as an operator would, in a process
of its own, on each emulator; stopped with SIGTERM and with Ctrl-C (SIGINT)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import IO

import boto3
import pytest

from ddbtx.local import KINDS, free_port

CLI = "import sys; from ddbtx.cli import main; sys.exit(main())"


def exported(stdout: IO[str]) -> dict[str, str]:
    """The variables of the ``export`` lines, read up to the last of them."""
    found: dict[str, str] = {}
    for line in stdout:
        if line.startswith("export "):
            found.update(word.split("=", 1) for word in line.split()[1:])
            if "AWS_DEFAULT_REGION" in found:
                return found
    raise AssertionError(f"no exports printed; found {found}")


@pytest.fixture(params=KINDS)
def served(request: pytest.FixtureRequest) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """``ddbtx local --port P --backend K`` running in its own process."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, "local", "--port", str(port), "--backend", request.param],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    yield proc, port
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_given_ddbtx_local_when_a_client_uses_its_exports_then_it_serves_until_stopped(
    served: tuple[subprocess.Popen[str], int], stop: signal.Signals
) -> None:
    proc, port = served
    # Given `ddbtx local` started, When a client is made from the exports it printed
    assert proc.stdout is not None
    env = exported(proc.stdout)
    assert env["AWS_ENDPOINT_URL_DYNAMODB"] == f"http://127.0.0.1:{port}"
    client = boto3.client(
        "dynamodb",
        endpoint_url=env["AWS_ENDPOINT_URL_DYNAMODB"],
        region_name=env["AWS_DEFAULT_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )
    # Then it is a DynamoDB: a table made, an item put and read back
    client.create_table(
        TableName="Things",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.put_item(TableName="Things", Item={"pk": {"S": "a"}})
    assert client.get_item(TableName="Things", Key={"pk": {"S": "a"}})["Item"] == {"pk": {"S": "a"}}
    # When it is stopped, Then it exits 0 and the port is free again
    proc.send_signal(stop)
    assert proc.wait(timeout=20) == 0, proc.stderr.read() if proc.stderr else ""
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0


def test_given_an_unknown_backend_then_one_line_names_the_choices() -> None:
    # When `ddbtx local --backend nope` runs, Then it exits 2 with one line naming both
    done = subprocess.run(
        [sys.executable, "-c", CLI, "local", "--backend", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "moto, dynalite" in done.stderr
