"""What a sweep would do now, read off the sweep index and the records; changes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .. import schema as s
from .._base.effects import Step, request
from ..manager import TransactionManager
from ..recovery import inspect_step
from .scan import ScanPass
from .state import PARTITIONS, Key

#: What a dry run leaves to a real sweep: it reads the transactions table alone.
NOT_READ = (
    "orphan images, stray item locks and expired lock rows: a dry run reads only the "
    "transactions table"
)


@dataclass
class Survey:
    """The sweep index read as a plan: each record not completed and what a sweep would do."""

    tm: TransactionManager
    scans: ScanPass
    rollback_after: timedelta
    decided_grace: timedelta
    page_size: int

    def pending(self) -> Step[list[dict[str, Any]]]:
        """Every record not completed, oldest first, as ``inspect`` shows it plus ``plan``
        (what a sweep would do, in words) and ``acts`` (whether it would change anything)."""
        ids: list[str] = []
        for tag, shard in PARTITIONS:
            if tag != s.STATE_COMPLETED_TAG:
                ids += yield from self.ids_in(tag, shard)
        found = []
        for tx_id in ids:
            seen = yield from inspect_step(self.tm, tx_id)
            if seen["found"] and not seen["completed"]:  # not finished meanwhile
                acts, plan = self.plan(seen["state"], seen["age_seconds"])
                found.append({**seen, "plan": plan, "acts": acts})
        return sorted(found, key=lambda t: (t["updated_ms"], t["transaction_id"]))

    def dry_run(self, delete_cutoff_ms: int) -> Step[dict[str, Any]]:
        """:meth:`pending`, the completed records last changed before ``delete_cutoff_ms``
        (a sweep deletes them) and what a dry run does not look at."""
        transactions = yield from self.pending()
        due = 0
        for shard in range(s.SWEEP_SHARDS):
            due += len((yield from self.ids_in(s.STATE_COMPLETED_TAG, shard, delete_cutoff_ms)))
        return {
            "transactions": transactions,
            "records_to_delete": due,
            "not_looked_at": [NOT_READ, *self.scans.not_covered()],
        }

    def plan(self, state: str, age_seconds: float) -> tuple[bool, str]:
        """Whether a sweep would act now on a record in ``state`` (not completed), last
        changed ``age_seconds`` ago, and what it would do, in words."""
        if state == "pending":
            limit = self.rollback_after.total_seconds()
            if age_seconds > limit:
                return True, f"roll back: pending, stale for {age_seconds - limit:.0f} s"
            return False, f"leave: active (stale in {limit - age_seconds:.0f} s)"
        limit = self.decided_grace.total_seconds()
        verb = "roll forward" if state == "committed" else "complete the rollback"
        if age_seconds > limit:
            return True, f"{verb}: decided {age_seconds:.0f} s ago"
        wait = limit - age_seconds
        return False, f"leave: its coordinator may still {verb} (a sweep will in {wait:.0f} s)"

    def ids_in(self, tag: str, shard: int, cutoff: int | None = None) -> Step[list[str]]:
        """Every TX record id in the sweep index's partition ``tag#shard`` (last changed
        before ``cutoff``, where given)."""
        ids: list[str] = []
        key: Key | None = None
        while True:
            page = yield from self.index_page(tag, shard, key, cutoff)
            ids += [
                hit[s.TX_PK]["S"]
                for hit in page.get("Items", [])
                if hit[s.TX_SK]["S"] == s.TX_HEADER_SK
            ]
            key = page.get("LastEvaluatedKey")
            if not key:
                return ids

    def index_page(
        self, tag: str, shard: int, key: Key | None, cutoff: int | None = None
    ) -> Step[dict[str, Any]]:
        """A page of the sweep index's partition ``tag#shard`` (of the records last changed
        before ``cutoff``, where given), from ``key``."""
        condition = "#sw = :sw"
        names = {"#sw": s.TX_SWEEP_KEY}
        values: dict[str, Any] = {":sw": {"S": f"{tag}#{shard}"}}
        if cutoff is not None:
            condition += " AND #ts < :cutoff"
            names["#ts"] = s.TX_UPDATED
            values[":cutoff"] = {"N": str(cutoff)}
        params: dict[str, Any] = {"ExclusiveStartKey": key} if key else {}
        page: dict[str, Any] = yield from request(
            "query",
            TableName=self.tm.transactions_table,
            IndexName=s.SWEEP_INDEX,
            KeyConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            Limit=self.page_size,
            **params,
        )
        return page
