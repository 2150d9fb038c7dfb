"""Workload 3: list-append histories over every read API and every way a transaction ends.

Writers run transactions of 1 to 5 micro-operations on 16 keys: ``append``
adds a globally unique number to a key's list (``list_append``), and reads go
through ``tx.get_item``, ``tx.batch_get_item``, ``tx.query`` and ``tx.scan``.
Each transaction ends one way, drawn by seed: commit, a ``with`` block,
``tm.run`` (each attempt is its own transaction in the history), a deliberate
rollback, a false condition, or an abort by contention (wound-wait, a conflict,
a stale holder broken). A crash (armed as in :mod:`.sim`) leaves the
transaction to a rescuer, drawn too: ``tm.resume`` then commit, ``tm.resume``
then rollback, ``tm.sweep`` of that one record, or the ``Sweeper`` alone.

Observers read outside any transaction with ``tm.get_item``, ``tm.query``,
``tm.scan`` (one page, or pages of three) and ``tm.batch_get_item``, at
``COMMITTED`` and ``SERIALIZABLE``.

Half the keys exist from the start (an empty list), half are created by their
first append. ``tx.query``/``tx.scan`` read only the first half: a range read in
a transaction locks what it returns, not the range (an insert after it is a
phantom, which the README's claims table leaves out); every other read covers
every key. After the run and the final sweeps, each key's list is read back and
the whole history is checked (:mod:`.history`) against the claims of
:mod:`.claims`.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ddbtx import Isolation, SweepOutcome, Transaction
from ddbtx.chaos import Crash
from ddbtx.errors import DdbtxError, TransactionCommittedError, TransactionError

from .claims import isolation_of
from .env import KEEP, Env, Synced
from .history import FAIL, INFO, OK, SERIALIZABLE, MicroOp, Txn, append, check, read
from .report import Report
from .sim import Process, Simulation

ATTR = "v"
ENDINGS = ("commit", "with", "run", "rollback", "false-condition")
#: Most transactions mean to commit; the deliberate failures are fewer.
ENDING_WEIGHTS = (4, 3, 4, 1, 1)
RESCUES = ("resume-commit", "resume-rollback", "sweep", "sweeper")
READS_IN_TX = ("get_item", "batch_get_item", "query", "scan")
OBSERVER_READS = ("get_item", "query", "scan", "scan_pages", "batch_get_item")
LEVELS = (Isolation.COMMITTED, Isolation.SERIALIZABLE)
#: What ``tm.sweep`` of a crashed transaction tells of its outcome (others: not known).
SWEPT = {
    SweepOutcome.ROLLED_BACK: FAIL,
    SweepOutcome.COMPLETED: FAIL,
    SweepOutcome.ROLLED_FORWARD: OK,
}


class Recorder:
    """The history as invoked and completed, shared by every process, and its tallies."""

    def __init__(self) -> None:
        self.txns: list[Txn] = []
        self.tally: Counter[str] = Counter()
        self._ids = itertools.count(1)
        self._values = itertools.count(1)
        self._lock = threading.Lock()

    def next_value(self) -> int:
        with self._lock:
            return next(self._values)

    def add(
        self, ops: list[MicroOp], status: str, process: int, isolation: str, **how: Any
    ) -> None:
        with self._lock:
            self.txns.append(Txn(next(self._ids), ops, status, isolation, process, **how))

    def count(self, what: str) -> None:
        with self._lock:
            self.tally[what] += 1


def values_of(item: dict[str, Any] | None) -> tuple[int, ...]:
    return tuple(int(v["N"]) for v in (item or {}).get(ATTR, {}).get("L", []))


@dataclass
class Keys:
    """One history's keys: ``seeded`` exist from the start, ``fresh`` are made by appends."""

    prefix: str
    seeded: list[str]
    fresh: list[str]
    all: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.all = self.seeded + self.fresh

    @classmethod
    def for_history(cls, seed: int, per_kind: int = 8) -> Keys:
        prefix = f"la{seed}-"
        return cls(
            prefix,
            [f"{prefix}s{k}" for k in range(per_kind)],
            [f"{prefix}f{k}" for k in range(per_kind)],
        )


