"""The janitor functions: runtime settings, environment, schedule, failure handling, IAM."""

from __future__ import annotations

import pytest
from cdk_support import Synth, SynthFactory, render
from infra.janitors import JanitorFunction

from ddbtx import schema

#: The session-cached synth fixtures (a plugin rather than a conftest; see there).
pytest_plugins = ("cdk_fixtures",)

KEY_ARN = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
TX_ACTIONS = {
    "GetItem",
    "Query",
    "Scan",
    "UpdateItem",
    "DeleteItem",
    "BatchWriteItem",
    "ConditionCheckItem",
}
IMAGE_ACTIONS = {"GetItem", "Query", "Scan", "DeleteItem"}
LOCK_ACTIONS = {"GetItem", "Query", "Scan", "DeleteItem", "UpdateItem"}  # frees a dead mutex
DATA_ACTIONS = {"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Scan", "DescribeTable"}
KMS_ACTIONS = {"kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey"}
XRAY = {("xray:PutTraceSegments", "*"), ("xray:PutTelemetryRecords", "*")}


def janitor(s: Synth, name: str) -> JanitorFunction:
    return {"sweeper": s.stack.janitors.sweeper, "recovery": s.stack.janitors.recovery}[name]


def dynamodb(actions: set[str], resource: str) -> set[tuple[str, str]]:
    return {(f"dynamodb:{action}", resource) for action in actions}


def expected_permissions(
    s: Synth, j: JanitorFunction, data_arns: list[str]
) -> set[tuple[str, str]]:
    """The contract: exactly these actions on exactly these resources, and nothing else."""
    t = s.stack.tables
    tx = f"{s.logical_id(t.transactions)}.Arn"
    pairs = (
        dynamodb(TX_ACTIONS, tx)
        | dynamodb({"Query"}, f"{tx}/index/{schema.SWEEP_INDEX}")
        | dynamodb(IMAGE_ACTIONS, f"{s.logical_id(t.images)}.Arn")
        | dynamodb(LOCK_ACTIONS, f"{s.logical_id(t.locks)}.Arn")
        | {pair for arn in data_arns for pair in dynamodb(DATA_ACTIONS, arn)}
        | {pair for arn in data_arns for pair in dynamodb({"Scan"}, lock_index(arn))}
        | {
            (a, f"{s.logical_id(j.log_group)}.Arn")
            for a in ("logs:CreateLogStream", "logs:PutLogEvents")
        }
        # Its dead-letter queue, and that queue's key for the two actions SendMessage needs
        | {("sqs:SendMessage", f"{s.logical_id(j.failures)}.Arn")}
        | {
            (a, f"{s.logical_id(s.stack.janitors.queue_key)}.Arn")
            for a in ("kms:GenerateDataKey", "kms:Decrypt")
        }
        | XRAY
    )
    return pairs


def lock_index(table_arn: str) -> str:
    """The ARN of a data table's sparse lock index, the only index of it a janitor reads."""
    return f"{table_arn}/index/{schema.LOCK_INDEX}"


def role_of(s: Synth, j: JanitorFunction) -> str:
    return str(render(s.props(j.function)["Role"])).removesuffix(".Arn")


@pytest.mark.parametrize(
    ("name", "timeout", "memory", "service"),
    [("sweeper", 300, 512, "ddbtx-sweeper"), ("recovery", 60, 256, "ddbtx-recovery")],
)
def test_given_default_app_then_each_janitor_runs_python312_arm64_traced_with_json_logs(
    default: Synth, name: str, timeout: int, memory: int, service: str
) -> None:
    # Given the default synth; When we read the function
    j = janitor(default, name)
    props = default.props(j.function)
    # Then
    assert props["Runtime"] == "python3.12"
    assert props["Architectures"] == ["arm64"]
    assert props["Handler"] == "handler.handler"
    assert (props["Timeout"], props["MemorySize"]) == (timeout, memory)
    assert props["TracingConfig"] == {"Mode": "Active"}
    assert render(props["LoggingConfig"]) == {
        "LogFormat": "JSON",
        "ApplicationLogLevel": "INFO",
        "SystemLogLevel": "WARN",
        "LogGroup": default.logical_id(j.log_group),
    }
    assert default.props(j.log_group)["RetentionInDays"] == 30
    assert props["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"] == service
    # And it runs with both layers: the core from shared/ and Powertools
    layers = render(props["Layers"])
    assert default.logical_id(default.stack.layers.core) in layers
    assert len(layers) == 2


