"""The operator CLI on both emulators: inspect, locks, recover and sweep as on-call use them,
and its one-line answers to ordinary mistakes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from ddbtx import TransactionManager, __version__
from ddbtx._cli.args import hoist_globals
from ddbtx._cli.errors import explain
from ddbtx.cli import main
from ddbtx.local import LocalDynamo, free_port
from ddbtx.locks import LeaseLockClient, Mutex
from helpers import assert_clean, scan

from .support import ROOT, JanitorTables, abandon

#: The checkout's janitor handlers, for ``ddbtx invoke``.
FUNCTIONS = ROOT / "functions"

#: Variables through which boto3 or the CLI could find a region, credentials or tables.
AMBIENT = (
    "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL", "TRANSACTIONS_TABLE", "IMAGES_TABLE", "LOCKS_TABLE", "DATA_TABLES",
)  # fmt: skip

pytest_plugins = ("janitors.fixtures",)


@pytest.fixture
def ddbtx_streams(
    backend: LocalDynamo, janitor_tables: JanitorTables, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    """Run ``ddbtx --endpoint-url ... <args>``; return its status, output and stderr.
    ``without``: options of the common set left out (say, ``("--data-tables",)``)."""
    t = janitor_tables
    common = {
        "--endpoint-url": backend.endpoint_url, "--region": "us-east-1",
        "--transactions-table": t.tx, "--images-table": t.images,
        "--locks-table": t.locks, "--data-tables": t.data,
    }  # fmt: skip

    def run(*args: str, without: tuple[str, ...] = ()) -> tuple[int, str, str]:
        given = [part for name, value in common.items() if name not in without
                 for part in (name, value)]  # fmt: skip
        capsys.readouterr()
        status = main([*given, *args])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


@pytest.fixture
def ddbtx(ddbtx_streams: Callable[..., tuple[int, str, str]]) -> Callable[..., tuple[int, str]]:
    """Run ``ddbtx --endpoint-url ... <args>``; return its status and output."""

    def run(*args: str) -> tuple[int, str]:
        status, out, _ = ddbtx_streams(*args)
        return status, out

    return run


@pytest.fixture
def bare_ddbtx(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> Callable[..., tuple[int, str, str]]:
    """Run ``ddbtx <args>`` in an environment with no AWS settings at all; return its
    status, stdout and stderr."""
    for name in AMBIENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = main(list(args))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


def test_given_a_stuck_transfer_when_on_call_inspects_lists_and_recovers_then_it_is_completed(
    ddbtx: Callable[..., tuple[int, str]],
    endpoint_env: Any,
    young_tm: TransactionManager,
    janitor_tables: JanitorTables,
    seed: Callable[..., None],
    ddb: Any,
) -> None:
    # Given a pending transfer whose coordinator died, and a held mutex
    t = janitor_tables
    seed(a=100, b=100)
    tx_id = abandon(young_tm, t.data, "pending", ("a", "b"))
    assert Mutex(ddb, t.locks, owner="worker-7").acquire("report")

    # When on-call inspects it
    status, out = ddbtx("--json", "inspect", tx_id)
    # Then its state and both held locks are shown
    shown = json.loads(out)
    assert status == 0 and shown["state"] == "pending" and shown["locks_held"] == 2

    # When on-call lists the locks
    status, out = ddbtx("--json", "locks")
    # Then the mutex holder and the transaction's item locks are listed
    listed = json.loads(out)
    assert [(r["resource"], r["owner"]) for r in listed["locks"]] == [("report", "worker-7")]
    assert sorted(i["key"]["pk"]["S"] for i in listed["item_locks"]) == ["a", "b"]
    assert {i["transaction_id"] for i in listed["item_locks"]} == {tx_id}
    # And in the words `inspect` uses for the holder's state
    assert {i["state"] for i in listed["item_locks"]} == {shown["state"]} == {"pending"}

    # When on-call recovers it (as a table), and inspects an unknown id
    status, out = ddbtx("recover", tx_id)
    missing_status, _ = ddbtx("inspect", "no-such-tx")
    # Then it is rolled back and nothing is locked; the unknown id fails
    assert status == 0 and "rolled_back" in out
    assert missing_status == 1
    assert_clean(ddb, t)


def test_given_a_transfer_begun_under_a_callers_id_when_inspected_by_it_then_both_ids_shown(
    ddbtx: Callable[..., tuple[int, str]],
    endpoint_env: Any,
    young_tm: TransactionManager,
    janitor_tables: JanitorTables,
    seed: Callable[..., None],
    ddb: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a pending transfer begun under the caller's id "order-42", abandoned
    seed(a=100, b=100)
    tx_id = abandon(young_tm, janitor_tables.data, "pending", ("a", "b"), caller_id="order-42")
    monkeypatch.setenv("COLUMNS", "200")  # the status line on one line

    # When on-call inspects it by the caller's id, as a table
    status, out = ddbtx("inspect", "order-42")

    # Then the line names the internal id and the caller's, and its state
    assert status == 0
    assert f"transaction {tx_id} (caller's id 'order-42'): pending, not completed" in out
    # And recovering it by the caller's id completes it
    status, out = ddbtx("recover", "order-42")
    assert status == 0 and "rolled_back" in out
    assert_clean(ddb, janitor_tables)


@pytest.mark.parametrize("command", ["inspect", "recover"])
def test_given_an_id_no_transaction_can_have_when_on_call_uses_it_then_one_line_and_status_2(
    ddbtx_streams: Callable[..., tuple[int, str, str]],
    endpoint_env: Any,
    janitor_tables: JanitorTables,
    ddb: Any,
    command: str,
) -> None:
    # Given an id of 2,000 UTF-8 bytes (a caller's id has at most 1,024)
    # When on-call inspects or recovers it
    status, out, err = ddbtx_streams(command, "é" * 1000)

    # Then one line names the problem, the status is 2, and nothing was written
    assert (status, out) == (2, "")
    assert err == "ddbtx: error: transaction_id is 2000 bytes in UTF-8; at most 1024 are allowed\n"
    assert_clean(ddb, janitor_tables)


def test_given_stale_records_when_on_call_sweeps_then_the_report_is_printed(
    ddbtx: Callable[..., tuple[int, str]],
    endpoint_env: Any,
    old_tm: TransactionManager,
    janitor_tables: JanitorTables,
    seed: Callable[..., None],
    ddb: Any,
) -> None:
    # Given a committed transfer whose coordinator died before completing it
    seed(a=100, b=100)
    abandon(old_tm, janitor_tables.data, "committed", ("a", "b"))

    # When on-call sweeps now, as a full scan
    status, out = ddbtx("sweep", "--full")

    # Then the report shows the roll-forward and the books are balanced
    assert status == 0
    row = next(line for line in out.splitlines() if "rolled forward" in line)
    assert row.split()[-2] == "1"
    assert_clean(ddb, janitor_tables)


def test_given_a_stuck_transaction_when_on_call_sweeps_then_one_line_per_pass_and_no_log_line(
    ddbtx: Callable[..., tuple[int, str]],
    endpoint_env: Any,
    old_tm: TransactionManager,
    janitor_tables: JanitorTables,
    seed: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a pending transfer long past the rollback age (the sweeper logs a warning for it)
    seed(a=100, b=100)
    tx_id = abandon(old_tm, janitor_tables.data, "pending", ("a", "b"))
    # And a terminal, so that the live display is drawn
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "150")

    # When on-call sweeps
    with caplog.at_level("INFO"):
        status, shown = ddbtx("sweep")

    # Then the display has one line per pass: the index pass counts its partitions, the
    # scan pass the rows read so far (no made-up totals, no line per partition)
    assert "index pass: 32 of 32 partitions, 1 due record(s)" in shown
    assert f"scan pass: {janitor_tables.locks}" in shown
    assert "~None" not in shown and "index P#" not in shown
    # And the report names the stuck transaction, with no log line around it
    assert status == 0 and f"stuck transactions: {tx_id}" in shown
    # (a lock client another test left in this worker may heartbeat and log at any time;
    # this command holds no lock, so its heartbeat threads are not the CLI's)
    logged = [
        f"{r.threadName}: {r.getMessage()}"
        for r in caplog.records
        if r.name.startswith("ddbtx") and "-heartbeat-" not in r.threadName
    ]
    assert not logged, logged
    assert_clean(endpoint_env.client(), janitor_tables)


def test_given_no_region_anywhere_when_a_command_runs_then_one_line_says_where_to_set_it(
    bare_ddbtx: Callable[..., tuple[int, str, str]],
) -> None:
    # Given no region in options, environment or AWS config
    # When on-call inspects a transaction
    status, out, err = bare_ddbtx("inspect", "tx-1")

    # Then one line names the fix, and the status is non-zero
    assert err == (
        "ddbtx: error: no AWS region: pass --region or set AWS_REGION"
        " (or a region in your AWS profile)\n"
    )
    assert (status, out) == (2, "")


def test_given_no_credentials_anywhere_when_a_command_runs_then_one_line_says_how_to_add_them(
    bare_ddbtx: Callable[..., tuple[int, str, str]],
) -> None:
    # Given a region but no credentials (the request is refused before it is sent)
    # When on-call inspects a transaction
    status, _, err = bare_ddbtx("--region", "eu-west-1", "inspect", "tx-1")

    # Then one line names the ways to provide them
    assert err.startswith("ddbtx: error: no AWS credentials found: run `aws configure`")
    assert err.count("\n") == 1 and status == 2


@pytest.mark.parametrize(
    ("option", "role", "command"),
    [
        ("--transactions-table", "tx", ("inspect", "tx-1")),
        ("--data-tables", "data", ("locks",)),
        ("--images-table", "images", ("sweep",)),
    ],
)
def test_given_a_wrong_table_name_when_a_command_runs_then_the_message_names_it_and_its_option(
    bare_ddbtx: Callable[..., tuple[int, str, str]],
    backend: LocalDynamo,
    janitor_tables: JanitorTables,
    option: str,
    role: str,
    command: tuple[str, ...],
) -> None:
    # Given real tables but one of them misnamed (a typo in one option)
    t = janitor_tables
    names = {"tx": t.tx, "images": t.images, "data": t.data}
    names[role] = "no-such-table"
    args = [
        "--endpoint-url", backend.endpoint_url, "--region", "us-east-1",
        "--transactions-table", names["tx"], "--images-table", names["images"],
        "--locks-table", t.locks, "--data-tables", names["data"],
    ]  # fmt: skip

    # When the command runs (local credentials: the emulator answers)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ACCESS_KEY_ID", "local")
        env.setenv("AWS_SECRET_ACCESS_KEY", "local")
        status, _, err = bare_ddbtx(*args, *command)

    # Then one line names the missing table and the option that set it
    assert err == (
        f"ddbtx: error: table not found: 'no-such-table' (set by {option} /"
        f" {option[2:].upper().replace('-', '_')}); create it or name the right table\n"
    )
    assert status == 2


def test_given_nothing_to_list_when_on_call_lists_locks_then_it_says_which_tables_to_name(
    bare_ddbtx: Callable[..., tuple[int, str, str]],
) -> None:
    # Given no locks table and no data tables configured
    # When on-call lists the locks
    status, out, err = bare_ddbtx("--region", "eu-west-1", "locks")

    # Then it does not claim "no lock rows": it says which tables to name
    assert err == (
        "ddbtx: error: no table to list: name the locks table (--locks-table / LOCKS_TABLE)"
        " and the data tables (--data-tables / DATA_TABLES)\n"
    )
    assert (status, out) == (2, "")


def test_given_only_data_tables_when_on_call_lists_locks_then_the_lock_rows_are_said_unconfigured(
    ddbtx: Callable[..., tuple[int, str]],
    endpoint_env: Any,
    young_tm: TransactionManager,
    janitor_tables: JanitorTables,
    seed: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a held item lock, and a CLI told of the data table only
    seed(a=100, b=100)
    abandon(young_tm, janitor_tables.data, "pending", ("a", "b"))
    monkeypatch.delenv("LOCKS_TABLE", raising=False)

    # When on-call lists the locks without --locks-table
    status, out = ddbtx("--locks-table", "", "locks")

    # Then the missing table is named as unconfigured, and the item locks say "pending"
    assert status == 0
    assert "lock rows: no locks table configured (--locks-table / LOCKS_TABLE)" in out
    assert "pending" in out and " P " not in out


def test_given_an_unreachable_endpoint_then_the_message_names_the_url_to_check() -> None:
    # Given the error botocore raises when nothing listens at the endpoint
    url = f"http://127.0.0.1:{free_port()}"
    # When the CLI explains it
    message = explain(EndpointConnectionError(endpoint_url=url), endpoint=url)
    # Then it names the URL and the option that set it
    assert message == (
        f"cannot reach DynamoDB at {url}: check --endpoint-url / AWS_ENDPOINT_URL_DYNAMODB"
    )


# --- ddbtx locks break -----------------------------------------------------------------------


def test_given_a_dead_lease_holder_when_on_call_breaks_it_then_it_is_freed_with_an_audit_line(
    ddbtx_streams: Callable[..., tuple[int, str, str]],
    endpoint_env: Any,
    janitor_tables: JanitorTables,
    ddb: Any,
) -> None:
    # Given a lease holder that died (a short lease, so that the watch is short)
    holder = LeaseLockClient(ddb, janitor_tables.locks, owner="host-a", lease_duration=0.3,
                             heartbeat_period=0.1)  # fmt: skip
    lock = holder.acquire("Moe")
    holder._heartbeats.close()  # dies: no more heartbeats

    # When on-call breaks it, watching one lease for heartbeats
    status, out, err = ddbtx_streams("--json", "locks", "break", "Moe", "--by", "alice@ops")

    # Then it is broken, with an audit line naming who, what and the row before
    result = json.loads(out)
    assert status == 0
    assert (result["outcome"], result["kind"], result["owner"]) == ("broken", "lease", "host-a")
    assert err.startswith("ddbtx: audit: alice@ops broke the lease lock on 'Moe' held by host-a")
    assert '"owner": {"S": "host-a"}' in err and err.count("\n") == 1
    assert lock.heartbeat() is False
    # And the listing shows it free, its fencing counter kept
    status, out = ddbtx_streams("--json", "locks")[:2]
    assert [(r["state"], r["fencing_token"]) for r in json.loads(out)["locks"]] == [("free", 1)]


def test_given_a_mutex_without_expiry_when_on_call_breaks_it_then_refused_unless_forced(
    ddbtx_streams: Callable[..., tuple[int, str, str]],
    endpoint_env: Any,
    janitor_tables: JanitorTables,
    ddb: Any,
) -> None:
    # Given a held mutex (no heartbeats, no expiry: its holder may be alive)
    assert Mutex(ddb, janitor_tables.locks, owner="worker-7").acquire("report")

    # When on-call breaks it without and with --force
    refused = ddbtx_streams("locks", "break", "report", "--by", "bob")
    forced = ddbtx_streams("locks", "break", "report", "--force", "--by", "bob")

    # Then the first is refused (status 1, why), the second breaks it
    assert refused[0] == 1 and "refused" in refused[1] and "never heartbeats" in refused[1]
    assert refused[2] == ""
    assert forced[0] == 0 and "broken" in forced[1]
    assert "bob broke the mutex lock on 'report' held by worker-7 (token 1) by force" in forced[2]
    assert Mutex(ddb, janitor_tables.locks, owner="worker-8").acquire_token("report") == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("no-such-thing",), "no lock row for resource 'no-such-thing'"),
        (("report", "--namespace", "sum"), "no fifo namespace 'sum' lock row for resource"),
        (("report", "--kind", "queue"), "kind must be one of mutex, lease, fifo"),
        (("report", "--by", ""), "by must not be empty"),
    ],
)
def test_given_bad_arguments_when_on_call_breaks_a_lock_then_one_line_and_nothing_written(
    ddbtx_streams: Callable[..., tuple[int, str, str]],
    endpoint_env: Any,
    janitor_tables: JanitorTables,
    ddb: Any,
    args: tuple[str, ...],
    message: str,
) -> None:
    # Given a held mutex
    assert Mutex(ddb, janitor_tables.locks, owner="worker-7").acquire("report")
    before = scan(ddb, janitor_tables.locks)
    # When
    status, out, err = ddbtx_streams("locks", "break", *args, "--force")
    # Then
    assert (status, out) == (2, "")
    assert err.startswith("ddbtx: error: ") and message in err and err.count("\n") == 1
    assert scan(ddb, janitor_tables.locks) == before


def test_given_a_user_with_no_name_when_breaking_without_by_then_one_line_and_nothing_written(
    ddbtx_streams: Callable[..., tuple[int, str, str]],
    endpoint_env: Any,
    janitor_tables: JanitorTables,
    ddb: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a held mutex, and a container user the system cannot name
    assert Mutex(ddb, janitor_tables.locks, owner="worker-7").acquire("report")
    before = scan(ddb, janitor_tables.locks)

    def nameless() -> str:
        raise OSError("No username set in the environment")

    monkeypatch.setattr("getpass.getuser", nameless)
    # When on-call breaks it without --by
    status, out, err = ddbtx_streams("locks", "break", "report", "--force")
    # Then one line asks for --by, and nothing was written
    assert (status, out) == (2, "")
    assert err == "ddbtx: error: cannot tell who you are: name yourself with --by\n"
    assert scan(ddb, janitor_tables.locks) == before


def test_given_no_locks_table_when_on_call_breaks_a_lock_then_it_says_which_option_names_it(
    bare_ddbtx: Callable[..., tuple[int, str, str]],
) -> None:
    status, out, err = bare_ddbtx("--region", "eu-west-1", "locks", "break", "report")
    assert err == "ddbtx: error: no locks table: name it with --locks-table / LOCKS_TABLE\n"
    assert (status, out) == (2, "")


# --- first contact (issue 24): mistakes a newcomer makes get one line and status 2 ------------


def test_given_an_endpoint_without_a_scheme_when_a_command_runs_then_one_line_says_so(
    bare_ddbtx: Callable[..., tuple[int, str, str]],
) -> None:
    # Given an endpoint written as host:port (boto3 raises ValueError: Invalid endpoint)
    # When on-call inspects a transaction through it
    status, out, err = bare_ddbtx("--endpoint-url", "127.0.0.1:39155", "inspect", "tx-1")

    # Then one line shows the form it needs, and the status is 2
    assert err == (
        "ddbtx: error: --endpoint-url / AWS_ENDPOINT_URL_DYNAMODB must be a URL with a scheme"
        " and a host, like http://127.0.0.1:8000, not '127.0.0.1:39155'\n"
    )
    assert (status, out) == (2, "")


def test_given_no_dynalite_when_the_demo_runs_on_it_then_one_line_says_how_to_get_it(
    bare_ddbtx: Callable[..., tuple[int, str, str]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    # Given a dynalite that is not there (as from a wheel, outside a checkout)
    monkeypatch.setenv("DDBTX_DYNALITE", str(tmp_path / "dynalite" / "cli.js"))
    # When the demo is asked to run on it
    status, out, err = bare_ddbtx("demo", "--emulator", "dynalite")

    # Then one line names what is missing and the way around it, and the status is 2
    assert err.startswith("ddbtx: error: DDBTX_DYNALITE names ")
    assert err.endswith("(or run the demo on moto, the default: --emulator moto)\n")
    assert err.count("\n") == 1 and status == 2
    assert "Traceback" not in out  # the demo's banner only


def test_given_a_region_that_does_not_exist_then_the_message_blames_the_region() -> None:
    # Given the error botocore raises when a region's endpoint does not resolve
    url = "https://dynamodb.xx-nowhere-1.amazonaws.com"
    # When the CLI explains it, no --endpoint-url having been given
    error = EndpointConnectionError(endpoint_url=url)
    message = explain(error, endpoint=None, region="xx-nowhere-1")
    # Then it names the region and its option, not --endpoint-url
    assert message == (
        f"cannot reach DynamoDB in region 'xx-nowhere-1' at {url}: check the region name"
        " (--region / AWS_REGION) and your network"
    )


def test_given_the_cli_when_asked_its_version_then_it_prints_it_and_exits_0(
    bare_ddbtx: Callable[..., tuple[int, str, str]],
) -> None:
    # When the version is asked for, before any command
    status, out, err = bare_ddbtx("--version")
    # Then it prints the package's version
    assert (status, out, err) == (0, f"ddbtx {__version__}\n", "")


def test_given_stuck_decided_done_and_live_transactions_when_pending_is_listed_then_the_plan_shows(
    ddbtx: Callable[..., tuple[int, str]],
    endpoint_env: Any,
    old_tm: TransactionManager,
    young_tm: TransactionManager,
    janitor_tables: JanitorTables,
    seed: Callable[..., None],
    ddb: Any,
) -> None:
    # Given a transfer abandoned pending long ago, one decided committed long ago but never
    # completed, one completed, and one still live
    t = janitor_tables
    seed(a=100, b=100, c=100, d=100, e=100, f=100, g=100, h=100)
    stuck = abandon(old_tm, t.data, "pending", ("a", "b"))
    decided = abandon(old_tm, t.data, "committed", ("c", "d"))
    abandon(old_tm, t.data, "completed", ("e", "f"))
    live = abandon(young_tm, t.data, "pending", ("g", "h"))
    before = scan(ddb, t.tx), scan(ddb, t.data)

    # When on-call lists what is not completed
    status, out = ddbtx("--json", "pending")

    # Then the three are listed, oldest first (the live one last), each with what a sweep
    # would do now, and the completed one is not
    listed = json.loads(out)
    assert status == 0
    assert {tx["transaction_id"] for tx in listed[:2]} == {stuck, decided}
    assert [tx["transaction_id"] for tx in listed[2:]] == [live]
    plans = {tx["transaction_id"]: (tx["state"], tx["locks_held"], tx["plan"]) for tx in listed}
    assert plans[stuck][:2] == ("pending", 2) and plans[stuck][2].startswith("roll back")
    assert plans[decided][:2] == ("committed", 2) and plans[decided][2].startswith("roll forward")
    assert plans[live][:2] == ("pending", 2) and plans[live][2].startswith("leave: active")
    # And listing changed nothing
    assert (scan(ddb, t.tx), scan(ddb, t.data)) == before

    # When it is shown as a table
    status, out = ddbtx("pending")
    # Then each id is there with its plan
    assert status == 0 and all(tx_id in out for tx_id in (stuck, decided, live))
    assert "roll back" in out and "roll forward" in out


def test_given_nothing_pending_when_listed_then_it_says_so(
    ddbtx: Callable[..., tuple[int, str]], endpoint_env: Any, janitor_tables: JanitorTables
) -> None:
    # Given fresh tables, When pending is listed, Then it says there is nothing
    assert ddbtx("--json", "pending") == (0, "[]\n")
    status, out = ddbtx("pending")
    assert status == 0 and "no transaction is pending" in out


def test_given_stuck_done_and_live_transactions_when_a_dry_run_sweeps_then_plans_change_nothing(
    ddbtx: Callable[..., tuple[int, str]],
    endpoint_env: Any,
    old_tm: TransactionManager,
    young_tm: TransactionManager,
    janitor_tables: JanitorTables,
    seed: Callable[..., None],
    ddb: Any,
) -> None:
    # Given a transfer abandoned pending long ago, one completed long ago, and one live
    t = janitor_tables
    seed(a=100, b=100, c=100, d=100, e=100, f=100)
    stuck = abandon(old_tm, t.data, "pending", ("a", "b"))
    abandon(old_tm, t.data, "completed", ("c", "d"))
    live = abandon(young_tm, t.data, "pending", ("e", "f"))
    before = scan(ddb, t.tx), scan(ddb, t.data)

    # When on-call asks for a dry run
    status, out = ddbtx("--json", "sweep", "--dry-run")

    # Then it plans the stuck one's rollback, leaves the live one, counts the completed
    # record a sweep would delete, says what it did not read, and changes nothing
    plan = json.loads(out)
    assert status == 0
    plans = {tx["transaction_id"]: tx["plan"] for tx in plan["transactions"]}
    assert plans.keys() == {stuck, live}
    assert plans[stuck].startswith("roll back") and plans[live].startswith("leave")
    acts = {tx["transaction_id"]: tx["acts"] for tx in plan["transactions"]}
    assert acts == {stuck: True, live: False}
    assert plan["records_to_delete"] == 1
    assert [gap.split(":")[0] for gap in plan["not_looked_at"]] == [
        "orphan images, stray item locks and expired lock rows"
    ]
    assert (scan(ddb, t.tx), scan(ddb, t.data)) == before

    # When it is asked to be strict, as a table
    status, out = ddbtx("sweep", "--dry-run", "--strict")
    # Then the stuck one makes it exit 1, and the table says nothing is changed
    assert status == 1 and "dry run: nothing is changed" in out and stuck in out


@pytest.mark.parametrize("option", [("--full",), ("--page-budget", "3")], ids=["full", "budget"])
def test_given_a_dry_run_with_a_scan_option_then_one_line_and_nothing_read(
    ddbtx_streams: Callable[..., tuple[int, str, str]],
    endpoint_env: Any,
    janitor_tables: JanitorTables,
    option: tuple[str, ...],
) -> None:
    # When a dry run is asked with an option only a real sweep's scan takes
    status, out, err = ddbtx_streams("sweep", "--dry-run", *option)
    # Then one line says to leave it out, exit status 2
    assert (status, out) == (2, "")
    assert err.strip().splitlines() == [
        "ddbtx: error: --dry-run reads the sweep index and the records, not the tables: "
        "leave out --full and --page-budget"
    ]


def test_given_a_sweeper_without_data_or_lock_tables_when_it_sweeps_then_it_says_what_it_missed(
    ddbtx_streams: Callable[..., tuple[int, str, str]],
    endpoint_env: Any,
    janitor_tables: JanitorTables,
) -> None:
    # Given fresh tables, and a sweep that is not told the data tables or the locks table
    without = ("--data-tables", "--locks-table")

    # When on-call sweeps, then sweeps strictly
    status, out, _ = ddbtx_streams("--json", "sweep", without=without)
    strict_status, table, _ = ddbtx_streams("sweep", "--strict", without=without)

    # Then the report names both parts it did not cover; only the strict sweep fails on it
    gaps = json.loads(out)["not_covered"]
    assert status == 0 and [gap.split(":")[0] for gap in gaps] == [
        "no data tables given",
        "no locks table given",
    ]
    assert strict_status == 1
    assert "covered everything" in table and "no data tables given" in table

    # When it is given both
    status, out, _ = ddbtx_streams("--json", "sweep", "--strict")
    # Then it covered everything and the strict sweep succeeds
    assert (status, json.loads(out)["not_covered"]) == (0, [])


def test_given_a_page_budget_spent_when_swept_strictly_then_the_stop_is_reported_and_it_fails(
    ddbtx: Callable[..., tuple[int, str]],
    endpoint_env: Any,
    janitor_tables: JanitorTables,
) -> None:
    # Given fresh tables (the scan pass still reads a page of each table)
    # When on-call sweeps strictly with a budget of one page
    status, out = ddbtx("--json", "sweep", "--strict", "--page-budget", "1")
    # Then the report says where it stopped, and the strict sweep fails
    report = json.loads(out)
    assert report["exhausted"] is False and status == 1
    assert report["not_covered"] == [
        "stopped by its page budget before the end: the next run continues from the cursor"
    ]


def test_given_global_options_after_the_subcommand_when_run_then_as_if_given_before(
    ddbtx_streams: Callable[..., tuple[int, str, str]],
    endpoint_env: Any,
    young_tm: TransactionManager,
    janitor_tables: JanitorTables,
    seed: Callable[..., None],
    backend: LocalDynamo,
) -> None:
    # Given a pending transfer
    t = janitor_tables
    seed(a=100, b=100)
    tx_id = abandon(young_tm, t.data, "pending", ("a", "b"))
    before = ddbtx_streams("--json", "inspect", tx_id)

    # When on-call gives every global option after the subcommand (one as --name=value)
    after = ddbtx_streams(
        "inspect", tx_id, "--json", f"--endpoint-url={backend.endpoint_url}",
        "--region", "us-east-1", "--transactions-table", t.tx, "--images-table", t.images,
        without=("--endpoint-url", "--region", "--transactions-table", "--images-table"),
    )  # fmt: skip

    # Then the command runs as with them before it: the same answer, no usage box
    assert after[0] == 0 and after[2] == ""
    assert json.loads(after[1])["transaction_id"] == json.loads(before[1])["transaction_id"]
    assert json.loads(after[1])["state"] == "pending"


def test_hoisting_moves_only_global_options_and_nothing_after_a_double_dash() -> None:
    # Given command lines with global options around and after a subcommand
    # When hoisted, Then each global option (with its value) moves before the subcommand,
    # the subcommand's own options and arguments keep their order, and '--' stops it
    assert hoist_globals(["--json", "locks", "break", "R", "--kind", "lease", "-v"]) == [
        "--json", "-v", "locks", "break", "R", "--kind", "lease",
    ]  # fmt: skip
    assert hoist_globals(["recover", "--", "--json"]) == ["recover", "--", "--json"]
    assert hoist_globals(["--region", "r", "sweep", "--strict"]) == [
        "--region", "r", "sweep", "--strict",
    ]  # fmt: skip
    assert hoist_globals(["sweep", "--region"]) == ["sweep", "--region"]  # its value missing


def test_given_an_endpoint_nothing_listens_on_when_a_command_runs_then_each_retry_is_said(
    bare_ddbtx: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given credentials, and an endpoint with nothing listening (refused at once)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    url = f"http://127.0.0.1:{free_port()}"
    # When on-call inspects a transaction there
    status, out, err = bare_ddbtx("--endpoint-url", url, "inspect", "tx-1")
    # Then each retry (botocore makes 6 attempts) is announced on stderr, then one line
    # names the URL to check
    lines = err.splitlines()
    assert status == 2 and out == ""
    assert lines[:-1] == [
        f"ddbtx: cannot connect to {url} yet (attempt {n} of 6); retrying" for n in range(1, 6)
    ]
    assert lines[-1] == (
        f"ddbtx: error: cannot reach DynamoDB at {url}: "
        "check --endpoint-url / AWS_ENDPOINT_URL_DYNAMODB"
    )


def test_the_cli_bounds_each_connection_attempt_to_a_few_seconds() -> None:
    # Given the CLI's client (nothing is sent)
    from ddbtx.cli import Options

    client = Options(endpoint_url="http://127.0.0.1:9", region="us-east-1").client()
    # Then a connection attempt gives up after 3 s (botocore's default: 60)
    assert client.meta.config.connect_timeout == 3.0


def test_given_held_locks_when_listed_as_tables_then_each_is_titled_with_its_time_column(
    ddbtx: Callable[..., tuple[int, str]],
    endpoint_env: Any,
    old_tm: TransactionManager,
    janitor_tables: JanitorTables,
    seed: Callable[..., None],
    ddb: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a transfer abandoned pending long ago, and a held lease with a 60 s lease
    t = janitor_tables
    seed(a=100, b=100)
    tx_id = abandon(old_tm, t.data, "pending", ("a", "b"))
    lease = LeaseLockClient(ddb, t.locks, owner="worker-3", lease_duration=60.0)
    held = lease.acquire("report", wait=0)
    lease._heartbeats.close()  # its holder's heartbeats are not what is shown here
    monkeypatch.setenv("COLUMNS", "200")

    # When on-call lists the locks as tables
    status, out = ddbtx("locks")

    # Then each table has a title naming its table, the lease shows when it expires and
    # each item lock how long its transaction has been idle
    assert status == 0 and held is not None
    assert f"lock rows in {t.locks}" in out and f"items locked by transactions in {t.data}" in out
    lease_line = next(line for line in out.splitlines() if "worker-3" in line)
    seconds, unit = lease_line.rstrip(" │|").split()[-2:]
    assert unit == "s" and 0 < int(seconds) <= 60  # counted down from the 60 s lease
    item_lines = [line for line in out.splitlines() if tx_id[:12] in line]
    assert len(item_lines) == 2 and all(line.rstrip(" │|").endswith(" s") for line in item_lines)


# --- ddbtx invoke -----------------------------------------------------------------------------


def test_given_a_stuck_transfer_when_the_janitors_are_invoked_locally_then_they_answer_as_lambda(
    ddbtx_streams: Callable[..., tuple[int, str, str]],
    endpoint_env: Any,
    old_tm: TransactionManager,
    janitor_tables: JanitorTables,
    seed: Callable[..., None],
    ddb: Any,
    ddbtx_logger: Any,
) -> None:
    # Given a transfer abandoned pending long ago
    t = janitor_tables
    seed(a=100, b=100)
    tx_id = abandon(old_tm, t.data, "pending", ("a", "b"))
    functions = ("--functions-dir", str(FUNCTIONS))

    # When on-call runs the recovery function here: inspect, then recover
    inspect_status, inspected, _ = ddbtx_streams(
        "invoke", "recovery", json.dumps({"action": "inspect", "transaction_id": tx_id}), *functions
    )
    recover_status, recovered, _ = ddbtx_streams(
        "invoke", "recovery", json.dumps({"action": "recover", "transaction_id": tx_id}), *functions
    )
    # Then stdout holds the function's answer alone, as Lambda would return it
    seen = json.loads(inspected)
    assert (inspect_status, seen["ok"], seen["result"]["state"]) == (0, True, "pending")
    outcome = json.loads(recovered)["result"]["outcome"]
    assert (recover_status, outcome) == (0, "rolled_back")
    assert_clean(ddb, t)

    # When the sweeper runs here with its scheduled event
    status, out, _ = ddbtx_streams("invoke", "sweeper", *functions)
    # Then its report says it covered everything, with no error
    report = json.loads(out)
    assert (status, report["errors"], report["not_covered"]) == (0, 0, [])


def test_given_mistakes_when_a_janitor_is_invoked_locally_then_one_line_or_the_functions_error(
    ddbtx_streams: Callable[..., tuple[int, str, str]],
    endpoint_env: Any,
    janitor_tables: JanitorTables,
    ddbtx_logger: Any,
) -> None:
    functions = ("--functions-dir", str(FUNCTIONS))
    # When the recovery function is invoked without an event, with one that is not JSON,
    # or a janitor that does not exist
    no_event = ddbtx_streams("invoke", "recovery", *functions)
    not_json = ddbtx_streams("invoke", "recovery", "{action", *functions)
    no_such = ddbtx_streams("invoke", "cleaner", "{}", *functions)
    # Then each is one line on stderr, exit status 2
    for status, out, err in (no_event, not_json, no_such):
        assert (status, out) == (2, "") and len(err.strip().splitlines()) == 1
    assert "needs an event" in no_event[2] and "not JSON" in not_json[2]
    assert "invoke one of sweeper, recovery" in no_such[2]

    # When it is asked about an id no record answers to
    status, out, _ = ddbtx_streams(
        "invoke", "recovery", '{"action": "recover", "transaction_id": "nope"}', *functions
    )
    # Then the function's not-found answer is printed, exit status 1
    assert status == 1 and json.loads(out)["error"] == "TransactionNotFound"
