"""One set of twin tables per emulator, shared by every case of the oracle.

moto runs in-process here (its mock, same DynamoDB model as its server, without
the HTTP round trip): the oracle makes some 30,000 calls per emulator.
"""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from ddbtx.local import LOCAL_CREDENTIALS, LocalDynamo
from drivers import AsyncOver, EventLoopThread

from .runner import Twins


@pytest.fixture(scope="module")
def twins(
    request: pytest.FixtureRequest,
    emulators: dict[str, LocalDynamo],
    event_loop_thread: EventLoopThread,
) -> Iterator[Twins]:
    """The twin tables on the emulator named by the case's parameter (moto or dynalite)."""
    # The mock shares moto's state with the session's moto server: keep others' data.
    mock = mock_aws()
    if request.param == "moto":
        mock.start(reset=False)
        client = boto3.client("dynamodb", **LOCAL_CREDENTIALS)
    else:
        client = emulators[request.param].client()
    try:
        aio_client = (
            AsyncOver(client)
            if request.param == "moto"
            else event_loop_thread.client(emulators[request.param])
        )
        made = Twins.create(client, aio_client, event_loop_thread.run)
        yield made
        made.drop()
    finally:
        if request.param == "moto":
            mock.stop(remove_data=False)
