"""Plain helpers shared by the test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from botocore.exceptions import ReadTimeoutError
from botocore.httpsession import URLLib3Session

from ddbtx import schema as s
from ddbtx.chaos import Chaos, Crash
from ddbtx.errors import DdbtxError
from ddbtx.tables import create_table_if_missing


class FakeClock:
    """Wall and monotonic time that only move when someone sleeps or advances them."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start
        self._lock = threading.Lock()

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


@dataclass
class Tables:
    tx: str
    images: str
    data: str


def scan(client: Any, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = client.scan(**kwargs)
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def clear(client: Any, tables: Tables) -> None:
    """Delete every row of the protocol tables and the data table."""
    for table, keys in (
        (tables.data, ("pk",)),
        (tables.tx, (s.TX_PK, s.TX_SK)),
        (tables.images, (s.IMAGE_PK, s.IMAGE_SK)),
    ):
        for item in scan(client, table):
            client.delete_item(TableName=table, Key={k: item[k] for k in keys})


def data_state(client: Any, table: str) -> dict[str, dict[str, Any]]:
    """The data table as {pk: item}, for exact before/after comparisons (without the fence:
    it stays on items a transaction locked, as a version attribute does)."""
    return {item["pk"]["S"]: unfenced(item) for item in scan(client, table)}


def unfenced(item: dict[str, Any]) -> dict[str, Any]:
    """``item`` without the fence (``_tx:f``), the one protocol attribute that stays."""
    return {a: v for a, v in item.items() if a != s.ATTR_FENCE}


def records_left(client: Any, table: str) -> list[dict[str, Any]]:
    """The TX table's rows no finished transaction may leave: every row of a record that is
    not completed. A completed record with its TTL, and its rows, are kept on purpose until
    the janitors' ``delete_after``: they fence late copies (docs/protocol.md)."""
    rows = scan(client, table)
    kept = {
        row[s.TX_PK]["S"]
        for row in rows
        if row[s.TX_SK]["S"] == s.TX_HEADER_SK
        and row.get(s.TX_COMPLETED) == {"BOOL": True}
        and s.TX_TTL in row
    }
    return [row for row in rows if row[s.TX_PK]["S"] not in kept]


def leftover(item: dict[str, Any] | None) -> list[str]:
    """The protocol attributes ``item`` keeps that no finished transaction may leave."""
    return sorted(a for a in item or {} if s.is_held_attribute(a))


def assert_clean(client: Any, tables: Tables) -> None:
    """No protocol attribute on any item, no image, no TX record left not completed."""
    for item in scan(client, tables.data):
        left = leftover(item)
        assert not left, f"protocol attributes left on {item['pk']}: {left}"
    assert scan(client, tables.images) == []
    for record in scan(client, tables.tx):
        if record[s.TX_SK]["S"] == s.TX_HEADER_SK:
            assert record.get(s.TX_COMPLETED) == {"BOOL": True}, f"TX record not completed {record}"


#: Indexes of :func:`create_read_table`: a global one (hash ``g``, range ``sk``) projecting
#: ALL and KEYS_ONLY, and a local one (range ``v``) projecting KEYS_ONLY and ALL.
GSI, GSI_KEYS, LSI_KEYS, LSI_ALL = "by-g", "by-g-keys", "by-v", "by-v-all"


def _index(name: str, hash_key: str, range_key: str, projection: str) -> dict[str, Any]:
    return {
        "IndexName": name,
        "KeySchema": [
            {"AttributeName": hash_key, "KeyType": "HASH"},
            {"AttributeName": range_key, "KeyType": "RANGE"},
        ],
        "Projection": {"ProjectionType": projection},
    }


def create_read_table(client: Any, name: str) -> None:
    """Hash ``pk`` (S) + range ``sk`` (N), with a global and a local index of each projection."""
    create_table_if_missing(
        client,
        name,
        None,
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": a, "AttributeType": t}
            for a, t in (("pk", "S"), ("sk", "N"), ("g", "S"), ("v", "N"))
        ],
        GlobalSecondaryIndexes=[
            _index(GSI, "g", "sk", "ALL"),
            _index(GSI_KEYS, "g", "sk", "KEYS_ONLY"),
        ],
        LocalSecondaryIndexes=[
            _index(LSI_KEYS, "pk", "v", "KEYS_ONLY"),
            _index(LSI_ALL, "pk", "v", "ALL"),
        ],
    )


def crash_run(tm: Any, kind: str, index: int, work: Any) -> tuple[Any, Chaos]:
    """``work(tx)`` then a commit, by ``tm`` with fault ``kind`` armed at its call ``index``.

    Returns the transaction and the chaos (``chaos.fired``: the fault happened).
    """
    chaos = Chaos(tm.client)
    chaos.arm(kind, at=index)
    tx = tm.begin()
    with contextlib.suppress(Crash, DdbtxError):
        work(tx)
        tx.commit()
    return tx, chaos


def rescue(make_tm: Any, tx_id: str) -> Any:
    """Two rescuers of a transaction whose coordinator died: another coordinator resumes
    and commits it (if it still can), then a sweep completes whatever is left. Returns the
    sweeping manager (its record is kept: delete it with ``sweep(..., delete_after=0)``)."""
    with contextlib.suppress(DdbtxError):
        make_tm().resume(tx_id).commit()
    sweeper = make_tm()
    sweeper.sweep(tx_id, rollback_after=timedelta(0), delete_after=timedelta(hours=1))
    return sweeper


class LostAnswer:
    """The first request ``match`` accepts is applied, then ``meanwhile()`` runs, then its
    answer is lost: botocore resends it into whatever ``meanwhile`` left.

    ``match`` is given the request body as ``bytes``; ``close`` removes the hook.
    """

    def __init__(
        self, client: Any, match: Callable[[bytes], bool], meanwhile: Callable[[], None]
    ) -> None:
        self.client = client
        self.match = match
        self.meanwhile = meanwhile
        self.fired = False
        self._session = URLLib3Session()
        client.meta.events.register("before-send.dynamodb", self._before_send)

    def _before_send(self, request: Any, **_: Any) -> None:
        body = request.body or b""
        body = body.encode() if isinstance(body, str) else body
        if self.fired or not self.match(body):
            return
        self.fired = True
        self._session.send(request)
        self.meanwhile()
        raise ReadTimeoutError(endpoint_url=request.url)

    def close(self) -> None:
        self.client.meta.events.unregister("before-send.dynamodb", self._before_send)


class _Validated(Exception):
    """boto3 validated a request and was about to send it."""


def _stop_before_sending(**_: Any) -> None:
    raise _Validated


def boto3_refusal(client: Any, method: str, params: dict[str, Any]) -> str | None:
    """The ``ParamValidationError`` boto3 itself raises for ``params`` (its text), or None
    when boto3 would send them: the request is validated by the client, never sent."""
    from botocore.exceptions import ParamValidationError

    events = client.meta.events
    events.register("before-call.dynamodb", _stop_before_sending, unique_id="boto3-refusal")
    try:
        getattr(client, method)(**params)
    except ParamValidationError as exc:
        return str(exc)
    except _Validated:
        return None
    finally:
        events.unregister("before-call.dynamodb", unique_id="boto3-refusal")
    raise AssertionError(f"{method} {params} was sent")