class Reader:
    """Reads of the workload's keys through each API, as micro-ops (absent: the empty list)."""

    def __init__(self, table: str, keys: Keys) -> None:
        self.table = table
        self.keys = keys

    def _range(self, prefix: str) -> dict[str, Any]:
        return {
            "TableName": self.table,
            "FilterExpression": "begins_with(pk, :p)",
            "ExpressionAttributeValues": {":p": {"S": prefix}},
        }

    def ops(self, api: str, reader: Any, rng: random.Random, **level: Any) -> list[MicroOp]:
        """One read through ``api`` of ``reader`` (a Transaction or a TransactionManager)."""
        table = self.table
        if api == "get_item":
            key = rng.choice(self.keys.all)
            item = reader.get_item(TableName=table, Key={"pk": {"S": key}}, **level).get("Item")
            return [read(key, values_of(item))]
        if api == "query":
            key = rng.choice(self.keys.seeded if not level else self.keys.all)
            page = reader.query(
                TableName=table,
                KeyConditionExpression="pk = :k",
                ExpressionAttributeValues={":k": {"S": key}},
                **level,
            )
            return [read(key, values_of(page["Items"][0] if page["Items"] else None))]
        if api == "batch_get_item":
            keys = rng.sample(self.keys.all, rng.randint(2, 4))
            response = reader.batch_get_item(
                RequestItems={table: {"Keys": [{"pk": {"S": k}} for k in keys]}}, **level
            )
            if response.get("UnprocessedKeys"):
                return []  # not a whole answer: left out rather than guessed at
            found = {i["pk"]["S"]: i for i in response["Responses"].get(table, [])}
            return [read(k, values_of(found.get(k))) for k in keys]
        if api == "scan":
            # In a transaction only the keys that always exist (see the module's docstring).
            keys = self.keys.all if level else self.keys.seeded
            prefix = self.keys.prefix if level else self.keys.prefix + "s"
            page = reader.scan(**self._range(prefix), **level)
            found = {i["pk"]["S"]: i for i in page["Items"]}
            assert "LastEvaluatedKey" not in page
            return [read(k, values_of(found.get(k))) for k in keys]
        if api == "scan_pages":
            # Each page is its own snapshot: a page shows what it holds, nothing about the rest.
            pages = reader.scan_pages(**self._range(self.keys.prefix), Limit=3, **level)
            first = next(iter(pages))
            return [read(i["pk"]["S"], values_of(i)) for i in first["Items"]]
        raise ValueError(api)


