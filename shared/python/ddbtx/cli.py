"""``ddbtx``: the on-call operator's command line, and the embedded demo.

``ddbtx sweep``, ``ddbtx inspect TX_ID``, ``ddbtx recover TX_ID`` and
``ddbtx locks`` call the same core code as the janitor Lambdas
(:mod:`ddbtx.sweeper`, :mod:`ddbtx.recovery`, :mod:`ddbtx.locks`). Table names
default to the janitors' environment variables (``TRANSACTIONS_TABLE`` ...).
``ddbtx demo`` needs no AWS account: it starts an embedded DynamoDB.

The command-line libraries (typer, rich) come from the ``cli`` extra
(``pip install 'ddbtx[cli]'``) and are imported only when a command runs, so
``import ddbtx`` and the Lambda layer never need them.
"""

# No ``from __future__ import annotations``: typer reads the commands' annotations
# at run time, and they name ``typer``, which is imported inside :func:`_app` only.
import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from . import schema as s
from ._items import flag, lock_owner, strip
from .errors import DdbtxError
from .tables import create_data_table

if TYPE_CHECKING:
    from rich.console import Console


#: Counters of a sweep report, in the order they are shown.
REPORT_ROWS = (
    ("scanned", "rows examined"),
    ("stuck", "stuck (pending past the rollback age)"),
    ("rolled_back", "rolled back"),
    ("rolled_forward", "rolled forward"),
    ("finalised", "finalised"),
    ("deleted", "TX records deleted"),
    ("orphan_images_deleted", "orphan images deleted"),
    ("locks_released", "item locks released"),
    ("lock_rows_deleted", "expired lock rows deleted"),
    ("errors", "errors"),
)


@dataclass
class Options:
    """Global options: where DynamoDB is and which tables to use."""

    endpoint_url: str | None = None
    region: str | None = None
    transactions_table: str = "Transactions"
    images_table: str = "TransactionImages"
    locks_table: str | None = None
    data_tables: tuple[str, ...] = ()
    as_json: bool = False

    def client(self) -> Any:
        import boto3

        from ._dynamo import client_config

        config = client_config(5)
        region = self.region
        if region is None and self.endpoint_url and not boto3.Session().region_name:
            region = "us-east-1"  # a local endpoint ignores the region, but boto3 needs one
        return boto3.client(
            "dynamodb", endpoint_url=self.endpoint_url, region_name=region, config=config
        )

    def manager(self) -> Any:
        from .transaction import TransactionManager

        return TransactionManager(self.client(), self.transactions_table, self.images_table)


def _console() -> "Console":
    from rich.console import Console

    return Console()


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def _key_text(key: dict[str, Any]) -> str:
    return ", ".join(f"{name}={next(iter(value.values()))}" for name, value in key.items())


# --- the commands -----------------------------------------------------------------------


def report_table(report: dict[str, Any], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title, show_header=False)
    table.add_column("what")
    table.add_column("count", justify="right")
    for name, label in REPORT_ROWS:
        table.add_row(label, str(report[name]))
    table.add_row("complete", "yes" if report["complete"] else f"no ({report['stopped_by']})")
    return table


