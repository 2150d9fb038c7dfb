"""``ddbtx``: the operator's command line, and the demo (typer and rich imported on use)."""

# No ``from __future__ import annotations``: typer reads the annotations, which name typer.
import getpass
import importlib.util
import json
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__, recovery
from . import schema as s
from ._base.dynamo import client_config
from ._base.items import applied, lock_owner
from ._cli.args import hoist_globals
from ._cli.errors import CliError, check_endpoint, explain
from ._cli.invoke import invoke as run_handler
from ._cli.invoke import scheduled_event
from ._cli.progress import (
    CONNECT_TIMEOUT,
    SweepProgress,
    library_logs,
    report_table,
    say_retries,
)
from .demo import run_demo
from .errors import InvalidTransactionIdError, LockNotFoundError, TableNotFound
from .local import KINDS, serve
from .locks import break_lock, list_locks
from .manager import TransactionManager
from .sweeper import Sweeper
from .tables import LockIndexError, add_lock_index

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from .locks import LockRow

#: botocore's ``max_attempts`` for the CLI's calls (6 attempts in all: it counts retries);
#: each connection attempt is bounded by ``CONNECT_TIMEOUT`` and each retry announced.
CLI_ATTEMPTS = 5


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

        # A session of its own: boto3's default one caches what it resolved first.
        session = boto3.session.Session()
        region = self.region
        if region is None and self.endpoint_url and not session.region_name:
            region = "us-east-1"  # a local endpoint ignores the region, but boto3 needs one
        from botocore.config import Config

        config = client_config(CLI_ATTEMPTS).merge(
            Config(connect_timeout=CONNECT_TIMEOUT, read_timeout=CONNECT_TIMEOUT * 10)
        )
        client = session.client(
            "dynamodb", endpoint_url=self.endpoint_url, region_name=region, config=config
        )
        say_retries(client, client.meta.endpoint_url)
        return client

    def manager(self) -> Any:
        return TransactionManager(self.client(), self.transactions_table, self.images_table)

    def janitor_environment(self) -> dict[str, str]:
        """The variables the CDK app gives a janitor, from these options."""
        settings = {
            "TRANSACTIONS_TABLE": self.transactions_table,
            "IMAGES_TABLE": self.images_table,
            "DATA_TABLES": ",".join(self.data_tables),
            # X-Ray's daemon is not here: tracing off, as in the tests.
            "POWERTOOLS_TRACE_DISABLED": "true",
        }
        if self.locks_table:
            settings["LOCKS_TABLE"] = self.locks_table
        if self.endpoint_url:
            settings["AWS_ENDPOINT_URL_DYNAMODB"] = self.endpoint_url
        region = self.region or ("us-east-1" if self.endpoint_url else None)
        if region:
            settings["AWS_REGION"] = settings["AWS_DEFAULT_REGION"] = region
        return settings

    def explain(self, exc: BaseException) -> str | None:
        """The one-line message for a mistake in these options (see :mod:`ddbtx._cli.errors`)."""
        import boto3

        tables = [
            (self.transactions_table, "--transactions-table / TRANSACTIONS_TABLE"),
            (self.images_table, "--images-table / IMAGES_TABLE"),
        ]
        if self.locks_table:
            tables.append((self.locks_table, "--locks-table / LOCKS_TABLE"))
        tables += [(t, "--data-tables / DATA_TABLES") for t in self.data_tables]
        return explain(
            exc,
            endpoint=self.endpoint_url,
            describe=lambda name: self.client().describe_table(TableName=name),
            tables=tables,
            # With no --region, the one boto3 would pick (environment, then profile).
            region=self.region or boto3.session.Session().region_name,
        )


def _version(value: bool) -> None:
    import typer

    if value:
        try:
            installed = version("ddbtx")
        except PackageNotFoundError:  # run from a checkout's source, not installed
            installed = __version__
        print(f"ddbtx {installed}")
        raise typer.Exit(0)


def _console() -> "Console":
    from rich.console import Console

    return Console()


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def _key_text(key: dict[str, Any]) -> str:
    return ", ".join(f"{name}={next(iter(value.values()))}" for name, value in key.items())


def _yes(flag: Any) -> str:
    return "yes" if flag else "no"


