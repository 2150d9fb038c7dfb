"""One set of twin tables per emulator, shared by every case of the oracle.

moto runs in-process here (its mock, same DynamoDB model as its server, without
the HTTP round trip): the oracle makes some 30,000 calls per emulator.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import boto3
import pytest
from moto import mock_aws

from ddbtx.local import LOCAL_CREDENTIALS, LocalDynamo

from .runner import Twins


@pytest.fixture(scope="module")
def twins(request: pytest.FixtureRequest, emulators: dict[str, LocalDynamo]) -> Iterator[Twins]:
    """The twin tables on the emulator named by the case's parameter (moto or dynalite)."""
    with ExitStack() as stack:
        if request.param == "moto":
            stack.enter_context(mock_aws())
            client = boto3.client("dynamodb", **LOCAL_CREDENTIALS)
        else:
            client = emulators[request.param].client()
        made = Twins.create(client)
        yield made
        made.drop()
