"""A model of DynamoDB global tables across Regions, in front of one emulator (issue 35).

Neither moto nor dynalite has global tables, so the multi-Region tests run against this
model of AWS's *documented* behaviour. It is not an emulator of DynamoDB: every request
still goes to one moto or dynalite process, and only what differs between Regions is
added on the way. One store behind every "Region" is exactly what multi-Region strong
consistency (MRSC) promises: a conditional write is judged against the latest version
of the item, and a strongly consistent read in any Region returns it.

What the model adds, per loopback proxy (one per Region), for the tables it is told are
global (:class:`GlobalTable`):

- ``DescribeTable`` answers carry a global table's fields: ``Replicas`` (the other replica
  Regions, each ``ACTIVE``), ``MultiRegionConsistency`` (``STRONG`` or ``EVENTUAL``) and,
  for MRSC, ``GlobalTableWitnesses``.
- On MRSC tables, ``TransactWriteItems``, ``TransactGetItems`` and ``UpdateTimeToLive`` are
  refused with a ``ValidationException`` (AWS: MRSC tables "do not support transaction
  operations, and will return an error if those operations are invoked on an MRSC
  replica"; TTL is not supported either. The exact code and message AWS returns are not
  documented; ddbtx must never depend on them: it learns the mode from ``DescribeTable``).
- Writes to MRSC tables may get ``ReplicatedWriteConflictException``, encoded as AWS's
  JSON protocol encodes it (HTTP 409, ``__type`` naming the exception): when another
  Region wrote the same item within :attr:`Conflicts.window` seconds, and at a seeded
  rate on any write. With :attr:`Conflicts.applied`, the write is applied before the
  409 is answered (AWS does not promise that a rejected write never landed).
- Each write and each strongly consistent read of a global table is charged one
  cross-Region round trip (:attr:`World.delay` seconds, and counted in
  :attr:`World.round_trips`); eventually consistent reads are local and free.

Eventual consistency (MREC) is not modelled beyond ``DescribeTable``: ddbtx refuses MREC
tables without a home Region, and in home-Region mode only one Region writes.

Requests are signed for their own Region; the proxy rewrites the credential scope to
the emulator's Region, since moto keeps one store per Region (neither emulator checks
signatures).
"""

from __future__ import annotations

import http.client
import json
import random
import re
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import urlsplit

from ddbtx.local import LOCAL_CREDENTIALS

#: The Regions of the tests' deployments: two replicas and a witness for MRSC.
REGIONS = ("us-east-2", "us-east-1", "us-west-2")

WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem"})
STRONG_READS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem"})
#: Refused on MRSC tables.
NOT_ON_MRSC = frozenset({"TransactWriteItems", "TransactGetItems", "UpdateTimeToLive"})

CONFLICT = "ReplicatedWriteConflictException"
CONFLICT_MESSAGE = (
    "The request was rejected because one or more items in the request are being "
    "modified by a request in another Region."
)
_SCOPE = re.compile(r"(Credential=[^/]+/\d{8}/)([a-z0-9-]+)(/dynamodb/aws4_request)")


@dataclass(frozen=True)
class GlobalTable:
    """A table's replication: ``MRSC`` or ``MREC``, its replica Regions and its witness."""

    mode: Literal["MRSC", "MREC"]
    replicas: tuple[str, ...] = REGIONS[:2]
    witness: str | None = REGIONS[2]

    def describe(self, region: str) -> dict[str, Any]:
        """The fields ``DescribeTable`` adds in ``region``."""
        fields: dict[str, Any] = {
            "Replicas": [
                {"RegionName": r, "ReplicaStatus": "ACTIVE"} for r in self.replicas if r != region
            ],
            "MultiRegionConsistency": "STRONG" if self.mode == "MRSC" else "EVENTUAL",
        }
        if self.mode == "MRSC" and self.witness is not None:
            fields["GlobalTableWitnesses"] = [
                {"RegionName": self.witness, "WitnessStatus": "ACTIVE"}
            ]
        return fields