def _by_id(action: Callable[..., dict[str, Any]], opts: Options, tx_id: str) -> dict[str, Any]:
    """``inspect`` or ``recover`` of ``tx_id``; an id that cannot be one is a usage error."""
    try:
        return action(opts.manager(), tx_id)
    except InvalidTransactionIdError as exc:
        raise CliError(str(exc)) from exc


def _show_transaction(result: dict[str, Any]) -> None:
    from rich.table import Table

    console = _console()
    if not result["found"]:
        console.print(result["reason"], soft_wrap=True, markup=False)
        return
    caller = f" (caller's id {result['caller_id']!r})" if result["caller_id"] else ""
    blocked = ", waiting on an older transaction" if result["waiting"] else ""
    rolled_back_by = f", rolled back by {result['decided_by']}" if result["decided_by"] else ""
    console.print(
        f"transaction {result['transaction_id']}{caller}: [bold]{result['state']}[/bold]"
        f", {'' if result['completed'] else 'not '}completed, version {result['version']},"
        f" last change {result['age_seconds']}s ago, {result['locks_held']} lock(s) held"
        f"{blocked}{rolled_back_by}"
    )
    table = Table("table", "key", "operation", "locked", "write applied", "other holder")
    for item in result["items"]:
        table.add_row(
            item["table"],
            _key_text(item["key"]),
            item["operation"],
            _yes(item["locked"]),
            _yes(item["write_applied"]),
            "" if item["locked_by"] == result["transaction_id"] else item["locked_by"] or "",
        )
    console.print(table)


def _show_dry_run(plan: dict[str, Any]) -> None:
    """The records a sweep would act on, then what it would delete and not look at."""
    console = _console()
    console.print("dry run: nothing is changed")
    _show_pending(plan["transactions"])
    console.print(f"completed TX records a sweep would delete: {plan['records_to_delete']}")
    for gap in plan["not_looked_at"]:
        console.print(f"not looked at: {gap}", soft_wrap=True)


def _show_pending(found: list[dict[str, Any]]) -> None:
    """Two lines a transaction (an id is copied from here into `inspect` and `recover`,
    so no column may cut it): what it is, then what a sweep would do now."""
    console = _console()
    if not found:
        console.print("no transaction is pending or left uncompleted")
        return
    console.print(f"{len(found)} transaction(s) not completed, oldest first:")
    for tx in found:
        caller = f" (caller's id {tx['caller_id']!r})" if tx["caller_id"] else ""
        console.print(
            f"{tx['transaction_id']}{caller}  [bold]{tx['state']}[/bold], idle "
            f"{tx['age_seconds']:.0f} s, {len(tx['items'])} request(s), "
            f"{tx['locks_held']} lock(s) held",
            soft_wrap=True,
        )
        console.print(f"  sweep now: {tx['plan']}", soft_wrap=True)


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
                header = tm.protocol.run(tm.protocol.records.read_header(owner))
                state = "record gone" if header is None else recovery.STATE_NAMES[header.state]
                if header is not None and header.completed:
                    state += " (completed)"
                idle = None
                if header is not None:  # on the record's clock: how long nothing has moved
                    idle = round((tm.protocol.now_ms() - header.updated_ms) / 1000, 3)
                rows.append(
                    {
                        "table": table,
                        "key": {n: item[n] for n in names},
                        "transaction_id": owner,
                        "state": state,
                        "write_applied": applied(item),
                        "idle_seconds": idle,
                    }
                )
    return rows


def cmd_locks(opts: Options) -> int:
    """Who holds what: lock-table rows (with queue positions) and transaction item locks."""
    if not opts.locks_table and not opts.data_tables:
        raise CliError(
            "no table to list: name the locks table (--locks-table / LOCKS_TABLE) and the data"
            " tables (--data-tables / DATA_TABLES)"
        )
    tm = opts.manager()
    lock_rows = list_locks(tm.client, opts.locks_table) if opts.locks_table else []
    item_locks = held_item_locks(tm, opts.data_tables)
    if opts.as_json:
        _print_json(
            {
                "locks_table": opts.locks_table,
                "data_tables": list(opts.data_tables),
                "locks": [asdict(r) for r in lock_rows],
                "item_locks": item_locks,
            }
        )
        return 0
    console = _console()
    if not opts.locks_table:
        console.print("lock rows: no locks table configured (--locks-table / LOCKS_TABLE)")
    else:
        empty_rows = f"no lock rows in {opts.locks_table}"
        console.print(_row_table(lock_rows, opts.locks_table) if lock_rows else empty_rows)
    if not opts.data_tables:
        console.print("item locks: no data tables configured (--data-tables / DATA_TABLES)")
    else:
        empty = f"no item locked by a transaction in {', '.join(opts.data_tables)}"
        console.print(_item_table(item_locks, opts.data_tables) if item_locks else empty)
    return 0


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.0f} s"