@pytest.mark.parametrize("name", ["sweeper", "recovery"])
def test_given_default_app_then_environment_names_every_table_and_threshold(
    default: Synth, name: str
) -> None:
    t = default.stack.tables
    env = render(default.props(janitor(default, name).function)["Environment"]["Variables"])
    assert env == {
        "TRANSACTIONS_TABLE": default.logical_id(t.transactions),
        "IMAGES_TABLE": default.logical_id(t.images),
        "LOCKS_TABLE": default.logical_id(t.locks),
        "DATA_TABLES": default.logical_id(t.data_tables[0]),
        "ROLLBACK_AFTER_SECONDS": "60",
        "DELETE_AFTER_SECONDS": "86400",
        "SWEEP_PAGE_BUDGET": "50",
        "SWEEP_PAGE_SIZE": "100",
        "SWEEP_SAFETY_MARGIN_SECONDS": "20",
        "POWERTOOLS_SERVICE_NAME": f"ddbtx-{name}",
        "POWERTOOLS_METRICS_NAMESPACE": "ddbtx",
        "LOG_LEVEL": "INFO",
    }


def test_given_context_thresholds_then_both_janitors_get_them(synth: SynthFactory) -> None:
    s = synth(
        rollbackAfterSeconds="120",
        deleteAfterSeconds=3600,
        sweepPageBudget="7",
        sweepPageSize=250,
        sweepSafetyMarginSeconds="45",
        logLevel="debug",
    )
    for name in ("sweeper", "recovery"):
        props = s.props(janitor(s, name).function)
        env = props["Environment"]["Variables"]
        assert (env["ROLLBACK_AFTER_SECONDS"], env["DELETE_AFTER_SECONDS"]) == ("120", "3600")
        assert (env["SWEEP_PAGE_BUDGET"], env["LOG_LEVEL"]) == ("7", "DEBUG")
        assert (env["SWEEP_PAGE_SIZE"], env["SWEEP_SAFETY_MARGIN_SECONDS"]) == ("250", "45")
        assert props["LoggingConfig"]["ApplicationLogLevel"] == "DEBUG"


def test_given_default_app_then_the_sweeper_runs_alone_and_recovery_is_capped(
    default: Synth,
) -> None:
    # One sweeper at a time; a few recoveries at once, capped (checkov CKV_AWS_115)
    assert default.props(janitor(default, "sweeper").function)["ReservedConcurrentExecutions"] == 1
    assert default.props(janitor(default, "recovery").function)["ReservedConcurrentExecutions"] == 5


def test_given_reservation_turned_off_then_the_sweeper_has_no_reserved_concurrency(
    synth: SynthFactory,
) -> None:
    s = synth(reserveSweeperConcurrency="false")
    assert "ReservedConcurrentExecutions" not in s.props(janitor(s, "sweeper").function)
    assert "ReservedConcurrentExecutions" not in s.props(janitor(s, "recovery").function)


@pytest.mark.parametrize(
    ("context", "expression"),
    [({}, "rate(5 minutes)"), ({"sweepRateMinutes": "1"}, "rate(1 minute)")],
)
def test_given_a_sweep_rate_then_the_schedule_invokes_the_sweeper_at_that_rate(
    synth: SynthFactory, context: dict[str, str], expression: str
) -> None:
    # Given
    s = synth(**context)
    sweeper = janitor(s, "sweeper")
    # When
    rule = s.props(s.stack.janitors.schedule)
    # Then
    assert rule["ScheduleExpression"] == expression
    assert rule["State"] == "ENABLED"
    (target,) = render(rule["Targets"])
    assert target["Arn"] == f"{s.logical_id(sweeper.function)}.Arn"
    assert target["DeadLetterConfig"] == {"Arn": f"{s.logical_id(sweeper.failures)}.Arn"}
    assert target["RetryPolicy"]["MaximumRetryAttempts"] == 2
    # And EventBridge may invoke the sweeper (and only from this rule)
    (permission,) = [
        p["Properties"]
        for p in s.of_type("AWS::Lambda::Permission").values()
        if render(p["Properties"]["FunctionName"]) == f"{s.logical_id(sweeper.function)}.Arn"
    ]
    assert permission["Principal"] == "events.amazonaws.com"
    assert render(permission["SourceArn"]) == f"{s.logical_id(s.stack.janitors.schedule)}.Arn"


