"""The data table's stream and the change consumer wired to it through the adapter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cdk_support import ROOT, Synth, SynthFactory, render
from infra.config import DeployConfig
from infra.streams import CONSUMER_HANDLER

from ddbtx.streams import PROTOCOL_FILTER_PATTERNS
from ddbtx.streams_lambda import ON_CHANGE_ENV

#: The session-cached synth fixtures (a plugin rather than a conftest; see there).
pytest_plugins = ("cdk_fixtures",)

EXAMPLE = "examples/change_consumer"
CONSUMER = {"dataTableStream": True, "changeConsumerCode": EXAMPLE}
STREAM_READS = {
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
}


def data_table(s: Synth) -> dict[str, Any]:
    return s.props(s.stack.tables.data_tables[0])


def test_given_default_app_then_no_stream_and_no_consumer(default: Synth) -> None:
    assert "StreamSpecification" not in data_table(default)
    assert default.stack.consumer is None
    assert default.of_type("AWS::Lambda::EventSourceMapping") == {}


def test_given_the_stream_option_then_new_and_old_images_and_nothing_else(
    synth: SynthFactory,
) -> None:
    s = synth(dataTableStream=True)
    assert data_table(s)["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    assert s.stack.consumer is None


@pytest.fixture(scope="module")
def consumer(synth: SynthFactory) -> Synth:
    return synth(**CONSUMER)


def test_given_a_consumer_then_its_function_runs_the_adapter_on_the_users_code(
    consumer: Synth,
) -> None:
    # Given the stack with a change consumer; When we read its function
    c = consumer.stack.consumer
    assert c is not None
    props = consumer.props(c.function)
    # Then the handler is the adapter's, from the core layer, calling the user's function
    assert props["Handler"] == CONSUMER_HANDLER
    assert props["Environment"]["Variables"][ON_CHANGE_ENV] == "consumer:on_change"
    layers = {str(render(layer)) for layer in props["Layers"]}
    core = consumer.logical_id(consumer.stack.layers.core)
    assert core in layers and len(layers) == 2
    # And its code is the user's directory, nothing more
    staged = consumer.asset_dir(props["Code"]["S3Key"])
    assert sorted(p.name for p in staged.iterdir()) == ["consumer.py"]


def test_given_a_consumer_then_the_stream_mapping_filters_and_reports_failures(
    consumer: Synth,
) -> None:
    # Given the stack with a change consumer; When we read its event source mapping
    ((_, mapping),) = consumer.of_type("AWS::Lambda::EventSourceMapping").items()
    props = mapping["Properties"]
    c = consumer.stack.consumer
    assert c is not None
    # Then it reads the data table's stream from its start, into the consumer function
    assert (
        render(props["EventSourceArn"])
        == f"{consumer.logical_id(consumer.stack.tables.data_tables[0])}.StreamArn"
    )
    assert render(props["FunctionName"]) == consumer.logical_id(c.function)
    assert props["StartingPosition"] == "TRIM_HORIZON"
    # And it drops the protocol's own records with the adapter's filter patterns
    patterns = [json.loads(f["Pattern"]) for f in props["FilterCriteria"]["Filters"]]
    assert patterns == list(PROTOCOL_FILTER_PATTERNS)
    # And a failing change fails its record only; one that keeps failing goes to the queue
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["BisectBatchOnFunctionError"] is True
    destination = props["DestinationConfig"]["OnFailure"]["Destination"]
    assert render(destination) == f"{consumer.logical_id(c.failures)}.Arn"


def test_given_a_consumer_then_its_role_reads_the_stream_and_writes_its_logs_only(
    consumer: Synth,
) -> None:
    c = consumer.stack.consumer
    assert c is not None
    role = consumer.logical_id(c.function.role)  # type: ignore[arg-type]
    granted = consumer.permissions(role)
    stream = f"{consumer.logical_id(consumer.stack.tables.data_tables[0])}.StreamArn"
    assert {(a, stream) for a in STREAM_READS} <= granted
    # No data table action: the consumer sees changes through the stream alone
    assert not {a for a, _ in granted if a in {"dynamodb:PutItem", "dynamodb:GetItem"}}


@pytest.mark.parametrize(
    ("context", "named"),
    [
        ({"dataTableStream": "sometimes"}, "dataTableStream"),
        ({"dataTableStream": True, "changeConsumerCode": "no/such/dir"}, "changeConsumerCode"),
        (
            {**CONSUMER, "changeConsumerFunction": "consumer.on_change"},
            "changeConsumerFunction",
        ),
        ({**CONSUMER, "changeConsumerFunction": "absent:on_change"}, "changeConsumerFunction"),
        ({"changeConsumerCode": EXAMPLE}, "dataTableStream"),
        ({"changeConsumerFunction": "consumer:on_change"}, "dataTableStream"),
        ({"dataTableStream": True, "dataTables": "orders"}, "dataTableStream"),
    ],
)
def test_given_unusable_stream_options_then_the_error_names_the_key(
    context: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValueError, match=f"context '{named}'") as raised:
        DeployConfig.from_context(context)
    assert len(raised.value.problems) == 1  # type: ignore[attr-defined]


def test_given_a_relative_consumer_directory_then_it_is_found_from_the_project() -> None:
    cfg = DeployConfig.from_context({**CONSUMER, "changeConsumerFunction": "consumer:on_change"})
    assert cfg.change_consumer_code == Path(ROOT, EXAMPLE).resolve()
    assert (cfg.data_table_stream, cfg.change_consumer_function) == (True, "consumer:on_change")
