"""A backend for the explorer: the tables, one long-lived client per participant, and resets.

``moto`` runs in this process (moto's ``mock_aws``: no HTTP, the fastest);
``dynalite`` is the npm emulator through :class:`ddbtx.local.LocalDynamo`.
Clients are made once (boto3 client creation costs more than a whole
schedule) and keep their :class:`Door` hooks; each schedule opens the doors
on its own gate and wipes the tables afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import boto3
from botocore.config import Config
from botocore.httpsession import URLLib3Session

from ddbtx import TransactionManager
from ddbtx import schema as s
from ddbtx.local import LOCAL_CREDENTIALS, LocalDynamo
from ddbtx.tables import create_data_table

from .door import Door

BACKENDS = ("moto", "dynalite")
TX, IMAGES, DATA = "explore-tx", "explore-img", "explore-data"
#: Items before every schedule: ``c`` is absent, so puts and updates on it insert.
INITIAL: dict[str, dict[str, Any] | None] = {
    "a": {"pk": {"S": "a"}, "n": {"N": "100"}},
    "b": {"pk": {"S": "b"}, "n": {"N": "200"}},
    "c": None,
}
#: Participant slots: up to four coordinators, a sweeper, an operator's recover.
SLOTS = ("c0", "c1", "c2", "c3", "sw", "rc")


class World:
    """One running backend with the explorer's tables and clients."""

    def __init__(self, kind: str, make_client: Callable[[], Any], send: Callable[[Any], None]):
        self.kind = kind
        self.admin = make_client()
        self.doors = {slot: Door(make_client(), send) for slot in SLOTS}
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
        if kind == "moto":
            # Imported before the session is made: moto's responder is a built-in handler.
            from moto import mock_aws
            from moto.core.models import botocore_stubber

            stack.enter_context(mock_aws())
            session = boto3.Session(**LOCAL_CREDENTIALS)

            def make() -> Any:
                return session.client("dynamodb", config=_config())

            def send(request: Any) -> None:
                botocore_stubber("before-send.dynamodb", request)

        else:
            backend = stack.enter_context(LocalDynamo("dynalite"))
            session = boto3.Session(**LOCAL_CREDENTIALS)
            http = URLLib3Session()

            def make() -> Any:
                return session.client(
                    "dynamodb", endpoint_url=backend.endpoint_url, config=_config()
                )

            def send(request: Any) -> None:
                http.send(request)

        yield World(kind, make, send)