def _row_table(lock_rows: list["LockRow"], table_name: str) -> "Table":
    from rich.table import Table

    table = Table(
        "resource", "kind", "namespace", "state", "owner", "fencing", "ticket", "queue",
        "expires in", title=f"lock rows in {table_name}",
    )  # fmt: skip
    now = time.time()
    for r in lock_rows:
        # The holder's own estimate of its lease end, on its clock (display only).
        left = None if r.expires_at is None or r.state != "held" else r.expires_at - now
        table.add_row(
            r.resource, r.kind, r.namespace or "", r.state, r.owner or "",
            str(r.fencing_token or ""), str(r.ticket or ""), str(r.queue_position or ""),
            _seconds(left),
        )  # fmt: skip
    return table


def _item_table(item_locks: list[dict[str, Any]], tables: tuple[str, ...]) -> "Table":
    from rich.table import Table

    table = Table(
        "table",
        "key",
        "transaction",
        "state",
        "write applied",
        "idle",
        title=f"items locked by transactions in {', '.join(tables)}",
    )
    for i in item_locks:
        table.add_row(
            i["table"], _key_text(i["key"]), i["transaction_id"], i["state"],
            _yes(i["write_applied"]), _seconds(i["idle_seconds"]),
        )  # fmt: skip
    return table


