"""Workload 4: the FIFO and lease locks under crashes, pauses and skewed clocks.

Processes (threads, each its own client and clock offset) acquire one resource
in turn. Inside the critical section a holder renews its lease and makes
protected writes guarded by its fencing token: the data item keeps the highest
token written and refuses smaller ones. Sometimes a holder pauses past its
lease (and then writes without checking, as a paused process would), and
sometimes a process crashes around any of its lock calls and restarts.

Checked: no token is granted twice, and a grant reported after a later
token's (its thread was descheduled while waiters' sleeps moved simulated time
past its lease) never renews afterwards; a grant or a failed renewal
only ever happens after the previous holder went a whole lease of simulated
time without renewing (it paused, died, or was starved while waiters slept);
the accepted protected writes never interleave (their tokens never go down).
"""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
from dataclasses import dataclass, field
from typing import Any

from ddbtx.chaos import Chaos, Crash
from ddbtx.errors import DdbtxError
from ddbtx.locks import FifoLock, LeaseLockClient

from .env import Env, SkewClock
from .report import Report

#: Lease in simulated seconds: only pauses and deaths outlast it (waiters' sleeps advance time).
LEASE = 1000.0
PROCESSES = 3
WRITES = 3


@dataclass
class Ledger:
    """What the processes observed, in the order they observed it, on the shared time line."""

    clock: SkewClock
    grants: list[tuple[int, str]] = field(default_factory=list)
    #: Holders inside the critical section -> shared time just before their last renewal.
    inside: dict[str, float] = field(default_factory=dict)
    #: Grants (holder, token) a later token overtook before they were reported (see enter).
    #: Keyed by the grant: the same process may well hold a later token legitimately.
    overtaken: set[tuple[str, int]] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def enter(self, holder: str, token: int, since: float) -> None:
        """A grant: every other holder must have gone a whole lease without renewing.

        A thread can be descheduled between its grant and this report while
        waiters' sleeps move simulated time past its lease, so a later token
        may be reported first. That holder was overtaken, legitimately, as a
        paused process would be: it must then never renew (checked in renewed).
        """
        with self.lock:
            if any(token <= seen for seen, _ in self.grants):
                self.overtaken.add((holder, token))
            else:
                now = self.clock.now
                live = [h for h, renewed in self.inside.items() if now - renewed < LEASE]
                if live:
                    self.problems.append(f"{holder} (token {token}) entered while {live} held it")
            self.grants.append((token, holder))
            self.inside[holder] = since

    def renewed(self, holder: str, token: int, sent: float, ok: bool) -> None:
        """A renewal sent at ``sent``; a refusal must come a whole lease after the last one.

        Judged at the answer's arrival: other threads' sleeps move time on while
        the request is in flight, and a takeover may land in that window.
        """
        with self.lock:
            last = self.inside.get(holder, sent)
            if ok and (holder, token) in self.overtaken:
                self.problems.append(f"{holder} renewed token {token} after a later grant")
            if ok:
                self.inside[holder] = sent
            elif self.clock.now - last < LEASE:
                self.problems.append(f"{holder} lost token {token} within its lease")

    def leave(self, holder: str) -> None:
        with self.lock:
            self.inside.pop(holder, None)


