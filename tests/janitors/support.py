"""Helpers of the janitor tests: the Lambda context double, events, handler loading,
abandoned transactions and EMF parsing."""

from __future__ import annotations

import importlib.util
import json
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ddbtx import TransactionManager, schema
from ddbtx._cli.invoke import scheduled_event as local_scheduled_event
from helpers import Tables

ROOT = Path(__file__).resolve().parents[2]
#: Coordinator clocks: 2001 (records long stale by the handler's clock) and 2096 (fresh).
LONG_AGO = 1_000_000_000.0
FAR_FUTURE = 4_000_000_000.0
ROLLBACK_AFTER = 60
DELETE_AFTER = 3600


@dataclass
class LambdaContext:
    """The attributes Lambda's context object has, with a scripted clock.

    ``checks_left`` is how many calls of ``get_remaining_time_in_millis`` still
    see plenty of time; after that the function is one second from its timeout.
    """

    function_name: str = "ddbtx-janitor"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:ddbtx-janitor"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    checks_left: int | None = None

    def get_remaining_time_in_millis(self) -> int:
        if self.checks_left is None:
            return 300_000
        if self.checks_left > 0:
            self.checks_left -= 1
            return 300_000
        return 1_000


def scheduled_event() -> dict[str, Any]:
    """An EventBridge scheduled event as the sweeper's rule delivers it."""
    return {
        **local_scheduled_event(),
        "account": "123456789012",
        "time": "2026-11-21T18:00:00Z",
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/ddbtx-SweepSchedule"],
    }


@dataclass
class JanitorTables(Tables):
    locks: str = ""


def load_handler(function: str) -> ModuleType:
    """Import ``functions/<function>/handler.py`` afresh: a cold start with the current env."""
    path = ROOT / "functions" / function / "handler.py"
    spec = importlib.util.spec_from_file_location(f"{function}_handler_{uuid.uuid4().hex}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Lambda imports the handler as a regular module; pydantic resolves its models there.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def transfer(
    tm: TransactionManager,
    table: str,
    source: str,
    target: str,
    amount: int,
    caller_id: str | None = None,
) -> Any:
    """Move ``amount`` between two seeded accounts in a transaction left pending
    (begun under ``caller_id``, if given)."""
    tx = tm.begin(transaction_id=caller_id) if caller_id else tm.begin()
    for pk, sign in ((source, "-"), (target, "+")):
        tx.update_item(
            TableName=table,
            Key={"pk": {"S": pk}},
            UpdateExpression=f"SET balance = balance {sign} :n",
            ExpressionAttributeValues={":n": {"N": str(amount)}},
        )
    return tx


def abandon(
    tm: TransactionManager,
    table: str,
    stage: str,
    pair: tuple[str, str],
    caller_id: str | None = None,
) -> str:
    """Leave a transfer as a coordinator that died at ``stage`` would; return its
    (internal) id. ``caller_id``: begun under that caller's id.

    ``pending``: both items locked and written, no decision. ``committed`` /
    ``rolled_back``: decided, nothing completed. ``completed``: committed and
    completed, the record kept.
    """
    tx = transfer(tm, table, pair[0], pair[1], 10, caller_id)
    if stage == "committed":
        tm.protocol.run(tm.protocol.records.decide(tx.id, schema.STATE_COMMITTED))
    elif stage == "rolled_back":
        tm.protocol.run(tm.protocol.records.decide(tx.id, schema.STATE_ROLLED_BACK))
    elif stage == "completed":
        tx.commit()
    else:
        assert stage == "pending", stage
    return str(tx.id)


def emf_metrics(output: str) -> dict[str, float]:
    """Metric values of every CloudWatch EMF document printed to stdout."""
    values: dict[str, float] = {}
    for line in output.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if not isinstance(doc, dict) or "_aws" not in doc:
            continue
        for directive in doc["_aws"]["CloudWatchMetrics"]:
            assert directive["Namespace"] == "ddbtx"
            assert ["service"] in directive["Dimensions"]
            for metric in directive["Metrics"]:
                value = doc[metric["Name"]]
                values[metric["Name"]] = sum(value) if isinstance(value, list) else value
    return values


def drop_record(client: Any, tables: Tables, tx_id: str) -> None:
    """Delete a TX record header behind the protocol's back (as a lost record would be)."""
    key = {schema.TX_PK: {"S": tx_id}, schema.TX_SK: {"S": schema.TX_HEADER_SK}}
    client.delete_item(TableName=tables.tx, Key=key)


def orphan_locks(tm: TransactionManager, client: Any, tables: Tables, count: int) -> None:
    """Seeded items k0.. read-locked by one transaction whose TX record is then lost."""
    tx = tm.begin()
    for i in range(count):
        tx.get_item(TableName=tables.data, Key={"pk": {"S": f"k{i}"}})
    drop_record(client, tables, tx.id)


def sweep_until_complete(
    module: ModuleType, checks_left: int | None = None, limit: int = 20
) -> list[dict[str, Any]]:
    """Invoke the sweeper handler on scheduled ticks until a run completes; every report."""
    reports: list[dict[str, Any]] = []
    while not reports or not reports[-1]["exhausted"]:
        assert len(reports) < limit, "the sweep made no progress"
        reports.append(module.handler(scheduled_event(), LambdaContext(checks_left=checks_left)))
    return reports
