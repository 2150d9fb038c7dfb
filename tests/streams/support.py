"""DynamoDB Streams in tests: a table's stream read from moto, as Lambda delivers it, and the
committed values each item went through, to check the adapter's changes against."""

from __future__ import annotations

import base64
from typing import Any

import boto3

from ddbtx import schema as s
from ddbtx.local import LOCAL_CREDENTIALS, LocalDynamo
from ddbtx.streams import PROTOCOL_FILTER_PATTERNS, Change
from helpers import scan

Value = dict[str, Any] | None


class StreamReader:
    """Reads a table's stream from where the last read stopped, as Lambda event records."""

    def __init__(self, backend: LocalDynamo, ddb: Any, table: str) -> None:
        self.streams = boto3.client(
            "dynamodbstreams", endpoint_url=backend.endpoint_url, **LOCAL_CREDENTIALS
        )
        self.arn = ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
        shard = self.streams.describe_stream(StreamArn=self.arn)["StreamDescription"]["Shards"][0]
        self._iterator = self.streams.get_shard_iterator(
            StreamArn=self.arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        #: Every record read so far, in stream order.
        self.records: list[dict[str, Any]] = []

    def read(self) -> list[dict[str, Any]]:
        """The records written since the last read (as ``event["Records"]`` elements)."""
        fresh: list[dict[str, Any]] = []
        while True:
            page = self.streams.get_records(ShardIterator=self._iterator, Limit=1000)
            self._iterator = page["NextShardIterator"]
            fresh.extend(lambda_record(r, self.arn) for r in page["Records"])
            if not page["Records"]:
                break
        self.records.extend(fresh)
        return fresh


def lambda_record(record: dict[str, Any], stream_arn: str) -> dict[str, Any]:
    """A GetRecords record in the shape a Lambda event carries it: with ``eventSourceARN``,
    binary values base64-encoded (boto3 decodes them; Lambda's JSON does not)."""
    body = dict(record["dynamodb"])
    body.pop("ApproximateCreationDateTime", None)  # a datetime from boto3; a number in Lambda
    for name in ("Keys", "OldImage", "NewImage"):
        if name in body:
            body[name] = {k: _as_json(v) for k, v in body[name].items()}
    return {
        "eventID": record["eventID"],
        "eventName": record["eventName"],
        "eventVersion": record.get("eventVersion", "1.1"),
        "eventSource": "aws:dynamodb",
        "awsRegion": LOCAL_CREDENTIALS["region_name"],
        "eventSourceARN": stream_arn,
        "dynamodb": body,
    }


def _as_json(value: dict[str, Any]) -> dict[str, Any]:
    ((kind, raw),) = value.items()
    if kind == "B":
        return {"B": base64.b64encode(raw).decode()}
    if kind == "BS":
        return {"BS": [base64.b64encode(b).decode() for b in raw]}
    if kind == "M":
        return {"M": {k: _as_json(v) for k, v in raw.items()}}
    if kind == "L":
        return {"L": [_as_json(v) for v in raw]}
    return value


class Ledger:
    """The committed values of every item of a table, as a list per key: a snapshot of the
    table after each settled step (no transaction of it still holding a lock), recording a
    value whenever it differs from the item's last one (None: no item)."""

    def __init__(self, ddb: Any, table: str) -> None:
        self.ddb, self.table = ddb, table
        self.values: dict[str, list[Value]] = {}

    def snapshot(self) -> None:
        items = {item["pk"]["S"]: item for item in scan(self.ddb, self.table)}
        for item in items.values():
            assert not [a for a in item if a.startswith(s.RESERVED_PREFIX)], (
                f"a snapshot is taken only when every transaction has settled: {item['pk']}"
            )
        for pk in set(items) | set(self.values):
            history = self.values.setdefault(pk, [None])
            value = items.get(pk)
            if value != history[-1]:
                history.append(value)


def replay(changes: list[Change]) -> tuple[dict[str, list[Value]], int]:
    """Each item's values as the changes take it from absent, checking that each change
    starts from the value the item had (where the change knows it).

    Returns the values per key and how many changes did not know their ``old``.
    """
    values: dict[str, list[Value]] = {}
    unknown = 0
    for change in changes:
        pk = change.key["pk"]["S"]
        history = values.setdefault(pk, [None])
        if change.old_known:
            assert change.old == history[-1], f"{pk}: {change} does not start from {history[-1]}"
        else:
            unknown += 1
        assert (change.kind == "INSERT") == (history[-1] is None), f"{pk}: {change.kind}"
        history.append(change.new)
    return values, unknown


def decoded(values: dict[str, list[Value]]) -> dict[str, list[Value]]:
    """Ledger values (boto3: binary as bytes) in the stream's JSON shape (base64)."""
    return {
        pk: [None if v is None else {k: _as_json(a) for k, a in v.items()} for v in history]
        for pk, history in values.items()
    }


def passes_filters(record: dict[str, Any]) -> bool:
    """Whether Lambda would deliver ``record`` past :data:`PROTOCOL_FILTER_PATTERNS` (OR-ed),
    as moto's implementation of EventBridge's pattern matching (Lambda's syntax) decides."""
    from moto.events.models import EventPattern

    return any(
        EventPattern(None, pattern).matches_event(record) for pattern in PROTOCOL_FILTER_PATTERNS
    )