class ListAppend:
    """Writers and observers of one history."""

    def __init__(self, env: Env, keys: Keys, recorder: Recorder, txns: int, writers: int) -> None:
        self.env = env
        self.keys = keys
        self.recorder = recorder
        self.txns = txns
        self.writers = writers
        self.reader = Reader(env.data_table, keys)

    def process(self, proc: Process) -> None:
        if proc.number < self.writers:
            for _ in range(self.txns):
                self.transaction(proc)
        else:
            for _ in range(self.txns * 2):
                self.observe(proc)

    # -- writers -----------------------------------------------------------------------

    def plan(self, rng: random.Random) -> list[tuple[str, str]]:
        out = []
        for _ in range(rng.randint(1, 5)):
            if rng.random() < 0.5:
                out.append(("append", rng.choice(self.keys.all)))
            else:
                out.append(("read", rng.choice(READS_IN_TX)))
        return out

    def body(
        self, tx: Transaction, plan: list[tuple[str, str]], ops: list[MicroOp], rng: random.Random
    ) -> None:
        for f, what in plan:
            if f == "read":
                ops.extend(self.reader.ops(what, tx, rng))
                continue
            value = self.recorder.next_value()
            ops.append(append(what, value))  # invoked: it may apply even if the call fails
            self.send_append(tx, what, value)

    def send_append(self, tx: Transaction, key: str, value: int, **condition: Any) -> None:
        names = {"#v": ATTR, **condition.pop("names", {})}
        values = {":empty": {"L": []}, ":x": {"L": [{"N": str(value)}]}}
        tx.update_item(
            TableName=self.env.data_table,
            Key={"pk": {"S": key}},
            UpdateExpression="SET #v = list_append(if_not_exists(#v, :empty), :x)",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues={**values, **condition.pop("values", {})},
            **condition,
        )

    def transaction(self, proc: Process) -> None:
        """One writer transaction, ended the way the seed draws; recorded with its outcome."""
        rng = proc.rng
        (ending,) = rng.choices(ENDINGS, ENDING_WEIGHTS)
        plan = self.plan(rng)
        attempts: list[tuple[Transaction, list[MicroOp]]] = []

        def work(tx: Transaction) -> None:
            ops: list[MicroOp] = []
            attempts.append((tx, ops))
            self.body(tx, plan, ops, rng)
            if ending == "false-condition":
                value = self.recorder.next_value()
                ops.append(append(rng.choice(self.keys.all), value))
                # A condition no list meets: the request is refused, the transaction rolled back.
                self.send_append(
                    tx,
                    ops[-1].key,
                    value,
                    ConditionExpression="#v = :never",
                    values={":never": {"S": "never"}},
                )

        fault = proc.arm()
        crashed = False
        try:
            status = self._end(proc.tm, ending, work)
        except Crash:
            crashed = True
            status = INFO
        except DdbtxError as exc:
            self.recorder.count(f"error {type(exc).__name__}")
            status = proc.resolve(attempts[-1][0]) if attempts else FAIL
        finally:
            if fault is not None:
                fault.close()
        if not attempts:
            return  # crashed or refused before the first attempt began: nothing was sent
        how: dict[str, Any] = {}
        if crashed:
            proc.tm = proc.restart()  # the process died: a new one starts with no memory
            status, how = self.rescue(proc, attempts[-1])
        for n, (tx, ops) in enumerate(attempts[:-1]):  # run's failed attempts
            self.recorder.add(ops, FAIL, proc.number, SERIALIZABLE, note=f"{ending} #{n} {tx.id}")
        last, ops = attempts[-1]
        note = f"{ending} #{len(attempts) - 1} {last.id} ({proc.driver})"
        if how:
            note += f" crashed, then {how.pop('rescue')}"
        self.recorder.add(ops, status, proc.number, SERIALIZABLE, note=note, **how)
        self.recorder.count(f"writer {ending}: {status}")
        self.recorder.count(f"{proc.driver} writer transactions")
        proc.sim.counts["transactions"] += len(attempts)
        proc.sim.tick()

    @staticmethod
    def _end(tm: Any, ending: str, work: Callable[[Transaction], None]) -> str:
        """Run ``work`` and end it as ``ending`` says: OK when it committed, FAIL when the
        deliberate rollback went through (errors propagate). ``tm`` is a sync manager or
        an asyncio one behind sync calls (``async with``, and ``run`` of async work)."""
        if ending == "with":
            with tm.transaction() as tx:
                work(tx)
        elif ending == "run":
            tm.run(tm.in_thread(work) if isinstance(tm, Synced) else work, attempts=3)
        else:
            tx = tm.begin()
            work(tx)
            if ending == "rollback":
                tx.rollback()
                return FAIL
            tx.commit()
        return OK

    def rescue(
        self, proc: Process, attempt: tuple[Transaction, list[MicroOp]]
    ) -> tuple[str, dict[str, Any]]:
        """Another coordinator (or a janitor) takes a crashed transaction over."""
        crashed, ops = attempt
        rescue = proc.rng.choice(RESCUES)
        self.recorder.count(f"rescue {rescue}")
        # The op in flight at the crash may or may not have been recorded and applied.
        in_flight = {ops[-1].value} if ops and ops[-1].f == "append" else set()
        how: dict[str, Any] = {
            "uncertain": frozenset(v for v in in_flight if isinstance(v, int)),
            "rescue": rescue,
        }
        tm = self.env.coordinator(client=self.env.client(fresh=True))
        try:
            if rescue == "resume-commit":
                tm.resume(crashed.id).commit()
                return OK, how
            if rescue == "resume-rollback":
                tm.resume(crashed.id).rollback()
                return FAIL, how
            if rescue == "sweep":
                # The rescuer knows the coordinator is dead: no age to wait for.
                outcome = tm.sweep(crashed.id, rollback_after=timedelta(0), delete_after=KEEP)
                return SWEPT.get(outcome, INFO), how
        except TransactionCommittedError:
            return OK, how
        except TransactionError:
            return INFO, how  # rolled back, or gone (a janitor completed it): not known here
        return INFO, how  # left to the Sweeper

    # -- observers ---------------------------------------------------------------------

    def observe(self, proc: Process) -> None:
        """One read outside any transaction, through an API and at a level the seed draws."""
        rng = proc.rng
        api = rng.choice(OBSERVER_READS)
        level = rng.choice(LEVELS)
        fault = proc.arm()
        try:
            ops = self.reader.ops(api, proc.tm, rng, isolation=level)
        except Crash:
            proc.tm = proc.restart()
            return
        except DdbtxError:
            self.recorder.count(f"observer {api} {level.value}: refused")
            return  # a read that failed observed nothing
        finally:
            if fault is not None:
                fault.close()
        label = isolation_of(f"tm.{api}", level.value)
        note = f"tm.{api} {level.value} ({proc.driver})"
        self.recorder.add(ops, OK, proc.number, label, note=note)
        self.recorder.count(f"observer {api} {level.value}")
        self.recorder.count(f"{proc.driver} observer reads")
        proc.sim.tick()


