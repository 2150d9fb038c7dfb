"""``ddbtx demo``: a bank on an embedded DynamoDB, coordinators killed mid-protocol, a sweep
(a seed fixes every count but the retries)."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from . import schema as s
from ._base.items import flag, strip
from ._cli.progress import REPORT_ROWS, report_table
from .chaos import Chaos, Crash, FaultKind
from .errors import TransactionConflictError, TransactionRolledBackError
from .local import Kind, LocalDynamo
from .locks import Mutex, create_lock_table, list_locks
from .locks._rows import all_items
from .manager import Isolation, Transaction, TransactionManager
from .recovery import STATE_NAMES
from .sweeper import JanitorSettings, SweepReport
from .tables import create_data_table

if TYPE_CHECKING:
    from rich.console import Console

DEMO_TABLES: Final = {
    "transactions": "demo-transactions",
    "images": "demo-images",
    "data": "demo-accounts",
    "locks": "demo-locks",
}
OPENING_BALANCE: Final = 100
MAX_AMOUNT: Final = 20
#: DynamoDB calls of one uncontended transfer (record, two locks and writes, decision,
#: two unlocks, complete, delete): a killed coordinator dies before or after one of them.
TRANSFER_CALLS: Final = 11
#: Attempts of a live transfer (``tm.run``) before it gives up on contention.
ATTEMPTS: Final = 20
#: Ages the demo sweeps with: every abandoned record is stale at once (deployed: 60 s, 1 day).
SWEEP_ENVIRONMENT: Final = {
    "TRANSACTIONS_TABLE": DEMO_TABLES["transactions"],
    "IMAGES_TABLE": DEMO_TABLES["images"],
    "LOCKS_TABLE": DEMO_TABLES["locks"],
    "DATA_TABLES": DEMO_TABLES["data"],
    "ROLLBACK_AFTER_SECONDS": "0",
    "DELETE_AFTER_SECONDS": "0",
    "SWEEP_PAGE_BUDGET": "50",
}


@dataclass(frozen=True)
class Transfer:
    source: str
    target: str
    amount: int
    #: (fault kind, call index) where its coordinator dies; None for a live one.
    crash: tuple[FaultKind, int] | None = None

    def pay(self, tx: Transaction) -> None:
        tx.update_item(
            TableName=DEMO_TABLES["data"],
            Key={"pk": {"S": self.source}},
            UpdateExpression="SET balance = balance - :n",
            ConditionExpression="balance >= :n",
            ExpressionAttributeValues={":n": {"N": str(self.amount)}},
        )
        tx.update_item(
            TableName=DEMO_TABLES["data"],
            Key={"pk": {"S": self.target}},
            UpdateExpression="SET balance = balance + :n",
            ExpressionAttributeValues={":n": {"N": str(self.amount)}},
        )


@dataclass(frozen=True)
class Plan:
    """Everything a seed decides."""

    accounts: tuple[str, ...]
    opening: int
    #: One list of live transfers per worker thread.
    live: tuple[tuple[Transfer, ...], ...]
    #: Transfers whose coordinator is killed, on pairwise disjoint accounts.
    killed: tuple[Transfer, ...]

    @property
    def expected_total(self) -> int:
        return self.opening * len(self.accounts)


def make_plan(*, seed: int, workers: int, transfers: int, accounts: int) -> Plan:
    """The transfers of ``workers`` x ``transfers``, some of them by doomed coordinators.

    Each account pays out at most its opening balance in total, so the transfers'
    ``balance >= :n`` conditions hold in any order.

    Examples
    --------
    >>> plan = make_plan(seed=7, workers=2, transfers=3, accounts=8)
    >>> len(plan.killed) + sum(map(len, plan.live))
    6
    """
    if accounts < 2:
        raise ValueError("the demo needs at least 2 accounts")
    rng = random.Random(seed)
    names = tuple(f"acct-{i}" for i in range(accounts))
    total = workers * transfers
    # Enough money that every account's budget covers its share of the largest amounts.
    opening = OPENING_BALANCE * max(1, -(-total * MAX_AMOUNT // (OPENING_BALANCE * accounts)))
    budget = dict.fromkeys(names, opening)

    def transfer(source: str, target: str, crash: tuple[FaultKind, int] | None) -> Transfer:
        amount = rng.randint(1, min(MAX_AMOUNT, budget[source]))
        budget[source] -= amount
        return Transfer(source, target, amount, crash)

    killed_count = min(accounts // 2, max(1, total // 4), total)
    pairs = list(names)
    rng.shuffle(pairs)
    killed = tuple(
        transfer(
            pairs[2 * i],
            pairs[2 * i + 1],
            (rng.choice(("before", "after")), rng.randrange(TRANSFER_CALLS)),
        )
        for i in range(killed_count)
    )
    live: list[list[Transfer]] = [[] for _ in range(workers)]
    for number in range(total - killed_count):
        source = rng.choice([n for n in names if budget[n] > 0])
        target = rng.choice([n for n in names if n != source])
        live[number % workers].append(transfer(source, target, None))
    return Plan(names, opening, tuple(map(tuple, live)), killed)


@dataclass
class Outcome:
    """What happened to the transfers (``retries`` alone varies from run to run)."""

    committed: int = 0
    gave_up: int = 0
    retries: int = 0
    killed: int = 0
    killed_ids: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)


def _manager(db: LocalDynamo) -> TransactionManager:
    """A coordinator of its own: a killed one takes nothing else with it."""
    return TransactionManager(
        db.client(max_attempts=2),
        DEMO_TABLES["transactions"],
        DEMO_TABLES["images"],
        lock_wait=0.2,
        stale_after=3600.0,  # a dead coordinator's record stays until the sweeper runs
        max_workers=1,  # one call at a time: a planned crash index is a fixed protocol step
        key_schemas={DEMO_TABLES["data"]: ("pk",)},
    )


def _live_worker(db: LocalDynamo, transfers: tuple[Transfer, ...], outcome: Outcome) -> None:
    for transfer in transfers:
        attempts = 0

        def counted(tx: Transaction, transfer: Transfer = transfer) -> None:
            nonlocal attempts
            attempts += 1
            transfer.pay(tx)

        try:
            _manager(db).run(counted, attempts=ATTEMPTS)
            outcome.add(committed=1, retries=attempts - 1)
        except (TransactionConflictError, TransactionRolledBackError):
            outcome.add(gave_up=1, retries=attempts - 1)


def _doomed_worker(db: LocalDynamo, transfer: Transfer, outcome: Outcome) -> None:
    """A coordinator that dies at its planned call: no rollback, no clean-up, nothing."""
    assert transfer.crash is not None
    tm = _manager(db)
    Chaos(tm.client).arm(*transfer.crash)
    tx = tm.begin()
    try:
        transfer.pay(tx)
        tx.commit()
        tx.delete()
    except Crash:
        outcome.add(killed=1)
        with outcome.lock:
            outcome.killed_ids.add(tx.id)


def run_transfers(db: LocalDynamo, plan: Plan) -> Outcome:
    """The live transfers concurrently, then the doomed ones (concurrently, apart)."""
    outcome = Outcome()
    for worker, jobs in ((_live_worker, plan.live), (_doomed_worker, plan.killed)):
        threads = [threading.Thread(target=worker, args=(db, job, outcome)) for job in jobs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return outcome


def sweep_as_the_handler_does(client: Any, environment: Mapping[str, str]) -> SweepReport:
    """One sweeper tick: the two calls ``functions/sweeper/handler.py`` makes, without Lambda."""
    settings = JanitorSettings.from_env(environment)
    return settings.sweeper(settings.manager(client)).run(page_budget=settings.page_budget)


@dataclass(frozen=True)
class Health:
    """What the demo checks before and after the sweep."""

    raw_total: int
    committed_total: int
    open_records: Counter[str]
    locked_items: int
    images: int
    lock_rows: int
    #: Ids of every TX record, completed or not.
    records: frozenset[str] = frozenset()

    def clean(self, expected: int) -> bool:
        return self.raw_total == self.committed_total == expected and not (
            self.open_records or self.locked_items or self.images or self.lock_rows
        )


def health(tm: TransactionManager, accounts: tuple[str, ...]) -> Health:
    client = tm.client
    items = all_items(client, "scan", TableName=DEMO_TABLES["data"])
    raw = sum(int(strip(i).get("balance", {"N": "0"})["N"]) for i in items)
    committed = 0
    for pk in accounts:
        view = tm.get_item(
            TableName=DEMO_TABLES["data"], Key={"pk": {"S": pk}}, isolation=Isolation.COMMITTED
        )
        committed += int(view.get("Item", {}).get("balance", {}).get("N", 0))
    headers = [
        r
        for r in all_items(client, "scan", TableName=DEMO_TABLES["transactions"])
        if r[s.TX_SK]["S"] == s.TX_HEADER_SK
    ]
    return Health(
        raw_total=raw,
        committed_total=committed,
        open_records=Counter(
            STATE_NAMES[r[s.TX_STATE]["S"]] for r in headers if not flag(r, s.TX_COMPLETED)
        ),
        locked_items=sum(s.ATTR_LOCK in i for i in items),
        images=len(all_items(client, "scan", TableName=DEMO_TABLES["images"])),
        # A free mutex row stays for its fencing counter: only held locks are left over.
        lock_rows=sum(r.state != "free" for r in list_locks(client, DEMO_TABLES["locks"])),
        records=frozenset(r[s.TX_PK]["S"] for r in headers),
    )


def health_table(expected: int, *states: Health) -> Any:
    from rich.table import Column, Table

    titles = ("after crashes", "after sweep")[: len(states)]
    table = Table("", *(Column(t, justify="right") for t in titles), title="state of the bank")

    def row(label: str, pick: Callable[[Health], object]) -> None:
        table.add_row(label, *(str(pick(h)) for h in states))

    row(f"balances as stored (want {expected})", lambda h: h.raw_total)
    row(f"balances, COMMITTED reads (want {expected})", lambda h: h.committed_total)
    row(
        "TX records not completed",
        lambda h: ", ".join(f"{n} {k}" for k, n in sorted(h.open_records.items())) or "0",
    )
    row("items locked by a transaction", lambda h: h.locked_items)
    row("rows in the images table", lambda h: h.images)
    row("lock rows (a dead worker's mutex)", lambda h: h.lock_rows)
    return table


def what_the_sweep_did(report: SweepReport, before: Health, after: Health) -> str:
    """The sweep's work in the bank's terms: every unlocked item is accounted for."""
    unlocked = before.locked_items - after.locked_items
    return (
        f"the sweep unlocked {unlocked} item(s): {unlocked - report.locks_released} while rolling"
        f" {report.rolled_back} transaction(s) back and {report.rolled_forward} forward and"
        f" completing {report.completed}, and {report.locks_released} stray lock(s) whose"
        f" record was gone or completed; it deleted {report.deleted} completed record(s),"
        f" {before.images - after.images} image(s) and {report.lock_rows_deleted} expired"
        " lock row(s)"
    )


@dataclass(frozen=True)
class DemoResult:
    """A demo run: what a seed decides, and the one count that depends on the threads."""

    plan: Plan
    outcome: Outcome
    before: Health
    after: Health
    report: SweepReport
    #: Completed TX records of live transfers' aborted attempts (a wounded attempt's
    #: record the sweeper deletes): like ``outcome.retries``, it varies with interleaving.
    aborted_records: int

    @property
    def clean(self) -> bool:
        return self.after.clean(self.plan.expected_total)

    def reproducible(self) -> dict[str, Any]:
        """Every figure the seed alone decides (the same on every run of that seed)."""
        # Every counter but the rows scanned, which the aborted attempts' records add to.
        report = self.report.to_dict()
        swept = {k: report[k] for k, _ in REPORT_ROWS if k != "scanned"}
        swept["deleted"] -= self.aborted_records
        swept["exhausted"] = report["exhausted"]
        return {
            "plan": self.plan,
            "committed": self.outcome.committed,
            "gave_up": self.outcome.gave_up,
            "killed": self.outcome.killed,
            "before": {k: v for k, v in vars(self.before).items() if k != "records"},
            "after": {k: v for k, v in vars(self.after).items() if k != "records"},
            "sweep": swept,
        }


def _setup(db: LocalDynamo, plan: Plan) -> TransactionManager:
    client = db.client()
    tm = TransactionManager(client, DEMO_TABLES["transactions"], DEMO_TABLES["images"])
    tm.create_tables()
    create_data_table(client, DEMO_TABLES["data"])
    create_lock_table(client, DEMO_TABLES["locks"])
    for pk in plan.accounts:
        client.put_item(
            TableName=DEMO_TABLES["data"],
            Item={"pk": {"S": pk}, "balance": {"N": str(plan.opening)}},
        )
    # A worker that died two hours ago holding a mutex whose one-minute expiry is long past.
    Mutex(
        client, DEMO_TABLES["locks"], owner="worker-dead", expire_after=60,
        wall_clock=lambda: tm.clock() - 7200,
    ).acquire("nightly-report")  # fmt: skip
    return tm


def run_demo(
    *,
    workers: int = 4,
    transfers: int = 8,
    accounts: int = 8,
    seed: int = 7,
    emulator: Kind = "moto",
    console: Console | None = None,
) -> DemoResult:
    """The whole demo, printed; ``.clean`` is True when the bank ends clean.

    Examples
    --------
    >>> run_demo(workers=2, transfers=4).clean  # doctest: +SKIP
    True
    """
    from rich.console import Console
    from rich.panel import Panel

    out = console or Console()
    plan = make_plan(seed=seed, workers=workers, transfers=transfers, accounts=accounts)
    expected = plan.expected_total
    out.print(Panel.fit("ddbtx demo: a bank, crashing coordinators, and the janitor"))
    with LocalDynamo(emulator) as db:
        out.print(f"embedded DynamoDB ({emulator}) on {db.endpoint_url}; no AWS account used")
        tm = _setup(db, plan)
        out.print(
            f"{accounts} accounts x {plan.opening} = {expected}; seed {seed}:"
            f" {workers} threads run {sum(map(len, plan.live))} transfers with tm.run"
            f" (retried on conflicts), then {len(plan.killed)} coordinators are killed"
            " mid-protocol (before or after one of their DynamoDB calls)"
        )
        outcome = run_transfers(db, plan)
        out.print(
            f"transfers committed: {outcome.committed}, coordinators killed: {outcome.killed},"
            f" given up after {ATTEMPTS} attempts: {outcome.gave_up}"
        )
        before = health(tm, plan.accounts)
        aborted = len(before.records - outcome.killed_ids)
        out.print(
            f"conflicts retried: {outcome.retries}, leaving {aborted} completed TX record(s) of"
            " aborted attempts for the sweeper (these two counts alone vary from run to run:"
            " they depend on how the threads interleave)"
        )
        out.print(health_table(expected, before))
        out.print(
            "sweeping as the sweeper Lambda does on each tick (ddbtx.sweeper, configured by"
            " JanitorSettings.from_env) with ROLLBACK_AFTER_SECONDS=0 and DELETE_AFTER_SECONDS=0,"
            " so that every abandoned record is stale at once (deployed: 60 s and 1 day)"
        )
        report = sweep_as_the_handler_does(db.client(), SWEEP_ENVIRONMENT)
        out.print(report_table(report.to_dict(), "sweep report"))
        after = health(tm, plan.accounts)
        out.print(what_the_sweep_did(report, before, after))
        out.print(health_table(expected, before, after))
    result = DemoResult(plan, outcome, before, after, report, aborted)
    if result.clean:
        out.print(
            f"[bold green]CLEAN[/bold green]: balances add up to {expected}, nothing is locked,"
            " no transaction is left uncompleted"
        )
    else:
        out.print("[bold red]NOT CLEAN[/bold red]: see the table above")
    return result
