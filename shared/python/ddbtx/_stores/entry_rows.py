"""Entry rows: a large TX record's requests, kept out of its header.

Every change to the header is billed for the header's whole size, so a header that held
every request would make a transaction of N requests sent one at a time cost O(N²). Once
the header passes :data:`ROWS_AFTER`, its entries move to rows of their own and every
later add writes one more row: ``e#<version>.<claim>.<part>``, named after the header
version its adder saw and a token of its own. Rows chain backwards (``pv``: the row
before); the header holds only the last accepted row (``tl``), so it stays small and the
commit decision's version check still covers every request.

An add in rows: write the row(s), then accept them (the header moves to the last row, at
exactly the version the adder checked its requests against). Of adders at one version,
one accept wins; the others' rows, and those of an adder that died before accepting,
are never on the chain: readers follow the chain, not the rows, nothing waits on them,
and the record's delete removes every row.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from .. import schema as s
from .._base.effects import Step, query_all, request
from .._base.items import Item, item_size
from ..errors import TransactionError

#: The header moves its entries to rows once it would pass this size (the first add that
#: would take it past moves them, with the add's own).
ROWS_AFTER = 48 * 1024
#: Entries per row, by size: a row stays well under DynamoDB's 400 KB.
ROW_BYTES = 256 * 1024
PREFIX = "e#"
#: An accepted row's entries, request id -> entry (the header's ``rq`` shape).
ENTRIES = "e"
#: The row before this one on the chain (absent: the first).
PREVIOUS = "pv"

#: accept: pending, at exactly the version whose requests the adder checked its own against.
ACCEPT_AT_VERSION = "#st = :p AND #v = :v"


def row_sk(version: int, claim: str, part: int) -> str:
    return f"{PREFIX}{version:012d}.{claim}.{part:04d}"


class EntryRows:
    """Reads and writes of one transactions table's entry rows; stateless."""

    def __init__(self, table: str, *, clock: Callable[[], float], ttl_seconds: int) -> None:
        self.table = table
        self.clock = clock
        self.ttl_seconds = ttl_seconds

    def rows(
        self, tx_id: str, version: int, tail: str | None, entries: dict[str, Any]
    ) -> list[Item]:
        """``entries`` (as the header holds them) laid out in rows chained after ``tail``."""
        expires = {"N": str(int(self.clock() + self.ttl_seconds))}
        claim = secrets.token_hex(6)
        groups: list[dict[str, Any]] = [{}]
        size = 0
        for rid, entry in entries.items():
            grows = item_size({rid: entry})
            if groups[-1] and size + grows > ROW_BYTES:
                groups.append({})
                size = 0
            groups[-1][rid] = entry
            size += grows
        out: list[Item] = []
        previous = tail
        for part, group in enumerate(groups):
            sk = row_sk(version, claim, part)
            row: Item = {
                s.TX_PK: {"S": tx_id},
                s.TX_SK: {"S": sk},
                ENTRIES: {"M": group},
                s.TX_TTL: expires,
            }
            if previous is not None:
                row[PREVIOUS] = {"S": previous}
            out.append(row)
            previous = sk
        return out

    def write(self, row: Item) -> Step[None]:
        """Put a row of this claim's own (its key is unique to it: a resend rewrites it)."""
        yield from request("put_item", TableName=self.table, Item=row)

    def all_rows(
        self, tx_id: str, *, keys_only: bool = False, moved: bool = True
    ) -> Step[list[Item]]:
        """Every entry row of ``tx_id``, accepted or not, in sort-key order (none, without a
        read, unless the record ``moved`` its entries to rows)."""
        if not moved:
            return []
        params: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "#id = :id AND begins_with(#sk, :e)",
            "ExpressionAttributeNames": {"#id": s.TX_PK, "#sk": s.TX_SK},
            "ExpressionAttributeValues": {":id": {"S": tx_id}, ":e": {"S": PREFIX}},
            "ConsistentRead": True,
        }
        if keys_only:
            params["ProjectionExpression"] = "#id, #sk"
        return (yield from query_all(**params))

    def chained(self, tx_id: str, tail: str, *, partial: bool) -> Step[dict[str, Any]]:
        """The entries on the chain ending at ``tail``, a later row's entry for a request
        replacing an earlier one's (rewrites, take-overs)."""
        rows = {row[s.TX_SK]["S"]: row for row in (yield from self.all_rows(tx_id))}
        chain: list[Item] = []
        sk: str | None = tail
        while sk is not None:
            if sk not in rows:
                if partial:  # (a delete under way removes the rows first)
                    break
                raise TransactionError(
                    f"entry row {sk} is gone from the TX record (expired?)", tx_id=tx_id
                )
            chain.append(rows[sk])
            sk = rows[sk].get(PREVIOUS, {}).get("S")
        entries: dict[str, Any] = {}
        for row in reversed(chain):
            entries.update(row[ENTRIES]["M"])
        return entries