def _app(state: dict[str, Options]) -> Any:
    """The typer app; its option callback leaves the parsed :class:`Options` in ``state``."""
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
        verbose: bool = typer.Option(False, "--verbose", "-v", help="show ddbtx's info logs"),
        version: bool = typer.Option(
            False, "--version", is_eager=True, callback=_version, help="print the version"
        ),
    ) -> None:
        check_endpoint(endpoint_url)
        ctx.with_resource(library_logs(verbose))
        ctx.obj = state["options"] = Options(
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
        delete_after: int = typer.Option(86_400, min=0, help="seconds completed records stay"),
        page_budget: int | None = typer.Option(None, min=1, help="most scan pages (default all)"),
        full: bool = typer.Option(False, "--full", help="scan the whole transactions table"),
        dry_run: bool = typer.Option(
            False, "--dry-run", help="print what a sweep would do with the records; change nothing"
        ),
        strict: bool = typer.Option(
            False, "--strict", help="exit 1 when anything is left: stuck, an error, not covered"
        ),
    ) -> None:
        """Sweep now: roll back stale, roll forward committed, clear leftovers."""
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        opts: Options = ctx.obj
        console = _console()
        manager = opts.manager()

        def sweeper_with(**options: Any) -> Sweeper:
            return Sweeper(
                manager,
                rollback_after=timedelta(seconds=rollback_after),
                delete_after=timedelta(seconds=delete_after),
                locks_table=opts.locks_table,
                data_tables=opts.data_tables,
                **options,
            )

        if dry_run:
            if full or page_budget is not None:
                raise CliError(
                    "--dry-run reads the sweep index and the records, not the tables: "
                    "leave out --full and --page-budget"
                )
            plan = sweeper_with(persist_cursor=False).dry_run()
            if opts.as_json:
                _print_json(plan)
            else:
                _show_dry_run(plan)
            acting = any(t["acts"] for t in plan["transactions"])
            raise typer.Exit(1 if strict and acting else 0)
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=opts.as_json,
        ) as progress:
            sweeper = sweeper_with(
                progress=SweepProgress(progress, manager.transactions_table if full else None)
            )
            # Without a budget this sweep covers everything from the start; with one it resumes.
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
        raise typer.Exit(1 if report.errors or (strict and report.left_something) else 0)

    @app.command("invoke")
    def invoke_(
        ctx: typer.Context,
        function: str = typer.Argument(..., help="sweeper or recovery"),
        event: str | None = typer.Argument(
            None, help="the event as JSON (default for the sweeper: a scheduled event)"
        ),
        functions_dir: str = typer.Option("functions", help="the checkout's functions folder"),
        timeout: float = typer.Option(60.0, min=1.0, help="seconds the context starts with"),
    ) -> None:
        """Run a janitor's Lambda handler here, with the table options as its environment."""
        opts: Options = ctx.obj
        if event is None and function == "recovery":
            raise CliError(
                "the recovery function needs an event, e.g. "
                '\'{"action": "inspect", "transaction_id": "..."}\''
            )
        try:
            parsed = scheduled_event() if event is None else json.loads(event)
        except json.JSONDecodeError as exc:
            raise CliError(f"the event is not JSON: {exc}") from exc
        answer = run_handler(
            function, parsed, functions_dir=Path(functions_dir),
            settings=opts.janitor_environment(), timeout=timeout,
        )  # fmt: skip
        _print_json(answer)
        failed = isinstance(answer, dict) and (answer.get("ok") is False or answer.get("errors"))
        raise typer.Exit(1 if failed else 0)

    @app.command("local")
    def local_(
        port: int = typer.Option(8000, min=1, max=65535, help="port on 127.0.0.1"),
        backend: str = typer.Option("moto", help="the emulator: moto or dynalite (Node.js)"),
    ) -> None:
        """Serve an embedded DynamoDB in the foreground until Ctrl-C, printing the exports."""
        if backend not in KINDS:
            raise CliError(f"--backend must be one of {', '.join(KINDS)}, not {backend!r}")
        serve(backend, port)

    @app.command()
    def pending(
        ctx: typer.Context,
        rollback_after: int = typer.Option(60, min=0, help="seconds before pending is stale"),
        decided_grace: int = typer.Option(
            30, min=0, help="seconds a decided record is left to its coordinator"
        ),
    ) -> None:
        """List every transaction not completed, oldest first, and what a sweep would do."""
        opts: Options = ctx.obj
        found = Sweeper(
            opts.manager(),
            rollback_after=timedelta(seconds=rollback_after),
            delete_after=timedelta(days=1),  # not used: completed records are not listed
            decided_grace=timedelta(seconds=decided_grace),
            persist_cursor=False,
        ).pending()
        if opts.as_json:
            _print_json(found)
        else:
            _show_pending(found)

    @app.command()
    def inspect(ctx: typer.Context, tx_id: str) -> None:
        """Show a transaction: state, items, and which locks it still holds."""
        result = _by_id(recovery.inspect, ctx.obj, tx_id)
        if ctx.obj.as_json:
            _print_json(result)
        else:
            _show_transaction(result)
        raise typer.Exit(0 if result["found"] else 1)

    @app.command()
    def recover(ctx: typer.Context, tx_id: str) -> None:
        """Drive a transaction to completion: forward if committed, back if pending."""
        result = _by_id(recovery.recover, ctx.obj, tx_id)
        if ctx.obj.as_json:
            _print_json(result)
        else:
            _console().print(f"recover {tx_id}: [bold]{result['outcome']}[/bold]")
            if "reason" in result:
                _console().print(result["reason"], soft_wrap=True, markup=False)
            if "after" in result:
                _show_transaction(result["after"])
        raise typer.Exit(1 if result["outcome"] in ("missing", "active") else 0)

    locks_app = typer.Typer(help="Who holds what; break a lock whose holder is gone.")

    @locks_app.callback(invoke_without_command=True)
    def locks(ctx: typer.Context) -> None:
        """Who holds what: lock rows with queue positions, and transaction item locks."""
        if ctx.invoked_subcommand is None:
            raise typer.Exit(cmd_locks(ctx.obj))

    @locks_app.command("break")
    def break_(
        ctx: typer.Context,
        resource: str,
        namespace: str | None = typer.Option(None, help="the FIFO namespace"),
        kind: str | None = typer.Option(
            None, help="mutex, lease or fifo (when the resource has several lock rows)"
        ),
        force: bool = typer.Option(
            False, "--force", help="do not watch for heartbeats (mutex: do not wait for expiry)"
        ),
        by: str | None = typer.Option(None, help="who breaks it (default: user@host)"),
    ) -> None:
        """Break a lock whose holder is gone; refused while the holder heartbeats."""
        opts: Options = ctx.obj
        if not opts.locks_table:
            raise CliError("no locks table: name it with --locks-table / LOCKS_TABLE")
        who = by
        if who is None:
            try:
                who = f"{getpass.getuser()}@{socket.gethostname()}"
            except (OSError, KeyError) as exc:  # a container user with no passwd entry
                raise CliError("cannot tell who you are: name yourself with --by") from exc
        console = _console()

        def watch(seconds: float) -> None:
            if not opts.as_json:
                console.print(f"watching the holder for one lease ({seconds:.1f} s) ...")
            time.sleep(seconds)

        try:
            result = break_lock(
                opts.client(), opts.locks_table, resource, by=who, kind=kind,  # type: ignore[arg-type]
                namespace=namespace, force=force, sleep=watch,
            )  # fmt: skip
        except (ValueError, LockNotFoundError) as exc:
            raise CliError(str(exc)) from exc
        if result.outcome == "broken":
            print(
                f"ddbtx: audit: {who} broke the {result.kind} lock on {resource!r}"
                f"{f' (namespace {result.namespace!r})' if result.namespace else ''} held by"
                f" {result.owner} (token {result.fencing_token}){' by force' if force else ''};"
                f" row before: {json.dumps(result.before, sort_keys=True)}",
                file=sys.stderr,
            )
        if opts.as_json:
            _print_json(result.to_dict())
        else:
            held = f" held by {result.owner} (token {result.fencing_token})" if result.owner else ""
            console.print(
                f"{result.kind} lock on {resource!r}{held}: [bold]{result.outcome}[/bold]"
            )
            if result.reason:
                console.print(result.reason)
        raise typer.Exit(1 if result.outcome == "refused" else 0)

    app.add_typer(locks_app, name="locks")

    @app.command("add-lock-index")
    def add_index(
        ctx: typer.Context,
        table: str,
        wait: bool = typer.Option(True, "--wait/--no-wait", help="wait until it is built"),
    ) -> None:
        """Add the sweeper's sparse lock index to a data table you brought (dataTables)."""
        try:
            status = add_lock_index(ctx.obj.client(), table, wait=wait)
        except TableNotFound:
            where = ctx.obj.endpoint_url or ctx.obj.region or "the default region"
            print(f"error: no table {table!r} at {where}")
            raise typer.Exit(1) from None
        except LockIndexError as exc:
            print(f"error: {exc}")
            raise typer.Exit(1) from None
        print(f"{table}: index {s.LOCK_INDEX} on {s.ATTR_LOCK} is {status}")

    @app.command()
    def demo(
        workers: int = typer.Option(4, min=1, max=16),
        transfers: int = typer.Option(8, min=1, max=100, help="transfers per worker"),
        seed: int = typer.Option(7, help="seed of the transfer and crash plan"),
        emulator: str = typer.Option(
            "moto", help="moto (in-process) or dynalite (needs Node.js and its npm package)"
        ),
    ) -> None:
        """Embedded DynamoDB, a bank with crashing coordinators, and the sweeper cleaning up."""
        if emulator not in KINDS:
            raise CliError(f"--emulator must be one of {', '.join(KINDS)}, not {emulator!r}")
        if emulator == "moto" and importlib.util.find_spec("moto") is None:
            raise CliError(
                "the demo needs moto's server: pip install '.[demo]' in a ddbtx checkout"
            )
        result = run_demo(workers=workers, transfers=transfers, seed=seed, emulator=emulator)
        raise typer.Exit(0 if result.clean else 1)

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
        print(
            "the ddbtx command needs the cli extra: pip install '.[cli]' in a ddbtx checkout",
            file=sys.stderr,
        )
        return 2
    state: dict[str, Options] = {}
    try:
        args = hoist_globals(sys.argv[1:] if argv is None else list(argv))
        _app(state)(args=args, prog_name="ddbtx")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:
        message = state.get("options", Options()).explain(exc)
        if message is None:
            raise  # not a mistake in the command: a bug, with its traceback
        print(f"ddbtx: error: {message}", file=sys.stderr)
        return 2
    return 0
