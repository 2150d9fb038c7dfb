"""Workload 3: list-append transactions under faults, checked for G0, G1a/b/c and G2-item.

Transactions of 1 to 5 micro-operations on a few keys: ``append`` adds a
globally unique number to the key's list, ``read`` reads the list under a read
lock (serializable). Some operations are single reads outside any transaction
at read committed. Every invocation and completion is recorded; after the run
and the final sweep the lists are read back and the whole history is checked.
"""

from __future__ import annotations

import functools
import itertools
import threading
from typing import Any

from ddbtx import Isolation, Transaction
from ddbtx.errors import DdbtxError

from .env import Env
from .history import COMMITTED, OK, MicroOp, Txn, append, check, read
from .report import Report
from .sim import Process, Simulation

ATTR = "v"


class Recorder:
    """The history as invoked and completed, shared by every process."""

    def __init__(self) -> None:
        self.txns: list[Txn] = []
        self._ids = itertools.count(1)
        self._values = itertools.count(1)
        self._lock = threading.Lock()

    def next_value(self) -> int:
        with self._lock:
            return next(self._values)

    def add(self, ops: list[MicroOp], status: str, process: int, isolation: str) -> None:
        with self._lock:
            self.txns.append(Txn(next(self._ids), ops, status, isolation, process))


def values_of(resp: dict[str, Any]) -> tuple[int, ...]:
    return tuple(int(v["N"]) for v in resp.get("Item", {}).get(ATTR, {}).get("L", []))


class ListAppend:
    def __init__(self, env: Env, keys: list[str], recorder: Recorder, txns: int) -> None:
        self.env = env
        self.keys = keys
        self.recorder = recorder
        self.txns = txns

    def process(self, proc: Process) -> None:
        for _ in range(self.txns):
            if proc.rng.random() < 0.15:
                self._committed_read(proc)
                continue
            plan = [
                (proc.rng.choice(("r", "append")), proc.rng.choice(self.keys))
                for _ in range(proc.rng.randint(1, 5))
            ]
            ops: list[MicroOp] = []
            status, _ = proc.transact(functools.partial(self._body, plan=plan, ops=ops))
            self.recorder.add(ops, status, proc.number, "serializable")

    def _body(self, tx: Transaction, plan: list[tuple[str, str]], ops: list[MicroOp]) -> None:
        table = self.env.data_table
        for f, key in plan:
            pk = {"pk": {"S": key}}
            if f == "r":
                ops.append(read(key, values_of(tx.get_item(TableName=table, Key=pk))))
                continue
            value = self.recorder.next_value()
            ops.append(append(key, value))  # invoked: it may apply even if the call fails
            tx.update_item(
                TableName=table,
                Key=pk,
                UpdateExpression="SET #v = list_append(if_not_exists(#v, :empty), :x)",
                ExpressionAttributeNames={"#v": ATTR},
                ExpressionAttributeValues={":empty": {"L": []}, ":x": {"L": [{"N": str(value)}]}},
            )

    def _committed_read(self, proc: Process) -> None:
        key = proc.rng.choice(self.keys)
        try:
            resp = proc.tm.get_item(
                TableName=self.env.data_table, Key={"pk": {"S": key}}, isolation=Isolation.COMMITTED
            )
        except DdbtxError:
            return  # a read that failed observed nothing
        self.recorder.add([read(key, values_of(resp))], OK, proc.number, COMMITTED)


def run_history(env: Env, report: Report, seed: int, txns: int, **sim_options: Any) -> None:
    """One history: run it under faults, recover, check it; anomalies go to the report."""
    keys = [f"la{seed}-{k}" for k in range(4)]
    recorder = Recorder()
    sim = Simulation(env, seed, **sim_options)
    sim.run(ListAppend(env, keys, recorder, txns).process)
    final = {}
    for key in keys:
        item = env.item(key) or {}
        final[key] = tuple(int(v["N"]) for v in item.get(ATTR, {}).get("L", []))
    found = [str(a) for a in check(recorder.txns, final)]
    found += sim.errors + env.residue(keys, [])
    report.counts["histories"] += 1
    report.counts["transactions"] += sim.counts["transactions"]
    if found:
        report.anomaly(f"history seed {seed}: " + "; ".join(found[:5]), "--history-seed", str(seed))


def run_list_append(
    env: Env, report: Report, *, histories: int, txns: int, **sim_options: Any
) -> None:
    for h in range(histories):
        run_history(env, report, report.seed * 10_000 + h, txns, **sim_options)
