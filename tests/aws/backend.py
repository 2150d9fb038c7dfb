"""The test suite against a DynamoDB that is not an emulator it starts (real AWS).

``DDBTX_TEST_BACKEND=aws`` makes the ``backend`` fixture (tests/conftest.py) a
:class:`RemoteDynamo` instead of moto and dynalite: clients come from the
environment (credentials, region, and ``AWS_ENDPOINT_URL_DYNAMODB`` if set), and
every table name starts with ``DDBTX_TABLE_PREFIX`` so that the runner
(``python -m tests.aws.run``) can delete whatever a run leaves behind.
"""

from __future__ import annotations

import os
from typing import Any, Final

BACKEND_VARIABLE: Final = "DDBTX_TEST_BACKEND"
PREFIX_VARIABLE: Final = "DDBTX_TABLE_PREFIX"


def remote_selected() -> bool:
    """Whether this test session runs against the remote backend."""
    return os.environ.get(BACKEND_VARIABLE, "") == "aws"


def table_prefix() -> str:
    """Prefix of every table name this session creates ("" unless the runner set one)."""
    return os.environ.get(PREFIX_VARIABLE, "")


class RemoteDynamo:
    """What a test needs of a backend (``kind``, ``endpoint_url``, ``client``), for AWS."""

    kind = "aws"

    def __init__(self) -> None:
        import boto3

        session = boto3.Session()
        self.region = session.region_name or "us-east-1"
        self.endpoint_url = os.environ.get(
            "AWS_ENDPOINT_URL_DYNAMODB", f"https://dynamodb.{self.region}.amazonaws.com"
        )

    def client(self, max_attempts: int = 3) -> Any:
        """A boto3 DynamoDB client from the environment (standard retry mode)."""
        import boto3

        from ddbtx._base.dynamo import client_config

        return boto3.client("dynamodb", config=client_config(max_attempts))

    def start(self) -> RemoteDynamo:
        return self

    def stop(self) -> None:
        """Nothing to stop: the runner deletes the tables."""
