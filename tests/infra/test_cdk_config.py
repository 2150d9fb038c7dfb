"""Context values parse the same from ``-c key=value`` strings and from cdk.json JSON,
and unusable values fail before anything is built, naming the key."""

from __future__ import annotations

from typing import Any

import pytest
from cdk_support import ROOT  # noqa: F401  (puts the repo root on sys.path)
from infra.config import DeployConfig, KeyAttribute

#: The session-cached synth fixtures (a plugin rather than a conftest; see there).
pytest_plugins = ("cdk_fixtures",)

KEY_ARN = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def test_given_no_context_then_defaults_are_safe_for_production() -> None:
    cfg = DeployConfig.from_context({})
    assert cfg == DeployConfig()
    assert (cfg.retain, cfg.reserve_sweeper_concurrency, cfg.sweep_rate_minutes) == (True, True, 5)
    assert not cfg.uses_customer_managed_key and not cfg.imports_data_tables


@pytest.mark.parametrize(
    ("context", "field", "expected"),
    [
        ({"throwaway": "true"}, "retain", False),
        ({"throwaway": True}, "retain", False),
        ({"throwaway": "no"}, "retain", True),
        ({"sweepRateMinutes": "10"}, "sweep_rate_minutes", 10),
        ({"sweepRateMinutes": 10}, "sweep_rate_minutes", 10),
        ({"logLevel": "warn"}, "log_level", "WARN"),
        ({"dataPartitionKey": "tenant:N"}, "data_partition_key", KeyAttribute("tenant", "N")),
        ({"dataSortKey": "sk"}, "data_sort_key", KeyAttribute("sk", "S")),
        ({"dataTables": "a1x, b2y"}, "data_tables", ("a1x", "b2y")),
        ({"dataTables": ["a1x", "b2y"]}, "data_tables", ("a1x", "b2y")),
        ({"encryptionKeyArn": KEY_ARN}, "key_arn", KEY_ARN),
        ({"reserveSweeperConcurrency": "false"}, "reserve_sweeper_concurrency", False),
        ({"logRetentionDays": "90"}, "log_retention_days", 90),
        ({"stackName": "ddbtx-dev"}, "stack_name", "ddbtx-dev"),
        ({"sweepPageSize": "1000"}, "sweep_page_size", 1000),
        ({"sweepSafetyMarginSeconds": 50}, "sweep_safety_margin_seconds", 50),
    ],
)
def test_given_a_context_value_then_it_parses_from_string_or_json(
    context: dict[str, Any], field: str, expected: Any
) -> None:
    assert getattr(DeployConfig.from_context(context), field) == expected


@pytest.mark.parametrize(
    ("context", "named"),
    [
        ({"sweepRateMinutes": "0"}, "sweepRateMinutes"),
        ({"sweepRateMinutes": "often"}, "sweepRateMinutes"),
        ({"sweepRateMinutes": True}, "sweepRateMinutes"),
        ({"throwaway": "maybe"}, "throwaway"),
        ({"logLevel": "TRACE"}, "logLevel"),
        ({"logRetentionDays": "31"}, "logRetentionDays"),
        ({"dataTableName": "x"}, "dataTableName"),
        ({"dataPartitionKey": "pk:X"}, "dataPartitionKey"),
        ({"dataTables": "ok-name,ok-name"}, "dataTables"),
        ({"encryptionKeyArn": "alias/mine"}, "encryptionKeyArn"),
        ({"alarmEmail": "nobody"}, "alarmEmail"),
        ({"powertoolsLayerArn": "arn:aws:lambda:eu-west-1:1:layer:x"}, "powertoolsLayerArn"),
        ({"stackName": "1st"}, "stackName"),
        ({"rollbackAfterSeconds": "-5"}, "rollbackAfterSeconds"),
        ({"sweepPageSize": "1001"}, "sweepPageSize"),
        ({"sweepSafetyMarginSeconds": "60"}, "sweepSafetyMarginSeconds"),
    ],
)
def test_given_an_unusable_value_then_the_error_names_its_key(
    context: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValueError, match=f"context '{named}'"):
        DeployConfig.from_context(context)


@pytest.mark.parametrize(
    ("context", "names"),
    [
        ({"dataTables": "orders", "dataTableName": "mine"}, ("dataTables", "dataTableName")),
        ({"dataTables": "orders", "dataSortKey": "sk"}, ("dataTables", "dataSortKey")),
        ({"customerManagedKey": "true", "encryptionKeyArn": KEY_ARN}, ("customerManagedKey",)),
        ({"dataPartitionKey": "id", "dataSortKey": "id:N"}, ("dataSortKey",)),
    ],
)
def test_given_contradicting_keys_then_the_error_names_them(
    context: dict[str, Any], names: tuple[str, ...]
) -> None:
    with pytest.raises(ValueError) as raised:
        DeployConfig.from_context(context)
    for name in names:
        assert repr(name) in str(raised.value)
