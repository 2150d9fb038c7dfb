"""Alarms watch the janitors and notify one encrypted topic; a dashboard shows the sweeps."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from cdk_support import Synth, SynthFactory, render

#: The session-cached synth fixtures (a plugin rather than a conftest; see there).
pytest_plugins = ("cdk_fixtures",)

SWEEPER_HANDLER = Path(__file__).resolve().parents[2] / "functions" / "sweeper" / "handler.py"


def published_metrics() -> list[str]:
    """The metric names the sweeper handler publishes, read from its source.

    Importing the handler would read its environment at import (its cold start).
    """
    source = SWEEPER_HANDLER.read_text()
    for attempt in range(3):
        try:
            tree = ast.parse(source)
            break
        except SystemError:
            # CPython 3.11.7's AST builder keeps its recursion depth in shared state, and
            # another thread's AST work can trip "AST constructor recursion depth
            # mismatch" (seen once under pytest-xdist); parsing again succeeds.
            if attempt == 2:
                raise
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "METRIC_NAMES":
            names: dict[str, str] = ast.literal_eval(node.value)  # type: ignore[arg-type]
            return list(names.values())
    raise AssertionError("METRIC_NAMES not found in the sweeper handler")


def alarms(s: Synth) -> dict[str, dict[str, Any]]:
    return {
        str(a.node.id): s.props(a)  # construct id -> CloudFormation properties
        for a in s.stack.monitoring.alarms
    }


def test_given_default_app_then_stuck_transactions_alarm_after_two_sweeps_above_zero(
    default: Synth,
) -> None:
    # Given the default synth; When we read the StuckTransactions alarm
    props = alarms(default)["StuckTransactions"]
    # Then it watches the sweeper's EMF metric over two consecutive sweep periods
    assert (props["Namespace"], props["MetricName"]) == ("ddbtx", "StuckTransactions")
    assert props["Dimensions"] == [{"Name": "service", "Value": "ddbtx-sweeper"}]
    assert (props["Statistic"], props["Period"]) == ("Maximum", 300)
    assert (props["ComparisonOperator"], props["Threshold"]) == ("GreaterThanThreshold", 0)
    assert (props["EvaluationPeriods"], props["DatapointsToAlarm"]) == (2, 2)


def test_given_a_slower_sweep_rate_then_the_stuck_alarm_period_follows_it(
    synth: SynthFactory,
) -> None:
    s = synth(sweepRateMinutes=15)
    assert alarms(s)["StuckTransactions"]["Period"] == 900


def test_given_default_app_then_errors_throttles_and_failure_queues_are_alarmed(
    default: Synth,
) -> None:
    found = alarms(default)
    for j in default.stack.janitors.all:
        name = j.node.id
        fn = default.logical_id(j.function)
        for metric in ("Errors", "Throttles"):
            props = found[f"{name}{metric}"]
            assert (props["Namespace"], props["MetricName"]) == ("AWS/Lambda", metric)
            assert render(props["Dimensions"]) == [{"Name": "FunctionName", "Value": fn}]
            assert (props["Threshold"], props["ComparisonOperator"]) == (0, "GreaterThanThreshold")
        depth = found[f"{name}FailedEvents"]
        assert (depth["Namespace"], depth["MetricName"]) == (
            "AWS/SQS",
            "ApproximateNumberOfMessagesVisible",
        )
        assert render(depth["Dimensions"]) == [
            {"Name": "QueueName", "Value": f"{default.logical_id(j.failures)}.QueueName"}
        ]
    sweep_errors = found["SweepErrors"]
    assert (sweep_errors["Namespace"], sweep_errors["MetricName"]) == ("ddbtx", "Errors")


def test_given_default_app_then_every_alarm_notifies_the_topic_on_alarm_and_ok(
    default: Synth,
) -> None:
    topic = default.logical_id(default.stack.monitoring.topic)
    every = default.of_type("AWS::CloudWatch::Alarm")
    assert len(every) == 8
    for lid, alarm in every.items():
        props = render(alarm["Properties"])
        assert (props["AlarmActions"], props["OKActions"]) == ([topic], [topic]), lid
        assert props["AlarmDescription"], lid


def test_given_default_app_then_the_topic_is_kms_encrypted_tls_only_and_cloudwatch_may_use_the_key(
    default: Synth,
) -> None:
    monitoring = default.stack.monitoring
    key_id = default.logical_id(monitoring.topic_key)
    topic = render(default.props(monitoring.topic))
    assert topic["KmsMasterKeyId"] == f"{key_id}.Arn"
    key = default.props(monitoring.topic_key)
    assert key["EnableKeyRotation"] is True
    (cloudwatch,) = [
        st
        for st in key["KeyPolicy"]["Statement"]
        if st.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert sorted(cloudwatch["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"]
    (policy,) = [
        r["Properties"]["PolicyDocument"]
        for r in default.of_type("AWS::SNS::TopicPolicy").values()
        if render(r["Properties"]["Topics"]) == [default.logical_id(monitoring.topic)]
    ]
    assert [st["Condition"] for st in policy["Statement"] if st["Effect"] == "Deny"] == [
        {"Bool": {"aws:SecureTransport": "false"}}
    ]


def test_given_no_alarm_email_then_nothing_subscribes_and_given_one_then_it_does(
    default: Synth, synth: SynthFactory
) -> None:
    assert default.of_type("AWS::SNS::Subscription") == {}
    s = synth(alarmEmail="ops@example.com")
    (sub,) = [r["Properties"] for r in s.of_type("AWS::SNS::Subscription").values()]
    assert (sub["Protocol"], sub["Endpoint"]) == ("email", "ops@example.com")


def test_given_default_app_then_the_dashboard_shows_sweep_metrics_and_alarms(
    default: Synth,
) -> None:
    props = render(default.props(default.stack.monitoring.dashboard))
    assert props["DashboardName"] == "ddbtx-janitors"
    body = props["DashboardBody"]
    # Every metric the sweeper handler publishes is on it
    published = published_metrics()
    assert {"LockRowsDeleted", "SkippedRequests"} <= set(published) and len(published) == 11
    for metric in published:
        assert f'"{metric}"' in body, metric
    assert '"alarms"' in body