@dataclass
class Conflicts:
    """When a write to an MRSC table gets ``ReplicatedWriteConflictException``."""

    #: Seconds within which a write to an item another Region wrote is refused.
    window: float = 0.0
    #: Chance of a 409 on any write, drawn from a generator seeded with ``seed``.
    rate: float = 0.0
    #: Apply the write, then answer 409.
    applied: bool = False
    seed: int = 0


@dataclass
class World:
    """What every Region's proxy shares: the tables' replication, the conflict rules, the
    last writer of each item, and what was counted."""

    backend_url: str
    tables: dict[str, GlobalTable] = field(default_factory=dict)
    conflicts: Conflicts = field(default_factory=Conflicts)
    #: Seconds of one cross-Region round trip.
    delay: float = 0.0
    round_trips: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    _writers: dict[tuple[str, str], tuple[str, float]] = field(default_factory=dict)
    _keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _rng: random.Random | None = None

    def rng(self) -> random.Random:
        if self._rng is None:
            self._rng = random.Random(self.conflicts.seed)
        return self._rng

    def conflict(self, region: str, table: str, keys: list[str]) -> bool:
        """Whether this write gets a 409; either way, ``region`` is now the items' writer."""
        now = time.monotonic()
        with self._lock:
            hit = any(
                (w := self._writers.get((table, k))) is not None
                and w[0] != region
                and now - w[1] < self.conflicts.window
                for k in keys
            )
            hit = hit or (self.conflicts.rate > 0 and self.rng().random() < self.conflicts.rate)
            if not hit or self.conflicts.applied:  # a refused write that did not land wrote nothing
                for k in keys:
                    self._writers[(table, k)] = (region, now)
            if hit:
                self.refused[CONFLICT] += 1
            return hit


def _error(code: str, message: str, status: int) -> tuple[int, bytes]:
    body = {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message}
    return status, json.dumps(body).encode()