def cmd_sweep(
    opts: Options,
    *,
    rollback_after: int,
    delete_after: int,
    page_budget: int | None,
    full: bool,
) -> int:
    """Run the sweeper now, with a progress display; print its report."""
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn

    from .sweeper import Sweeper

    console = _console()
    manager = opts.manager()
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed} of ~{task.total} rows"),
        console=console,
        transient=True,
        disable=opts.as_json,
    ) as progress:
        tasks: dict[str, Any] = {}

        def advance(name: str, rows: int) -> None:
            if name not in tasks:
                # Scans get a bar sized by the table's (approximate, 6-hourly) item count.
                total = None
                if not name.startswith("index"):
                    described = manager.client.describe_table(TableName=name)["Table"]
                    total = max(int(described.get("ItemCount", 0)), 1)
                tasks[name] = progress.add_task(name, total=total)
            progress.advance(tasks[name], rows)

        sweeper: Sweeper = Sweeper(
            manager,
            rollback_after=timedelta(seconds=rollback_after),
            delete_after=timedelta(seconds=delete_after),
            locks_table=opts.locks_table,
            data_tables=opts.data_tables,
            progress=advance,
        )
        # Without a budget this sweep covers everything, so it starts from the beginning;
        # with one it continues where the last sweep (Lambda's or ours) stopped.
        report = (
            sweeper.run_full()
            if full
            else sweeper.run(page_budget=page_budget, resume=page_budget is not None)
        )
    data = report.to_dict()
    if opts.as_json:
        _print_json(data)
    else:
        console.print(report_table(data, "sweep"))
        if report.stuck_ids:
            console.print("stuck transactions: " + ", ".join(report.stuck_ids))
    return 1 if report.errors else 0


def cmd_inspect(opts: Options, tx_id: str) -> int:
    """Show a transaction's state, items and held locks."""
    from .recovery import inspect

    result = inspect(opts.manager(), tx_id)
    if opts.as_json:
        _print_json(result)
    else:
        _show_transaction(result)
    return 0 if result["found"] else 1


def _show_transaction(result: dict[str, Any]) -> None:
    from rich.table import Table

    console = _console()
    if not result["found"]:
        console.print(f"transaction {result['transaction_id']}: no TX record")
        return
    console.print(
        f"transaction {result['transaction_id']}: [bold]{result['state']}[/bold]"
        f"{', finished' if result['finished'] else ', unfinished'}, version {result['version']},"
        f" last change {result['age_seconds']}s ago, {result['locks_held']} lock(s) held"
    )
    table = Table("table", "key", "operation", "locked", "write applied", "other holder")
    for item in result["items"]:
        other = item["locked_by"] if item["locked_by"] != result["transaction_id"] else ""
        table.add_row(
            item["table"],
            _key_text(item["key"]),
            item["operation"],
            "yes" if item["locked"] else "no",
            "yes" if item["write_applied"] else "no",
            other or "",
        )
    console.print(table)


def cmd_recover(opts: Options, tx_id: str) -> int:
    """Drive one transaction to completion and show it afterwards."""
    from .recovery import recover

    result = recover(opts.manager(), tx_id)
    if opts.as_json:
        _print_json(result)
    else:
        _console().print(f"recover {tx_id}: [bold]{result['outcome']}[/bold]")
        if "after" in result:
            _show_transaction(result["after"])
    return 1 if result["outcome"] in ("missing", "active") else 0


