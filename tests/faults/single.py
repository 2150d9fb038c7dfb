"""Workload 1: one fault at every DynamoDB call of every small transaction shape.

A *schedule* is a transaction shape (1 to 3 items, each inserted, updated,
deleted or read-locked), how the victim ends it (commit or roll back), a fault
kind, the index of the DynamoDB call it hits, and who completes the job (the
sweeper, or another coordinator resuming the transaction). Every schedule must
end atomic and matching the decided state, with nothing left behind.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import random
import re
import sys
import uuid
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from botocore.exceptions import ClientError

from ddbtx import TransactionManager
from ddbtx import schema as s
from ddbtx._base.items import request_id
from ddbtx.chaos import Crash
from ddbtx.errors import DdbtxError, TransactionNotFoundError
from ddbtx.sweeper import Sweeper

from .env import KEEP, ROLLBACK_AGE, Env
from .inject import KINDS, Fault
from .report import Report

OPS = ("insert", "update", "delete", "read")
ENDINGS = ("commit", "rollback")
RESCUERS = ("sweeper", "resume")
DRIVERS = ("sync", "aio")
#: What the intruder writes to every item of the paused victim's transaction.
COMPETITOR_BALANCE = 555
#: Schedules between two progress lines on stderr.
PROGRESS_EVERY = 500
#: Bound on call indexes tried per shape (a 3-item shape makes fewer than 40 calls).
MAX_CALLS = 60

Item = dict[str, Any]


def shapes(max_items: int = 3) -> list[tuple[str, ...]]:
    """Every multiset of 1..max_items operations (order fixed: the ops' own order)."""
    out: list[tuple[str, ...]] = []
    for n in range(1, max_items + 1):
        out.extend(itertools.combinations_with_replacement(OPS, n))
    return out


@dataclass(frozen=True)
class Schedule:
    shape: tuple[str, ...]
    ending: str
    kind: str
    index: int
    rescuer: str
    skew: float = 0.0
    #: The victim's driver: ``sync`` (ddbtx on boto3) or ``aio`` (ddbtx.aio on aiobotocore).
    driver: str = "sync"

    def spec(self) -> str:
        """Text form for ``--schedule`` (see :func:`parse`)."""
        shape = ",".join(self.shape)
        spec = f"{shape}/{self.ending}/{self.kind}/{self.index}/{self.rescuer}/{self.skew:g}"
        return spec if self.driver == "sync" else f"{spec}/{self.driver}"


def parse(spec: str) -> Schedule:
    shape, ending, kind, index, rescuer, skew, *driver = spec.split("/")
    return Schedule(
        tuple(shape.split(",")), ending, kind, int(index), rescuer, float(skew), *driver
    )


def initial_state(shape: tuple[str, ...], keys: list[str]) -> dict[str, Item | None]:
    return {
        pk: None if op == "insert" else {"pk": {"S": pk}, "balance": {"N": str(100 + j)}}
        for j, (pk, op) in enumerate(zip(keys, shape, strict=True))
    }


def effect(op: str, pk: str, item: Item | None) -> Item | None:
    """The model: what a committed request does to the item."""
    if op == "insert":
        return {"pk": {"S": pk}, "balance": {"N": "7"}}
    if op == "update":
        assert item is not None
        return {**item, "balance": {"N": str(int(item["balance"]["N"]) + 5)}}
    if op == "delete":
        return None
    return item


def run_request(tx: Any, table: str, op: str, pk: str) -> Any:
    key = {"pk": {"S": pk}}
    if op == "insert":
        return tx.put_item(
            TableName=table,
            Item={**key, "balance": {"N": "7"}},
            ConditionExpression="attribute_not_exists(pk)",
        )
    if op == "update":
        return tx.update_item(
            TableName=table,
            Key=key,
            UpdateExpression="SET balance = balance + :n",
            ConditionExpression="balance >= :z",
            ExpressionAttributeValues={":n": {"N": "5"}, ":z": {"N": "0"}},
        )
    if op == "delete":
        return tx.delete_item(TableName=table, Key=key)
    return tx.get_item(TableName=table, Key=key)


class Run:
    """One schedule, executed and checked."""

    def __init__(self, env: Env, schedule: Schedule) -> None:
        self.env = env
        self.sc = schedule
        run = uuid.uuid4().hex[:8]
        self.keys = [f"{run}-{j}" for j in range(len(schedule.shape))]
        self.initial = initial_state(schedule.shape, self.keys)
        self.problems: list[str] = []
        self.at_pause: str | None = "unpaused"
        self.overwritten = False
        self.tx_ids: list[str] = []

    # -- the pause: the world moves on while the victim sleeps -----------------------

    def _intrude(self) -> None:
        env = self.env
        header = env.header(self.tx_ids[0])
        self.at_pause = header[s.TX_STATE]["S"] if header else None
        env.clock.advance(3 * ROLLBACK_AGE)
        env.sweep_ids(env.coordinator(), self.tx_ids[:1], rollback_after=ROLLBACK_AGE)
        self._compete()

    def _compete(self) -> None:
        """A competitor's transaction overwrites every item of the victim's."""
        tx = self.env.coordinator().begin()
        self.tx_ids.append(tx.id)
        for pk in self.keys:
            tx.put_item(
                TableName=self.env.data_table,
                Item={"pk": {"S": pk}, "balance": {"N": str(COMPETITOR_BALANCE)}},
            )
        tx.commit()

    # -- the late copy: an old call sent again once the world has moved on -----------

    def _late_copies(self, sent: list[tuple[str, dict[str, Any]]]) -> None:
        """After the victim's transaction is finished and a competitor has overwritten its
        items, the remembered calls arrive again, in their order, twice over, verbatim; then
        the sweeper's pass over the data table releases any lock a copy took for a finished
        transaction."""
        env = self.env
        self.overwritten = True  # what the competitor wrote is what must stand
        self._compete()
        client = env.client()
        for operation, params in sent * 2:
            send = getattr(client, re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower())
            # a copy whose condition fails is refused: that is the fence at work
            with contextlib.suppress(ClientError):
                send(**copy.deepcopy(params))
        Sweeper(
            env.coordinator(),
            rollback_after=timedelta(seconds=ROLLBACK_AGE),
            delete_after=KEEP,
            data_tables=[env.data_table],
            persist_cursor=False,
        ).run()

    # -- the schedule ----------------------------------------------------------

    def execute(self) -> bool:
        """Run the schedule; False when the fault never fired (index past the last call)."""
        env, sc = self.env, self.sc
        client = env.client()
        for item in self.initial.values():
            if item is not None:
                client.put_item(TableName=env.data_table, Item=item)
        # One attempt per call for throttling: retries run out at once (no backoff sleeps).
        attempts = 1 if sc.kind == "throttle" else 3
        if sc.driver == "aio":
            victim = env.aio_coordinator(offset=sc.skew, max_attempts=attempts)
        else:
            victim = env.coordinator(offset=sc.skew, max_attempts=attempts)
        tx = victim.begin()
        self.tx_ids.append(tx.id)
        fault = Fault(victim.client, sc.kind, sc.index, self._intrude)
        reads: dict[str, Any] = {}
        try:
            for pk, op in zip(self.keys, sc.shape, strict=True):
                reads[pk] = run_request(tx, env.data_table, op, pk)
            getattr(tx, sc.ending)()
            outcome = "committed" if sc.ending == "commit" else "rolled_back"
        except Crash:
            outcome = "crashed"
        except DdbtxError as exc:
            outcome = type(exc).__name__
        except Exception as exc:  # anything else is a defect in itself
            outcome = type(exc).__name__
            self.problems.append(f"victim raised {exc!r}")
        finally:
            fault.close()
        if not fault.fired:
            return False
        self._check_victim(outcome, reads)
        try:
            decided_at_crash = self._state(tx.id)
            self._rescue(tx.id, victim)
            if fault.copy is not None and fault.copy.sent:
                self._late_copies(fault.copy.sent)
            self._check_outcome(tx.id, outcome, decided_at_crash)
        except Exception as exc:  # a recovery or a committed read that fails is itself a finding
            self.problems.append(f"recovery or checking raised {exc!r}")
        return True

    def _state(self, tx_id: str) -> str | None:
        header = self.env.header(tx_id)
        return header[s.TX_STATE]["S"] if header else None

    def _rescue(self, tx_id: str, victim: TransactionManager) -> None:
        env = self.env
        env.clock.advance(3 * ROLLBACK_AGE)
        rescuer = env.coordinator()
        if self.sc.rescuer == "resume":
            try:
                tx = rescuer.resume(tx_id)
                if tx.state == s.STATE_PENDING:
                    getattr(tx, self.sc.ending)()
            except TransactionNotFoundError:
                pass  # the victim died before its TX record was written
            except DdbtxError as exc:
                self.problems.append(f"resuming coordinator raised {exc!r}")
        env.sweep_ids(rescuer, self.tx_ids, rollback_after=ROLLBACK_AGE)

    def _check_victim(self, outcome: str, reads: dict[str, Any]) -> None:
        kind = self.sc.kind
        if kind in ("lost", "copy") and outcome not in ("committed", "rolled_back"):
            self.problems.append(f"a {kind} fault made the victim fail: {outcome}")
        if kind in ("before", "after") and outcome not in ("crashed", "committed", "rolled_back"):
            self.problems.append(f"a crash surfaced as {outcome}")
        if kind == "pause":
            return  # the competitor changed the items the victim read
        for pk, op in zip(self.keys, self.sc.shape, strict=True):
            if op == "read" and pk in reads and reads[pk].get("Item") != self.initial[pk]:
                self.problems.append(f"read lock on {pk} returned {reads[pk]}")

    def _expected(self, tx_id: str, state: str | None) -> dict[str, Item | None]:
        base = dict(self.initial)
        competed = {pk: {"pk": {"S": pk}, "balance": {"N": str(COMPETITOR_BALANCE)}} for pk in base}
        if self.overwritten:
            return dict(competed)  # the victim finished first; late copies change nothing
        if self.sc.kind == "pause" and self.at_pause != "unpaused":
            base = dict(competed)
            if self.at_pause is not None:
                return base  # the victim's work was completed before the competitor wrote
        if state != s.STATE_COMMITTED:
            return base
        header = self.env.header(tx_id) or {}
        recorded = set(header.get(s.TX_REQUESTS, {}).get("M", {}))
        out = dict(base)
        for pk, op in zip(self.keys, self.sc.shape, strict=True):
            if request_id(self.env.data_table, {"pk": {"S": pk}}) in recorded:
                out[pk] = effect(op, pk, out[pk])
        return out

    def _check_outcome(self, tx_id: str, outcome: str, decided_at_crash: str | None) -> None:
        env = self.env
        state = self._state(tx_id)
        if state == s.STATE_PENDING:
            self.problems.append("still pending after the rescue")
        decided = (s.STATE_COMMITTED, s.STATE_ROLLED_BACK)
        if decided_at_crash in decided and state != decided_at_crash:
            self.problems.append(f"decided {decided_at_crash} before the rescue, ended {state}")
        reported = {"committed": s.STATE_COMMITTED, "rolled_back": s.STATE_ROLLED_BACK}
        if outcome in reported and state != reported[outcome]:
            self.problems.append(f"victim reported {outcome} but the record says {state}")
        expected = self._expected(tx_id, state)
        reader = env.coordinator()
        for pk in self.keys:
            # What every reader sees: the committed view (equal to the raw item once unlocked).
            seen = reader.get_item(TableName=env.data_table, Key={"pk": {"S": pk}})
            if seen.get("Item", {}) != (expected[pk] or {}):
                self.problems.append(f"{pk}: expected {expected[pk]}, committed view {seen}")
        self.problems.extend(env.residue(self.keys, self.tx_ids))
        # The sweeper's last step: completed records past the delete age go.
        env.sweep_ids(
            env.coordinator(), self.tx_ids, rollback_after=ROLLBACK_AGE, delete_after=timedelta(0)
        )
        if any(env.header(t) is not None for t in self.tx_ids):
            self.problems.append("a completed TX record survived the delete sweep")


def run_schedule(env: Env, schedule: Schedule) -> Run | None:
    """Run one schedule; None when its fault never fired (the index is past the last call)."""
    run = Run(env, schedule)
    return run if run.execute() else None


def combinations(
    shapes_: list[tuple[str, ...]],
    endings: tuple[str, ...],
    kinds: tuple[str, ...],
    rng: random.Random,
    skew: bool,
) -> list[Schedule]:
    """Every (shape, ending, kind, rescuer) at call index 0, each with a seeded clock skew;
    every other one's victim runs on the asyncio driver (the schedules are shared between
    the drivers, not doubled)."""
    out = []
    product = itertools.product(shapes_, endings, kinds, RESCUERS)
    for n, (shape, ending, kind, rescuer) in enumerate(product):
        offset = rng.uniform(-2 * ROLLBACK_AGE, 2 * ROLLBACK_AGE) if skew else 0.0
        driver = DRIVERS[n % len(DRIVERS)]
        out.append(Schedule(shape, ending, kind, 0, rescuer, round(offset, 3), driver))
    return out


def run_single(
    env: Env,
    report: Report,
    *,
    max_items: int = 3,
    kinds: tuple[str, ...] = KINDS,
    shape_filter: list[tuple[str, ...]] | None = None,
    endings: tuple[str, ...] = ENDINGS,
    sample: int | None = None,
    skew: bool = True,
    stop_after: int | None = None,
) -> Report:
    """Each chosen combination at every call index; anomalies go to the report with a replay line.

    ``sample`` picks that many combinations at random (seeded); None runs them all.
    """
    rng = random.Random(report.seed)
    todo = combinations(shape_filter or shapes(max_items), endings, kinds, rng, skew)
    if sample is not None:
        todo = rng.sample(todo, min(sample, len(todo)))
    for combo in todo:
        for index in range(MAX_CALLS):
            schedule = replace(combo, index=index)
            if not check_schedule(env, schedule, report):
                break
            if stop_after is not None and len(report.anomalies) >= stop_after:
                return report
    return report


def check_schedule(env: Env, schedule: Schedule, report: Report) -> bool:
    """Run one schedule into the report; False when its fault never fired."""
    run = run_schedule(env, schedule)
    if run is None:
        return False
    report.counts["schedules"] += 1
    report.counts["transactions"] += 1 + (schedule.kind in ("pause", "copy"))
    replay = ("--schedule", schedule.spec())
    if run.problems:
        report.anomaly(f"schedule {schedule.spec()}: " + "; ".join(run.problems), *replay)
    if report.counts["schedules"] % PROGRESS_EVERY == 0:  # long runs show they are alive
        done, found = report.counts["schedules"], len(report.anomalies)
        print(f"  {report.backend}: {done} schedules, {found} anomalies", file=sys.stderr)
    return True
