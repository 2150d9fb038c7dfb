"""One set of twin tables per emulator, shared by every case of the oracle.

moto runs in-process here (its mock, same DynamoDB model as its server, without
the HTTP round trip): the oracle makes some 30,000 calls per emulator.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from ddbtx.local import LOCAL_CREDENTIALS, LocalDynamo
from drivers import EventLoopThread

from .runner import Twins


class AsyncOver:
    """A sync boto3 client seen as an asyncio one (each method a coroutine). moto's
    in-process mock serves botocore only, not aiobotocore; on moto the asyncio path
    runs the asyncio driver and API over this, on dynalite over aiobotocore itself."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.meta = client.meta

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)

        async def call(**params: Any) -> Any:
            return method(**params)

        return call


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
