"""Workload 2: a bank. Transfers keep the total; every committed audit must see it.

Accounts start with a fixed total. Processes make conditional transfers (no
balance may go negative) and audits (a read-locked read of every account,
committed); crashes, pauses and concurrent sweepers hit them throughout. Each
committed audit must sum to the total, and after the final sweep the total
holds, no balance is negative and nothing is left locked.
"""

from __future__ import annotations

import functools
from typing import Any

from ddbtx import Transaction

from .env import Env
from .history import OK
from .report import Report
from .sim import Process, Simulation

ACCOUNTS = 5
OPENING = 100


class Bank:
    def __init__(self, env: Env, seed: int, rounds: int) -> None:
        self.env = env
        self.accounts = [f"bank{seed}-{n}" for n in range(ACCOUNTS)]
        self.total = ACCOUNTS * OPENING
        self.rounds = rounds
        self.audits: list[int] = []
        self.bad_audits: list[str] = []

    def open(self) -> None:
        client = self.env.client()
        for pk in self.accounts:
            client.put_item(
                TableName=self.env.data_table,
                Item={"pk": {"S": pk}, "balance": {"N": str(OPENING)}},
            )

    def process(self, proc: Process) -> None:
        for _ in range(self.rounds):
            if proc.rng.random() < 0.25:
                status, seen = proc.transact(self._audit)
                if status == OK and seen is not None:
                    self.audits.append(sum(seen))
                    if sum(seen) != self.total:
                        self.bad_audits.append(f"committed audit by {proc.number} saw {seen}")
                continue
            source, target = proc.rng.sample(self.accounts, 2)
            amount = proc.rng.randint(1, OPENING)
            proc.transact(
                functools.partial(self._transfer, source=source, target=target, amount=amount)
            )

    def _audit(self, tx: Transaction) -> list[int]:
        table = self.env.data_table
        return [balance(tx.get_item(TableName=table, Key=key(pk))) for pk in self.accounts]

    def _transfer(self, tx: Transaction, source: str, target: str, amount: int) -> None:
        values = {":n": {"N": str(amount)}}
        tx.update_item(
            TableName=self.env.data_table,
            Key=key(source),
            UpdateExpression="SET balance = balance - :n",
            ConditionExpression="balance >= :n",
            ExpressionAttributeValues=values,
        )
        tx.update_item(
            TableName=self.env.data_table,
            Key=key(target),
            UpdateExpression="SET balance = balance + :n",
            ExpressionAttributeValues=values,
        )

    def final_problems(self) -> list[str]:
        balances = {}
        for pk in self.accounts:
            item = self.env.item(pk)
            balances[pk] = balance({"Item": item}) if item else None
        problems = list(self.bad_audits)
        if None in balances.values() or sum(b or 0 for b in balances.values()) != self.total:
            problems.append(f"after the final sweep the accounts are {balances}")
        if any(b is not None and b < 0 for b in balances.values()):
            problems.append(f"negative balance in {balances}")
        return problems + self.env.residue(self.accounts, [])


def key(pk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}}


def balance(resp: dict[str, Any]) -> int:
    return int(resp["Item"]["balance"]["N"])


def run_bank(env: Env, report: Report, *, rounds: int, seed: int | None = None, **sim: Any) -> None:
    """One bank run; anomalies go to the report with a replay line."""
    seed = report.seed if seed is None else seed
    bank = Bank(env, seed, rounds)
    bank.open()
    simulation = Simulation(env, seed, **sim)
    simulation.run(bank.process)
    problems = bank.final_problems() + simulation.errors
    report.counts["histories"] += 1
    report.counts["transactions"] += simulation.counts["transactions"]
    report.counts["audits"] += len(bank.audits)
    if problems:
        report.anomaly(f"bank seed {seed}: " + "; ".join(problems[:5]), "--history-seed", str(seed))