@pytest.mark.parametrize("name", ["sweeper", "recovery"])
def test_given_default_app_then_failed_async_invokes_go_to_an_encrypted_tls_only_queue(
    default: Synth, name: str
) -> None:
    j = janitor(default, name)
    fn_id, queue_id = default.logical_id(j.function), default.logical_id(j.failures)
    (config,) = [
        r["Properties"]
        for r in default.of_type("AWS::Lambda::EventInvokeConfig").values()
        if render(r["Properties"]["FunctionName"]) == fn_id
    ]
    # The function's own DLQ takes them (checkov CKV_AWS_116), not a destination as well
    assert render(default.props(j.function)["DeadLetterConfig"]) == {"TargetArn": f"{queue_id}.Arn"}
    assert "DestinationConfig" not in config
    assert config["MaximumRetryAttempts"] == 0
    # A sweep tick expires when the next one is due; a manual request waits up to 6 hours
    assert config["MaximumEventAgeInSeconds"] == {"sweeper": 300, "recovery": 6 * 3600}[name]
    # Encrypted with the janitors' own key (checkov CKV_AWS_27), which EventBridge may use
    key_id = default.logical_id(default.stack.janitors.queue_key)
    assert render(default.props(j.failures)["KmsMasterKeyId"]) == f"{key_id}.Arn"
    key_policy = default.resources[key_id]["Properties"]["KeyPolicy"]["Statement"]
    assert [
        st["Action"] for st in key_policy if st["Principal"] == {"Service": "events.amazonaws.com"}
    ] == [["kms:Decrypt", "kms:GenerateDataKey"]]
    (policy,) = [
        r["Properties"]["PolicyDocument"]
        for r in default.of_type("AWS::SQS::QueuePolicy").values()
        if render(r["Properties"]["Queues"]) == [queue_id]
    ]
    denies = [st for st in policy["Statement"] if st["Effect"] == "Deny"]
    assert [st["Condition"] for st in denies] == [{"Bool": {"aws:SecureTransport": "false"}}]


@pytest.mark.parametrize("name", ["sweeper", "recovery"])
def test_given_default_app_then_each_role_allows_exactly_the_contracted_actions(
    default: Synth, name: str
) -> None:
    # Given
    j = janitor(default, name)
    # When
    granted = default.permissions(role_of(default, j))
    # Then
    data_arn = f"{default.logical_id(default.stack.tables.data_tables[0])}.Arn"
    assert granted == expected_permissions(default, j, [data_arn])
    assert not [action for action, _ in granted if "*" in action]
    assert {pair for pair in granted if pair[1] == "*"} == XRAY


@pytest.mark.parametrize("name", ["sweeper", "recovery"])
def test_given_default_app_then_roles_carry_no_managed_policies(default: Synth, name: str) -> None:
    role = default.resources[role_of(default, janitor(default, name))]["Properties"]
    assert "ManagedPolicyArns" not in role
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "lambda.amazonaws.com"
    }


def test_given_imported_data_tables_then_roles_reach_exactly_those_tables(
    synth: SynthFactory,
) -> None:
    s = synth(dataTables="orders,customers")
    arns = [
        f"arn:AWS::Partition:dynamodb:AWS::Region:AWS::AccountId:table/{name}"
        for name in ("orders", "customers")
    ]
    for name in ("sweeper", "recovery"):
        j = janitor(s, name)
        assert s.permissions(role_of(s, j)) == expected_permissions(s, j, arns)


@pytest.mark.parametrize(
    ("context", "key"),
    [({"customerManagedKey": "true"}, None), ({"encryptionKeyArn": KEY_ARN}, KEY_ARN)],
)
def test_given_a_customer_managed_key_then_roles_may_use_it_with_explicit_actions(
    synth: SynthFactory, context: dict[str, str], key: str | None
) -> None:
    s = synth(**context)
    key_arn = key or f"{s.logical_id(s.stack.tables.key)}.Arn"  # type: ignore[arg-type]
    data_arn = f"{s.logical_id(s.stack.tables.data_tables[0])}.Arn"
    for name in ("sweeper", "recovery"):
        j = janitor(s, name)
        granted = s.permissions(role_of(s, j))
        kms = {(action, key_arn) for action in KMS_ACTIONS}
        assert granted == expected_permissions(s, j, [data_arn]) | kms


@pytest.mark.parametrize("name", ["sweeper", "recovery"])
def test_given_default_app_then_each_code_asset_is_the_handler_directory_only(
    default: Synth, name: str
) -> None:
    props = default.props(janitor(default, name).function)
    staged = default.asset_dir(props["Code"]["S3Key"])
    files = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file())
    assert "handler.py" in files
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc") or "ddbtx/" in f]


def test_given_default_app_then_only_the_recovery_role_may_break_locks(default: Synth) -> None:
    # Given both janitors' roles and the locks table
    locks = f"{default.logical_id(default.stack.tables.locks)}.Arn"
    sweeper, recovery = (role_of(default, janitor(default, n)) for n in ("sweeper", "recovery"))
    # When we read who may UpdateItem the locks table, and under which condition
    sweeping = default.conditions(sweeper, "dynamodb:UpdateItem", locks)
    breaking = default.conditions(recovery, "dynamodb:UpdateItem", locks)
    # Then the sweeper may name only the attributes of freeing an expired mutex (a break
    # always writes "brk"; lease and FIFO holders are other attributes); recovery any
    assert sweeping == [
        {
            "ForAllValues:StringEquals": {
                "dynamodb:Attributes": ["pk", "sk", "owner", "rvn", "at", "exp", "fence"]
            }
        }
    ]
    assert breaking == [None]
