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
from drivers import AsyncOver, EventLoopThread

from .runner import Twins


def open_twins(
    kind: str, emulator: LocalDynamo | None, event_loop_thread: EventLoopThread
) -> Iterator[Twins]:
    """The twin tables on ``kind`` (moto in-process; else on ``emulator``), dropped after."""
    # The mock shares moto's state with the session's moto server: keep others' data.
    mock = mock_aws()
    if kind == "moto":
        mock.start(reset=False)
        client = boto3.client("dynamodb", **LOCAL_CREDENTIALS)
    else:
        assert emulator is not None
        client = emulator.client()
    try:
        aio_client: Any = AsyncOver(client)
        if emulator is not None and kind != "moto":
            aio_client = event_loop_thread.client(emulator)
        made = Twins.create(client, aio_client, event_loop_thread.run)
        yield made
        made.drop()
    finally:
        if kind == "moto":
            mock.stop(remove_data=False)


@pytest.fixture(scope="module")
def twins(
    request: pytest.FixtureRequest,
    emulators: dict[str, LocalDynamo],
    event_loop_thread: EventLoopThread,
) -> Iterator[Twins]:
    """The twin tables on the emulator named by the case's parameter (moto or dynalite)."""
    yield from open_twins(request.param, emulators.get(request.param), event_loop_thread)
