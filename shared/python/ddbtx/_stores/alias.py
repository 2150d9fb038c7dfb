"""Alias rows: the caller's exactly-once id and the transaction that carries it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta

from .. import schema as s
from .._base.effects import Step, insert_new, request
from .._base.items import Item
from ..errors import ConditionFailed

#: An alias outlives a completed record's ``completed_ttl`` by this much, from its creation:
#: room for the transaction to run and be completed before its record's own TTL starts.
ALIAS_TTL_MARGIN = timedelta(days=7)

#: create: the caller's id is free; the first attempt to claim it names its transaction.
CLAIM = "attribute_not_exists(#id)"
#: move: the alias still names the rolled-back (or fenced) transaction this retry read,
#: so of two retries that start over at once exactly one moves it; the other joins that one.
MOVE = "#tx = :old"
#: delete: only the alias of the record being deleted, never one a retry has moved on.
FORGET = "#tx = :tx"


class AliasStore:
    def __init__(self, table: str, *, clock: Callable[[], float], ttl_seconds: int) -> None:
        self.table = table
        self.clock = clock
        self.ttl_seconds = ttl_seconds + int(ALIAS_TTL_MARGIN.total_seconds())

    @staticmethod
    def key(caller_id: str) -> Item:
        return {s.TX_PK: {"S": s.ALIAS_PREFIX + caller_id}, s.TX_SK: {"S": s.ALIAS_SK}}

    def claim(self, caller_id: str, tx_id: str) -> Step[bool]:
        """Name ``tx_id`` under a free caller's id; False when the id is taken."""
        item = {
            **self.key(caller_id),
            s.ALIAS_TX: {"S": tx_id},
            s.TX_TTL: {"N": str(int(self.clock()) + self.ttl_seconds)},
        }
        return (yield from insert_new(self.table, item, CLAIM, s.TX_PK))

    def read(self, caller_id: str) -> Step[str | None]:
        """The transaction the caller's id names now, or None."""
        resp = yield from request(
            "get_item", TableName=self.table, Key=self.key(caller_id), ConsistentRead=True
        )
        item = resp.get("Item")
        return item[s.ALIAS_TX]["S"] if item else None

    def move(self, caller_id: str, old: str, new: str) -> Step[bool]:
        """Name ``new`` instead of the rolled-back ``old``; False when it names another now."""
        try:
            yield from request(
                "update_item",
                TableName=self.table,
                Key=self.key(caller_id),
                UpdateExpression="SET #tx = :new, #ttl = :ttl",
                ConditionExpression=MOVE,
                ExpressionAttributeNames={"#tx": s.ALIAS_TX, "#ttl": s.TX_TTL},
                ExpressionAttributeValues={
                    ":new": {"S": new},
                    ":old": {"S": old},
                    ":ttl": {"N": str(int(self.clock()) + self.ttl_seconds)},
                },
            )
        except ConditionFailed:
            return False
        return True

    def forget(self, caller_id: str, tx_id: str) -> Step[None]:
        """Delete the alias if it still names ``tx_id`` (a record being deleted)."""
        with contextlib.suppress(ConditionFailed):
            yield from request(
                "delete_item",
                TableName=self.table,
                Key=self.key(caller_id),
                ConditionExpression=FORGET,
                ExpressionAttributeNames={"#tx": s.ALIAS_TX},
                ExpressionAttributeValues={":tx": {"S": tx_id}},
            )