class Region(ThreadingHTTPServer):
    """One Region's endpoint: a loopback proxy in front of the world's emulator."""

    daemon_threads = True

    def __init__(self, name: str, world: World) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.name = name
        self.world = world
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def client(self, attempts: int = 3, **config: Any) -> Any:
        """A boto3 client in this Region (botocore's standard retries, ``attempts`` in all)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "dynamodb",
            endpoint_url=self.endpoint_url,
            region_name=self.name,
            aws_access_key_id=LOCAL_CREDENTIALS["aws_access_key_id"],
            aws_secret_access_key=LOCAL_CREDENTIALS["aws_secret_access_key"],
            config=Config(
                retries={"total_max_attempts": attempts, "mode": "standard"},
                max_pool_connections=50,
                **config,
            ),
        )

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: Region
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: Any) -> None:  # the tests' output stays quiet
        return

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        operation = self.headers.get("X-Amz-Target", "").rpartition(".")[2]
        params = json.loads(body or b"{}")
        status, answer, headers = self._answer(operation, params, body)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(answer)))
        self.send_header("x-amz-crc32", str(zlib.crc32(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def _answer(
        self, operation: str, params: dict[str, Any], body: bytes
    ) -> tuple[int, bytes, dict[str, str]]:
        world, region = self.server.world, self.server.name
        tables = _tables_of(operation, params)
        global_ = [t for t in tables if t in world.tables]
        strong = [t for t in global_ if world.tables[t].mode == "MRSC"]
        if operation in NOT_ON_MRSC and strong:
            world.refused[operation] += 1
            message = f"{operation} is not supported on multi-Region strongly consistent tables"
            return (*_error("ValidationException", message, 400), {})
        if global_ and (operation in WRITES or _consistent(operation, params)):
            world.round_trips[region] += 1
            if world.delay:
                time.sleep(world.delay)
        conflict = False
        if operation in WRITES and strong:
            keys = [
                json.dumps(k, sort_keys=True)
                for t in strong
                for k in self._item_keys(operation, params, t)
            ]
            conflict = world.conflict(region, ",".join(strong), keys)
            if conflict and not world.conflicts.applied:
                return (*_error(CONFLICT, CONFLICT_MESSAGE, 409), {})
        status, answer, headers = self._forward(body)
        if conflict:  # applied, and refused all the same
            return (*_error(CONFLICT, CONFLICT_MESSAGE, 409), {})
        if (
            operation == "DescribeTable"
            and status == 200
            and params.get("TableName") in world.tables
        ):
            described = json.loads(answer)
            described["Table"].update(world.tables[params["TableName"]].describe(region))
            answer = json.dumps(described).encode()
        return status, answer, headers

    def _forward(self, body: bytes, target: str | None = None) -> tuple[int, bytes, dict[str, str]]:
        """Send ``body`` on to the emulator as this request (or as operation ``target``,
        signed as this request was: the emulators check the header's form, not its
        signature)."""
        url = urlsplit(self.server.world.backend_url)
        headers = {
            k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
        }
        auth = headers.get("Authorization")
        if auth is not None:
            headers["Authorization"] = _SCOPE.sub(
                rf"\g<1>{LOCAL_CREDENTIALS['region_name']}\g<3>", auth
            )
        if target is not None:
            headers["X-Amz-Target"] = f"DynamoDB_20120810.{target}"
        conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=60)
        try:
            conn.request("POST", "/", body=body, headers=headers)
            response = conn.getresponse()
            answer = response.read()
            kept = {"x-amzn-RequestId": response.getheader("x-amzn-RequestId") or "model"}
            return response.status, answer, kept
        finally:
            conn.close()

    def _item_keys(self, operation: str, params: dict[str, Any], table: str) -> list[Any]:
        if operation == "BatchWriteItem":
            out = []
            for req in params.get("RequestItems", {}).get(table, []):
                if "PutRequest" in req:
                    out.append(self._key_of(table, req["PutRequest"]["Item"]))
                else:
                    out.append(req["DeleteRequest"]["Key"])
            return out
        if operation == "PutItem":
            return [self._key_of(table, params["Item"])]
        return [params.get("Key")]

    def _key_of(self, table: str, item: dict[str, Any]) -> dict[str, Any]:
        world = self.server.world
        names = world._keys.get(table)
        if names is None:
            body = json.dumps({"TableName": table}).encode()
            status, answer, _ = self._forward(body, target="DescribeTable")
            if status != 200:
                raise RuntimeError(f"the model could not learn {table}'s key: {answer!r}")
            schema = json.loads(answer)["Table"]["KeySchema"]
            names = world._keys[table] = tuple(k["AttributeName"] for k in schema)
        return {n: item.get(n) for n in names}


def _tables_of(operation: str, params: dict[str, Any]) -> list[str]:
    if "TableName" in params:
        return [str(params["TableName"])]
    if operation in ("BatchWriteItem", "BatchGetItem"):
        return list(params.get("RequestItems", {}))
    if operation in ("TransactWriteItems", "TransactGetItems"):
        found = []
        for entry in params.get("TransactItems", []):
            for part in entry.values():
                if isinstance(part, dict) and "TableName" in part:
                    found.append(str(part["TableName"]))
        return found
    return []


def _consistent(operation: str, params: dict[str, Any]) -> bool:
    if operation not in STRONG_READS:
        return False
    if operation == "BatchGetItem":
        return any(bool(r.get("ConsistentRead")) for r in params.get("RequestItems", {}).values())
    return bool(params.get("ConsistentRead"))


class Regions:
    """A Region proxy per name in front of one emulator, sharing one :class:`World`.

    Examples
    --------
    >>> with Regions(backend.endpoint_url) as regions:                  # doctest: +SKIP
    ...     regions.world.tables["Orders"] = GlobalTable("MRSC")
    ...     east = regions["us-east-1"].client()
    """

    def __init__(self, backend_url: str, names: tuple[str, ...] = REGIONS[:2]) -> None:
        self.world = World(backend_url)
        self.names = names
        self._regions: dict[str, Region] = {}

    def __enter__(self) -> Regions:
        for name in self.names:
            self._regions[name] = Region(name, self.world)
        return self

    def __exit__(self, *_: object) -> None:
        for region in self._regions.values():
            region.close()
        self._regions.clear()

    def __getitem__(self, name: str) -> Region:
        return self._regions[name]