def held_item_locks(tm: Any, tables: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every data item carrying a transaction lock, with the holder's state."""
    rows = []
    for table in tables:
        names = tm.key_names(table)
        params: dict[str, Any] = {
            "TableName": table,
            "FilterExpression": "attribute_exists(#l)",
            "ExpressionAttributeNames": {"#l": s.ATTR_LOCK},
            "ConsistentRead": True,
        }
        for page in tm.client.get_paginator("scan").paginate(**params):
            for item in page["Items"]:
                owner = lock_owner(item) or ""
                header = tm.protocol.read_header(owner)
                state = "record gone" if header is None else header.state
                if header is not None and header.finished:
                    state += " (finished)"
                rows.append(
                    {
                        "table": table,
                        "key": {n: item[n] for n in names},
                        "transaction_id": owner,
                        "state": state,
                        "write_applied": flag(item, s.ATTR_APPLIED),
                    }
                )
    return rows


def cmd_locks(opts: Options) -> int:
    """Who holds what: lock-table rows (with queue positions) and transaction item locks."""
    from dataclasses import asdict

    from rich.table import Table

    from .locks import list_locks

    tm = opts.manager()
    lock_rows = list_locks(tm.client, opts.locks_table) if opts.locks_table else []
    item_locks = held_item_locks(tm, opts.data_tables)
    if opts.as_json:
        _print_json({"locks": [asdict(r) for r in lock_rows], "item_locks": item_locks})
        return 0
    console = _console()
    table = Table("resource", "kind", "namespace", "state", "owner", "fencing", "ticket", "queue")
    for r in lock_rows:
        table.add_row(
            r.resource, r.kind, r.namespace or "", r.state, r.owner or "",
            str(r.fencing_token or ""), str(r.ticket or ""), str(r.queue_position or ""),
        )  # fmt: skip
    console.print(table if lock_rows else "no lock rows")
    items = Table("table", "key", "transaction", "state", "write applied")
    for i in item_locks:
        items.add_row(
            i["table"], _key_text(i["key"]), i["transaction_id"], i["state"],
            "yes" if i["write_applied"] else "no",
        )  # fmt: skip
    console.print(items if item_locks else "no item locked by a transaction")
    return 0


# --- the demo ---------------------------------------------------------------------------

DEMO_TABLES = {
    "transactions": "demo-transactions",
    "images": "demo-images",
    "data": "demo-accounts",
    "locks": "demo-locks",
}


@dataclass
class BankStats:
    committed: int = 0
    conflicts: int = 0
    killed: int = 0
    by_stage: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class Planned:
    source: str
    target: str
    amount: int
    crash: tuple[str, int] | None  # (fault kind, call index) where the coordinator dies


class LambdaContextDouble:
    """What the sweeper handler reads from Lambda's context object."""

    function_name = "ddbtx-sweeper"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:ddbtx-sweeper"
    aws_request_id = "demo"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


def _transfer(tm: Any, plan: Planned, stats: BankStats) -> None:
    """One transfer by a coordinator that may be killed (``Crash``) at its planned call."""
    from .chaos import Chaos, Crash

    chaos = Chaos(tm.client)
    if plan.crash is not None:
        chaos.arm(plan.crash[0], at=plan.crash[1])  # type: ignore[arg-type]
    tx = tm.begin()
    try:
        tx.update_item(
            TableName=DEMO_TABLES["data"],
            Key={"pk": {"S": plan.source}},
            UpdateExpression="SET balance = balance - :n",
            ConditionExpression="balance >= :n",
            ExpressionAttributeValues={":n": {"N": str(plan.amount)}},
        )
        tx.update_item(
            TableName=DEMO_TABLES["data"],
            Key={"pk": {"S": plan.target}},
            UpdateExpression="SET balance = balance + :n",
            ExpressionAttributeValues={":n": {"N": str(plan.amount)}},
        )
        tx.commit()
        tx.delete()
        with stats.lock:
            stats.committed += 1
    except Crash:
        # The process is dead: nothing more runs for this transaction.
        with stats.lock:
            stats.killed += 1
    except DdbtxError:
        # A conflict (or an error DynamoDB reported): this live coordinator gives up.
        with stats.lock:
            stats.conflicts += 1
        try:
            if tx.state == s.STATE_PENDING:
                tx.rollback()
        except DdbtxError:
            pass  # decided by someone else meanwhile; the sweeper finishes it
    finally:
        chaos.close()


def _bank(db: Any, plans: list[list[Planned]]) -> BankStats:
    from .transaction import TransactionManager

    stats = BankStats()

    def worker(mine: list[Planned]) -> None:
        for plan in mine:
            # A fresh client per coordinator, so a killed one takes nothing else with it.
            tm = TransactionManager(
                db.client(max_attempts=2),
                DEMO_TABLES["transactions"],
                DEMO_TABLES["images"],
                lock_wait=0.2,
                stale_after=3600.0,  # dead coordinators stay stuck until the sweeper runs
                max_workers=1,
                key_schemas={DEMO_TABLES["data"]: ("pk",)},
            )
            _transfer(tm, plan, stats)

    threads = [threading.Thread(target=worker, args=(mine,)) for mine in plans]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return stats


@dataclass
class Health:
    """What the demo checks before and after the sweep."""

    raw_total: int
    committed_total: int
    unfinished: Counter[str]
    locked_items: int
    images: int
    lock_rows: int

    def clean(self, expected: int) -> bool:
        return (
            self.raw_total == expected
            and self.committed_total == expected
            and not self.unfinished
            and self.locked_items == 0
            and self.images == 0
            and self.lock_rows == 0
        )


def _scan_all(client: Any, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in client.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        items.extend(page["Items"])
    return items


def _health(tm: Any, accounts: list[str]) -> Health:
    from .locks import list_locks
    from .transaction import Isolation

    client = tm.client
    items = _scan_all(client, DEMO_TABLES["data"])
    raw = sum(int(strip(i).get("balance", {"N": "0"})["N"]) for i in items)
    committed = 0
    for pk in accounts:
        view = tm.get_item(
            TableName=DEMO_TABLES["data"], Key={"pk": {"S": pk}}, isolation=Isolation.COMMITTED
        )
        committed += int(view.get("Item", {}).get("balance", {}).get("N", 0))
    headers = [
        r
        for r in _scan_all(client, DEMO_TABLES["transactions"])
        if r[s.TX_SK]["S"] == s.TX_HEADER_SK and not flag(r, s.TX_FINISHED)
    ]
    names = {"P": "pending", "C": "committed", "R": "rolled back"}
    return Health(
        raw_total=raw,
        committed_total=committed,
        unfinished=Counter(names[r[s.TX_STATE]["S"]] for r in headers),
        locked_items=sum(1 for i in items if s.ATTR_LOCK in i),
        images=len(_scan_all(client, DEMO_TABLES["images"])),
        # A free mutex row stays for its fencing counter: only held locks are left over.
        lock_rows=sum(1 for r in list_locks(client, DEMO_TABLES["locks"]) if r.state != "free"),
    )


def _health_table(before: Health, after: Health | None, expected: int) -> Any:
    from rich.table import Table

    table = Table(title="state of the bank")
    table.add_column("")
    table.add_column("after crashes", justify="right")
    if after is not None:
        table.add_column("after sweep", justify="right")

    def row(label: str, pick: Any) -> None:
        values = [str(pick(before))] + ([str(pick(after))] if after is not None else [])
        table.add_row(label, *values)

    row(f"balances as stored (want {expected})", lambda h: h.raw_total)
    row(f"balances, COMMITTED reads (want {expected})", lambda h: h.committed_total)
    row(
        "unfinished TX records",
        lambda h: ", ".join(f"{n} {k}" for k, n in sorted(h.unfinished.items())) or "0",
    )
    row("items locked by a transaction", lambda h: h.locked_items)
    row("rows in the images table", lambda h: h.images)
    row("lock rows (a dead worker's mutex)", lambda h: h.lock_rows)
    return table


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _load_sweeper_handler() -> ModuleType:
    """Import ``functions/sweeper/handler.py`` of this checkout (as Lambda would)."""
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[3] / "functions" / "sweeper" / "handler.py"
    if not path.exists():
        raise FileNotFoundError(f"the demo runs the sweeper handler from a checkout: no {path}")
    spec = importlib.util.spec_from_file_location("ddbtx_demo_sweeper_handler", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _pair(rng: random.Random, names: list[str]) -> tuple[str, str]:
    source, target = rng.sample(names, 2)
    return source, target


def run_demo(*, workers: int = 4, transfers: int = 8, accounts: int = 8, seed: int = 7) -> bool:
    """The whole demo; True when the bank ends clean.

    Examples
    --------
    >>> run_demo(workers=2, transfers=4)  # doctest: +SKIP
    True
    """
    from rich.panel import Panel

    from .local import LOCAL_CREDENTIALS, LocalDynamo

    try:
        import moto.server  # noqa: F401
    except ImportError:
        _console().print("the demo needs moto's server: pip install 'moto[server,dynamodb]'")
        return False
    from .locks import Mutex, create_lock_table
    from .transaction import TransactionManager

    console = _console()
    rng = random.Random(seed)
    names = [f"acct-{i}" for i in range(accounts)]
    expected = 100 * accounts
    console.print(Panel.fit("ddbtx demo: a bank, crashing coordinators, and the janitor"))
    with LocalDynamo("moto") as db:
        console.print(f"embedded DynamoDB (moto) on {db.endpoint_url}; no AWS account used")
        client = db.client()
        tm = TransactionManager(client, DEMO_TABLES["transactions"], DEMO_TABLES["images"])
        tm.create_tables()
        create_data_table(client, DEMO_TABLES["data"])
        create_lock_table(client, DEMO_TABLES["locks"])
        for pk in names:
            client.put_item(
                TableName=DEMO_TABLES["data"], Item={"pk": {"S": pk}, "balance": {"N": "100"}}
            )
        # A worker that died two hours ago holding a mutex whose one-minute expiry is long past.
        Mutex(
            client, DEMO_TABLES["locks"], owner="worker-dead", expire_after=60,
            wall_clock=lambda: time.time() - 7200,
        ).acquire("nightly-report")  # fmt: skip

        plans = [
            [
                Planned(
                    *_pair(rng, names),
                    amount=rng.randint(1, 30),
                    crash=(rng.choice(["before", "after"]), rng.randrange(11))
                    if rng.random() < 0.4
                    else None,
                )
                for _ in range(transfers)
            ]
            for _ in range(workers)
        ]
        console.print(
            f"{accounts} accounts x 100 = {expected}; {workers} threads x {transfers} transfers;"
            f" {sum(p.crash is not None for w in plans for p in w)} coordinators are killed"
            " mid-protocol (before or after one of their DynamoDB calls)"
        )
        stats = _bank(db, plans)
        console.print(
            f"transfers committed: {stats.committed}, given up on a conflict: {stats.conflicts},"
            f" coordinators killed: {stats.killed}"
        )
        before = _health(tm, names)
        console.print(_health_table(before, None, expected))

        console.print(
            "running the sweeper Lambda handler (functions/sweeper/handler.py) against the"
            " emulator, with ROLLBACK_AFTER_SECONDS=0 and DELETE_AFTER_SECONDS=0 so that every"
            " abandoned record counts as stale at once (deployed: 60 s and 1 day)"
        )
        environment = {
            "AWS_ENDPOINT_URL_DYNAMODB": db.endpoint_url,
            "AWS_DEFAULT_REGION": LOCAL_CREDENTIALS["region_name"],
            "AWS_ACCESS_KEY_ID": LOCAL_CREDENTIALS["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": LOCAL_CREDENTIALS["aws_secret_access_key"],
            "TRANSACTIONS_TABLE": DEMO_TABLES["transactions"],
            "IMAGES_TABLE": DEMO_TABLES["images"],
            "LOCKS_TABLE": DEMO_TABLES["locks"],
            "DATA_TABLES": DEMO_TABLES["data"],
            "ROLLBACK_AFTER_SECONDS": "0",
            "DELETE_AFTER_SECONDS": "0",
            "SWEEP_PAGE_BUDGET": "50",
            "POWERTOOLS_SERVICE_NAME": "ddbtx-sweeper",
            "POWERTOOLS_METRICS_NAMESPACE": "ddbtx",
            "POWERTOOLS_METRICS_DISABLED": "true",
            "POWERTOOLS_TRACE_DISABLED": "true",
            "LOG_LEVEL": "ERROR",
        }
        with _environment(environment):
            handler = _load_sweeper_handler()
            # Lock rows count as expired an hour after their TTL (the deployed grace).
            event = {"id": "demo-tick", "source": "aws.events", "detail-type": "Scheduled Event"}
            report = handler.handler(event, LambdaContextDouble())
        console.print(report_table(report, "sweeper handler report"))
        after = _health(tm, names)
        console.print(_health_table(before, after, expected))
    clean = after.clean(expected)
    if clean:
        console.print(
            f"[bold green]CLEAN[/bold green]: balances add up to {expected}, nothing is locked,"
            " no transaction is left unfinished"
        )
    else:
        console.print("[bold red]NOT CLEAN[/bold red]: see the table above")
    return clean


# --- entry point ------------------------------------------------------------------------


def _app() -> Any:
    import typer

    app = typer.Typer(
        help="Operate ddbtx: sweep, inspect, recover, list locks; or run the local demo.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    @app.callback()
    def options(
        ctx: typer.Context,
        endpoint_url: str | None = typer.Option(
            None, envvar="AWS_ENDPOINT_URL_DYNAMODB", help="DynamoDB endpoint (e.g. a local one)"
        ),
        region: str | None = typer.Option(None, envvar="AWS_REGION", help="AWS region"),
        transactions_table: str = typer.Option("Transactions", envvar="TRANSACTIONS_TABLE"),
        images_table: str = typer.Option("TransactionImages", envvar="IMAGES_TABLE"),
        locks_table: str | None = typer.Option(None, envvar="LOCKS_TABLE"),
        data_tables: str = typer.Option(
            "", envvar="DATA_TABLES", help="comma-separated data tables to check for locks"
        ),
        as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
    ) -> None:
        ctx.obj = Options(
            endpoint_url=endpoint_url,
            region=region,
            transactions_table=transactions_table,
            images_table=images_table,
            locks_table=locks_table or None,
            data_tables=tuple(t.strip() for t in data_tables.split(",") if t.strip()),
            as_json=as_json,
        )

    @app.command()
    def sweep(
        ctx: typer.Context,
        rollback_after: int = typer.Option(60, min=0, help="seconds before pending is stale"),
        delete_after: int = typer.Option(86_400, min=0, help="seconds finished records stay"),
        page_budget: int | None = typer.Option(None, min=1, help="most scan pages (default all)"),
        full: bool = typer.Option(False, "--full", help="scan the whole transactions table"),
    ) -> None:
        """Sweep now: roll back stale, roll forward committed, clear leftovers."""
        raise typer.Exit(
            cmd_sweep(
                ctx.obj,
                rollback_after=rollback_after,
                delete_after=delete_after,
                page_budget=page_budget,
                full=full,
            )
        )

    @app.command()
    def inspect(ctx: typer.Context, tx_id: str) -> None:
        """Show a transaction: state, items, and which locks it still holds."""
        raise typer.Exit(cmd_inspect(ctx.obj, tx_id))

    @app.command()
    def recover(ctx: typer.Context, tx_id: str) -> None:
        """Drive a transaction to completion: forward if committed, back if pending."""
        raise typer.Exit(cmd_recover(ctx.obj, tx_id))

    @app.command()
    def locks(ctx: typer.Context) -> None:
        """Who holds what: lock rows with queue positions, and transaction item locks."""
        raise typer.Exit(cmd_locks(ctx.obj))

    @app.command()
    def demo(
        workers: int = typer.Option(4, min=1, max=16),
        transfers: int = typer.Option(8, min=1, max=100, help="transfers per worker"),
        seed: int = typer.Option(7, help="seed of the transfer and crash plan"),
    ) -> None:
        """Embedded DynamoDB, a bank with crashing coordinators, and the sweeper cleaning up."""
        raise typer.Exit(0 if run_demo(workers=workers, transfers=transfers, seed=seed) else 1)

    return app


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit status.

    Examples
    --------
    >>> main(["demo"])  # doctest: +SKIP
    0
    """
    try:
        import rich  # noqa: F401
        import typer  # noqa: F401
    except ImportError:
        print("the ddbtx command needs the cli extra: pip install 'ddbtx[cli]'")
        return 2
    try:
        _app()(args=argv, prog_name="ddbtx")
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0
