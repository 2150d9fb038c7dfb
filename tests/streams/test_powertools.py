"""The adapter under Powertools' batch processor (partial batch failure) and the ready Lambda
handler the CDK option deploys, fed the stream of a real workload (moto)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)

from ddbtx import TransactionManager, streams_lambda
from ddbtx.stream_reader import StreamReader
from ddbtx.streams import Change, committed_changes, record_handler
from helpers import Tables

from . import consumer_example
from .support import Ledger
from .workload import Workload, run_everything


@pytest.fixture
def records(
    ddb: Any,
    tables: Tables,
    make_tm: Callable[..., TransactionManager],
    ledger: Ledger,
    reader: StreamReader,
) -> list[dict[str, Any]]:
    """The stream of every kind of transaction, as Lambda delivers it."""
    run_everything(Workload(ddb, tables.data, make_tm, ledger.snapshot))
    return reader.read()


def process(records: list[dict[str, Any]], on_change: Callable[[Change], None]) -> Any:
    """One invocation of a user's handler written as docs/streams.md shows."""
    processor = BatchProcessor(event_type=EventType.DynamoDBStreams)
    return process_partial_response(
        event={"Records": records},
        record_handler=record_handler(on_change),
        processor=processor,
        context=None,
    )


def test_given_a_stream_batch_when_processed_then_the_function_gets_the_committed_changes(
    records: list[dict[str, Any]],
) -> None:
    # Given a batch holding the protocol's records and the committed changes
    seen: list[Change] = []
    # When Powertools' batch processor runs the adapter's record handler
    response = process(records, seen.append)
    # Then the user's function got exactly the committed changes, in order, and no failure
    assert seen == committed_changes(records)
    assert response == {"batchItemFailures": []}


def test_given_a_function_failing_on_one_change_when_retried_then_every_change_once(
    records: list[dict[str, Any]],
) -> None:
    # Given an idempotent function (keyed by sequence number) that fails once on a change
    expected = committed_changes(records)
    failing = expected[len(expected) // 2].sequence_number
    done: dict[str, Change] = {}
    failed_once: list[str] = []

    def on_change(change: Change) -> None:
        if change.sequence_number == failing and not failed_once:
            failed_once.append(failing)
            raise RuntimeError("index unavailable")
        done[change.sequence_number] = change

    # When the batch is processed
    response = process(records, on_change)
    # Then only that record is reported failed
    assert response == {"batchItemFailures": [{"itemIdentifier": failing}]}
    # And when Lambda delivers the stream again from the failed record on (its checkpoint)
    numbers = [r["dynamodb"]["SequenceNumber"] for r in records]
    retry = process(records[numbers.index(failing) :], on_change)
    # Then nothing fails and every committed change was handled, none twice in the result
    assert retry == {"batchItemFailures": []}
    assert sorted(done.values(), key=lambda c: int(c.sequence_number)) == expected


def test_given_the_deployed_handler_when_invoked_then_the_named_function_gets_the_changes(
    records: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the handler the CDK option deploys, naming the user's function
    monkeypatch.setenv(streams_lambda.ON_CHANGE_ENV, "streams.consumer_example:on_change")
    consumer_example.SEEN.clear()
    # When Lambda invokes it with a batch
    response = streams_lambda.handler({"Records": records}, None)
    # Then the function got exactly the committed changes
    assert committed_changes(records) == consumer_example.SEEN
    assert response == {"batchItemFailures": []}


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("", "expected 'module:function'"),
        ("consumer.on_change", "expected 'module:function'"),
        ("no_such_module_here:on_change", "cannot import 'no_such_module_here'"),
        ("streams.consumer_example:absent", "has no function 'absent'"),
        ("streams.consumer_example:SEEN", "has no function 'SEEN'"),
    ],
)
def test_given_a_bad_function_name_when_loaded_then_the_error_names_it(
    spec: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem) as caught:
        streams_lambda.load_on_change(spec)
    assert streams_lambda.ON_CHANGE_ENV in str(caught.value)