class LockRun:
    def __init__(self, env: Env, kind: str, seed: int, rounds: int) -> None:
        self.env = env
        self.kind = kind
        self.seed = seed
        self.rounds = rounds
        self.table = env.lock_table()
        self.resource = f"res{seed}-{kind}"
        self.item = {"pk": {"S": f"fenced{seed}-{kind}"}}
        self.ledger = Ledger(env.clock)
        self.writer = env.client(fresh=True)  # protected writes: never faulted
        self.acquisitions = 0

    def _client(self, name: str, offset: float) -> tuple[Any, Any]:
        clock = self.env.clock
        options: dict[str, Any] = {
            "owner": name,
            "lease_duration": LEASE,
            "heartbeat_period": LEASE / 2,  # the heartbeat thread never fires: holders renew
            "max_poll": LEASE / 20,
            "clock": clock.view(offset),
            "wall_clock": clock.view(offset),
            "sleep": clock.advance,
        }
        client = self.env.client(fresh=True)
        kind = FifoLock if self.kind == "fifo" else LeaseLockClient
        return kind(client, self.table, **options), client

    def process(self, number: int) -> None:
        rng = random.Random(self.seed * 100 + number)
        offset = rng.uniform(-2 * LEASE, 2 * LEASE)
        incarnation = 0
        locks, client = self._client(f"p{number}.{incarnation}", offset)
        for _ in range(self.rounds):
            chaos = Chaos(client)
            if rng.random() < 0.15:
                kind = rng.choice(("before", "after", "lost"))
                chaos.arm(kind, rng.randrange(6))  # type: ignore[arg-type]
            holder = f"p{number}.{incarnation}"
            try:
                self._round(rng, locks, holder)
            except Crash:  # the process died: it renews no more, so its lease runs out
                # Stop its heartbeat thread without close(), which would release the lock.
                locks._heartbeats.close()
                incarnation += 1
                locks, client = self._client(f"p{number}.{incarnation}", offset)
                continue
            except DdbtxError as exc:
                self.ledger.problems.append(f"{holder}: {exc!r}")
            finally:
                chaos.close()
        locks.close()

    def _round(self, rng: random.Random, locks: Any, holder: str) -> None:
        since = self.env.clock.now
        held = locks.acquire(self.resource)
        self.acquisitions += 1
        token = held.fencing_token
        self.ledger.enter(holder, token, since)
        paused = False
        for step in range(WRITES):
            if not paused and rng.random() < 0.1:
                self.env.clock.advance(2 * LEASE)  # paused past the lease: waiters take over
                paused = True
            elif not paused:
                sent = self.env.clock.now
                ok = held.heartbeat()
                self.ledger.renewed(holder, token, sent, ok)
                if not ok:
                    break
            # A paused holder writes on without checking: fencing must refuse it if overtaken.
            self._protected_write(holder, token, step)
        self.ledger.leave(holder)
        held.release()

    def _protected_write(self, holder: str, token: int, step: int) -> None:
        refused = self.writer.exceptions.ConditionalCheckFailedException
        with contextlib.suppress(refused):  # refused: a newer holder has written
            self.writer.update_item(
                TableName=self.env.data_table,
                Key=self.item,
                UpdateExpression="SET #log = list_append(if_not_exists(#log, :e), :w), #hi = :t",
                # fencing: the data keeps the highest token and refuses smaller ones.
                ConditionExpression="attribute_not_exists(#hi) OR #hi <= :t",
                ExpressionAttributeNames={"#log": "log", "#hi": "hi"},
                ExpressionAttributeValues={
                    ":e": {"L": []},
                    ":w": {"L": [{"S": f"{token}:{holder}:{step}"}]},
                    ":t": {"N": str(token)},
                },
            )

    def check(self) -> list[str]:
        problems = list(self.ledger.problems)
        tokens = sorted(t for t, _ in self.ledger.grants)
        if any(b <= a for a, b in itertools.pairwise(tokens)):
            problems.append(f"a token granted twice: {self.ledger.grants}")
        table = self.env.data_table
        got = self.writer.get_item(TableName=table, Key=self.item, ConsistentRead=True)
        log = [w["S"] for w in got.get("Item", {}).get("log", {}).get("L", [])]
        written = [int(entry.split(":")[0]) for entry in log]
        if any(b < a for a, b in itertools.pairwise(written)):
            problems.append(f"protected writes interleaved: {log}")
        return problems


def run_locks(env: Env, report: Report, *, rounds: int, seed: int | None = None) -> None:
    """Both lock kinds; anomalies go to the report with a replay line."""
    seed = report.seed if seed is None else seed
    for kind in ("fifo", "lease"):
        run = LockRun(env, kind, seed, rounds)
        threads = [threading.Thread(target=run.process, args=(n,)) for n in range(PROCESSES)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        problems = run.check()
        report.counts["histories"] += 1
        report.counts["lock_acquisitions"] += run.acquisitions
        if problems:
            message = f"{kind} lock seed {seed}: " + "; ".join(problems[:5])
            report.anomaly(message, "--history-seed", str(seed))
