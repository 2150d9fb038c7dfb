"""A table's DynamoDB stream read with GetRecords as a Lambda event delivers it (moto only).

Examples
--------
>>> reader = StreamReader(client, "Accounts")       # doctest: +SKIP
>>> committed_changes(reader.read())                 # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from ._base.items import as_json

__all__ = ["StreamReader", "lambda_record"]


class StreamReader:
    """Reads a table's stream from its start, each :meth:`read` going on where the last stopped.

    Parameters
    ----------
    client
        A boto3 DynamoDB client.
    table
        A table with a stream (``create_data_table(..., stream=True)``).
    streams
        A boto3 ``dynamodbstreams`` client; by default one like ``client``.

    Raises
    ------
    ValueError
        The table has no stream.
    """

    def __init__(self, client: Any, table: str, *, streams: Any = None) -> None:
        if streams is None:
            import boto3

            # botocore has no public accessor for a client's credentials; its signer holds them.
            credentials = client._request_signer._credentials.get_frozen_credentials()
            streams = boto3.client(
                "dynamodbstreams",
                endpoint_url=client.meta.endpoint_url,
                region_name=client.meta.region_name,
                aws_access_key_id=credentials.access_key,
                aws_secret_access_key=credentials.secret_key,
                aws_session_token=credentials.token,
            )
        self.streams = streams
        arn = client.describe_table(TableName=table)["Table"].get("LatestStreamArn")
        if not arn:
            raise ValueError(f"table {table!r} has no stream")
        self.arn: str = arn
        shards = self.streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
        #: Per shard, the last record's sequence number read (None: read from the start).
        self._after: dict[str, str | None] = {shard["ShardId"]: None for shard in shards}

    def read(self) -> list[dict[str, Any]]:
        """The records written since the last read, as ``event["Records"]`` elements."""
        fresh: list[dict[str, Any]] = []
        for shard, after in self._after.items():
            # A fresh iterator each read: moto swaps a table's stream for a copy when it
            # cancels a TransactWriteItems, and an old iterator would read the old one.
            where: dict[str, Any] = (
                {"ShardIteratorType": "TRIM_HORIZON"}
                if after is None
                else {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": after}
            )
            iterator = self.streams.get_shard_iterator(StreamArn=self.arn, ShardId=shard, **where)[
                "ShardIterator"
            ]
            while iterator:
                page = self.streams.get_records(ShardIterator=iterator, Limit=1000)
                iterator = page.get("NextShardIterator")
                fresh.extend(lambda_record(r, self.arn) for r in page["Records"])
                if not page["Records"]:
                    break
                self._after[shard] = page["Records"][-1]["dynamodb"]["SequenceNumber"]
        return fresh


def lambda_record(record: dict[str, Any], stream_arn: str) -> dict[str, Any]:
    """A GetRecords record as a Lambda event carries it: with ``eventSourceARN`` and binary
    values base64-encoded (boto3 decodes them; Lambda's JSON event does not)."""
    body = dict(record["dynamodb"])
    created = body.get("ApproximateCreationDateTime")
    if created is not None and hasattr(created, "timestamp"):
        body["ApproximateCreationDateTime"] = int(created.timestamp())
    for name in ("Keys", "OldImage", "NewImage"):
        if name in body:
            body[name] = {k: as_json(v) for k, v in body[name].items()}
    return {
        "eventID": record["eventID"],
        "eventName": record["eventName"],
        "eventVersion": record.get("eventVersion", "1.1"),
        "eventSource": "aws:dynamodb",
        "awsRegion": record.get("awsRegion", ""),
        "eventSourceARN": stream_arn,
        "dynamodb": body,
    }