def run_history(env: Env, report: Report, seed: int, txns: int, **sim_options: Any) -> None:
    """One history: run it under faults, recover, check it; anomalies go to the report."""
    keys = Keys.for_history(seed)
    for key in keys.seeded:
        env.client().put_item(TableName=env.data_table, Item={"pk": {"S": key}, ATTR: {"L": []}})
    recorder = Recorder()
    writers = sim_options.pop("processes", 3)  # the writers; observers come on top
    observers = sim_options.pop("observers", 2)
    sim_options.setdefault("aio", True)  # sync and asyncio coordinators, writers and readers
    sim = Simulation(env, seed, processes=writers + observers, **sim_options)
    sim.run(ListAppend(env, keys, recorder, txns, writers).process)
    final = {key: values_of(env.item(key)) for key in keys.all}
    anomalies = check(recorder.txns, final)
    found = [str(a) for a in anomalies]
    found += sim.errors + env.residue(keys.all, [])
    report.counts["histories"] += 1
    report.counts["transactions"] += sim.counts["transactions"]
    tally(report, recorder.txns, anomalies, writers)
    report.counts.update(recorder.tally)
    if found:
        report.anomaly(
            f"history seed {seed}: " + "; ".join(found[:5]) + described(recorder.txns, anomalies),
            "--history-seed",
            str(seed),
        )


def described(txns: list[Txn], anomalies: list[Any]) -> str:
    """How each transaction of the first anomalies ran (ending, attempt, TX id, rescue)."""
    involved = {n for anomaly in anomalies[:5] for n in anomaly.txns}
    lines = [f"txn {t.id} ({t.status}): {t.note}" for t in txns if t.id in involved]
    return "".join(f"\n    {line}" for line in lines)


def tally(report: Report, txns: list[Txn], anomalies: list[Any], writers: int) -> None:
    """The figures CI prints: outcomes, reads checked, anomalies by kind."""
    counts = report.counts
    for t in txns:
        counts[f"{'writer' if t.process < writers else 'observer'} {t.status}"] += 1
        if t.status == OK:
            counts["reads checked"] += sum(op.f == "r" for op in t.ops)
    for anomaly in anomalies:
        counts[f"anomaly {anomaly.kind}"] += 1


def run_list_append(
    env: Env, report: Report, *, histories: int, txns: int, **sim_options: Any
) -> None:
    for h in range(histories):
        run_history(env, report, report.seed * 10_000 + h, txns, **sim_options)
