"""A backend for the explorer: the tables, its clients, and resets between schedules.

``moto`` runs in this process (moto's ``mock_aws``: no HTTP, the fastest);
``dynalite`` is the npm emulator through :class:`ddbtx.local.LocalDynamo`.
Clients are made once (client creation costs more than a whole schedule): a
boto3 client for the participants on the sync driver's transport, and an asyncio
one for those on the asyncio driver's: aiobotocore on dynalite, run on an event
loop of the world's own (one call at a time, on this thread); on moto, whose
in-process mock serves botocore only, the boto3 client seen as an asyncio one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import boto3
from botocore.config import Config

from ddbtx import TransactionManager
from ddbtx import schema as s
from ddbtx.local import LOCAL_CREDENTIALS, LocalDynamo
from ddbtx.tables import create_data_table

try:  # pytest puts tests/ on the path; ``python -m tests.explore`` does not
    from drivers import AsyncOver
except ImportError:  # pragma: no cover - the command-line runner
    from tests.drivers import AsyncOver

BACKENDS = ("moto", "dynalite")
TX, IMAGES, DATA = "explore-tx", "explore-img", "explore-data"
#: Items before every schedule: ``c`` is absent, so puts and updates on it insert.
INITIAL: dict[str, dict[str, Any] | None] = {
    "a": {"pk": {"S": "a"}, "n": {"N": "100"}},
    "b": {"pk": {"S": "b"}, "n": {"N": "200"}},
    "c": None,
}


class World:
    """One running backend with the explorer's tables and clients."""

    def __init__(
        self,
        kind: str,
        make_client: Callable[[], Any],
        aio_client: Any,
        wait: Callable[[Coroutine[Any, Any, Any]], Any],
    ) -> None:
        self.kind = kind
        self.admin = make_client()
        self.client = make_client()
        self.aio_client = aio_client
        self.wait = wait  #: runs one of ``aio_client``'s coroutines to its end
        self.final_client = make_client()
        self.roles = {TX: "tx", IMAGES: "img", DATA: "data"}
        TransactionManager(self.admin, TX, IMAGES, max_workers=1).create_tables()
        create_data_table(self.admin, DATA)
        self.reset()

    def scan(self, table: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        params: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
        while True:
            page = self.admin.scan(**params)
            items.extend(page["Items"])
            if "LastEvaluatedKey" not in page:
                return items
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def rows(self) -> dict[str, list[dict[str, Any]]]:
        """Every row of the three tables."""
        return {table: self.scan(table) for table in (TX, IMAGES, DATA)}

    def reset(self, rows: dict[str, list[dict[str, Any]]] | None = None) -> None:
        """Back to the initial items and empty protocol tables (``rows``: what is there now)."""
        rows = self.rows() if rows is None else rows
        keys = {TX: (s.TX_PK, s.TX_SK), IMAGES: (s.IMAGE_PK, s.IMAGE_SK), DATA: ("pk",)}
        for table, names in keys.items():
            for row in rows[table]:
                if table == DATA and INITIAL.get(row["pk"]["S"]) == row:
                    continue
                self.admin.delete_item(TableName=table, Key={n: row[n] for n in names})
        present = [row for row in rows[DATA] if INITIAL.get(row["pk"]["S"]) == row]
        for item in INITIAL.values():
            if item is not None and item not in present:
                self.admin.put_item(TableName=DATA, Item=item)


def _config() -> Config:
    # Standard retries as the library's own clients; pool above the largest max_workers.
    return Config(retries={"max_attempts": 3, "mode": "standard"}, max_pool_connections=10)


@contextmanager
def started(kind: str) -> Iterator[World]:
    """A :class:`World` on a fresh backend of ``kind``; stopped afterwards."""
    if kind not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, not {kind!r}")
    with ExitStack() as stack:
        loop = asyncio.new_event_loop()
        stack.callback(loop.close)
        if kind == "moto":
            from moto import mock_aws

            # Before the session is made: moto's responder is one of its built-in handlers.
            stack.enter_context(mock_aws())

            def make() -> Any:
                return session.client("dynamodb", config=_config())

            session = boto3.Session(**LOCAL_CREDENTIALS)
            aio = AsyncOver(make())
        else:
            session = boto3.Session(**LOCAL_CREDENTIALS)
            endpoint = stack.enter_context(LocalDynamo("dynalite")).endpoint_url

            def make() -> Any:
                return session.client("dynamodb", endpoint_url=endpoint, config=_config())

            aio = loop.run_until_complete(_aio_client(endpoint, stack, loop))
        yield World(kind, make, aio, loop.run_until_complete)


async def _aio_client(endpoint_url: str, stack: ExitStack, loop: asyncio.AbstractEventLoop) -> Any:
    """An aiobotocore client on ``endpoint_url``, closed (on ``loop``) when ``stack`` is."""
    from aiobotocore.session import get_session

    context = get_session().create_client(
        "dynamodb", endpoint_url=endpoint_url, config=_config(), **LOCAL_CREDENTIALS
    )
    client = await context.__aenter__()
    stack.callback(lambda: loop.run_until_complete(context.__aexit__(None, None, None)))
    return client
