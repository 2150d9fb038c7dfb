"""The driver-free core's plumbing: steps yield requests, drivers carry them.

First :class:`ddbtx._base.effects.Run` alone (no emulator): what a step is sent, what is
thrown into it and where. Then the same steps through the sync driver (boto3) and the
asyncio driver (aiobotocore) on both emulators: each answers, fails and counts alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from ddbtx._base.drive import drive
from ddbtx._base.effects import Call, Reply, Run, Sleep, Step, gather, pause, request
from ddbtx.aio._drive import drive as aio_drive
from ddbtx.chaos import Chaos, Crash
from ddbtx.errors import ConditionFailed, DynamoDBError, TableNotFound
from ddbtx.instrumentation import count_requests
from ddbtx.local import LocalDynamo
from drivers import DRIVERS, EventLoopThread

# --- Run, with no emulator ------------------------------------------------------------


def client_error(code: str, operation: str = "UpdateItem") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "no"}}, operation)


def put_then_read(log: list[str]) -> Step[str]:
    """A step that writes, keeps going past a failed condition, pauses, then reads."""
    try:
        yield from request("put_item", TableName="T", Item={})
    except ConditionFailed as exc:
        log.append(f"refused: {exc.code}")
    yield from pause(0.5)
    read = yield from request("get_item", TableName="T", Key={})
    return str(read["Item"])


def test_given_a_step_when_run_by_hand_then_it_sees_answers_and_translated_failures() -> None:
    # Given
    log: list[str] = []
    run = Run(put_then_read(log))
    seen: list[Any] = []
    answers: Iterator[Callable[[], Any]] = iter(
        [
            lambda: (_ for _ in ()).throw(client_error("ConditionalCheckFailedException")),
            lambda: None,
            lambda: {"Item": "x", "ResponseMetadata": {"RetryAttempts": 0}},
        ]
    )
    # When
    for effect in run:
        seen.append(effect)
        with run.outcome() as out:
            out.value = next(answers)()
    # Then
    assert seen == [
        Call("put_item", {"TableName": "T", "Item": {}}),
        Sleep(0.5),
        Call("get_item", {"TableName": "T", "Key": {}}),
    ]
    assert log == ["refused: ConditionalCheckFailedException"]
    assert (run.done, run.result) == (True, "x")


def test_given_a_client_error_when_thrown_in_then_the_step_raises_it_translated_with_cause() -> (
    None
):
    # Given
    original = client_error("ResourceNotFoundException", "GetItem")
    run = Run(request("get_item", TableName="Missing", Key={}))
    # When
    with pytest.raises(TableNotFound) as raised, run.outcome():
        raise original
    # Then: the one translation, naming the table the request named
    assert raised.value.__cause__ is original
    assert "'Missing'" in str(raised.value)
    assert raised.value.operation == "GetItem"


def test_given_a_crash_when_thrown_in_then_it_reaches_the_caller_unchanged() -> None:
    # Given
    cleaned: list[bool] = []

    def step() -> Step[None]:
        try:
            yield from request("put_item", TableName="T", Item={})
        finally:
            cleaned.append(True)

    run = Run(step())
    crash = Crash("the coordinator died")
    # When
    with pytest.raises(Crash) as raised, run.outcome():
        raise crash
    # Then: the step saw it where a blocking call would have raised
    assert raised.value is crash
    assert cleaned == [True]


def test_given_a_resent_answer_then_the_step_is_told_and_the_metadata_is_gone() -> None:
    # Given
    resent: list[bool] = []
    run = Run(request("put_item", resent=resent, TableName="T", Item={}))
    # When
    with run.outcome() as out:
        out.value = {"Attributes": {}, "ResponseMetadata": {"RetryAttempts": 2}}
    # Then
    assert (resent, run.result) == ([True], {"Attributes": {}})


def test_given_a_step_that_needs_nothing_then_it_is_done_at_once() -> None:
    # Given
    def nothing() -> Step[int]:
        return 7
        yield  # pragma: no cover - makes this a generator

    # When
    run = Run(nothing())
    # Then
    assert (run.done, run.result, list(run)) == (True, 7, [])


def test_given_a_reply_then_it_keeps_what_the_step_reads() -> None:
    assert Reply({"Item": {}}, resent=False).response == {"Item": {}}


# --- both drivers, both emulators -----------------------------------------------------


@pytest.fixture(params=DRIVERS)
def run_step(
    request: pytest.FixtureRequest, backend: LocalDynamo, event_loop_thread: EventLoopThread
) -> Callable[..., Any]:
    """``run_step(step)``: run a step to its end through this test's driver; also
    ``run_step.client``, that driver's client."""
    if request.param == "sync":
        client = backend.client()

        def run(step: Step[Any]) -> Any:
            return drive(step, client)

    else:
        client = event_loop_thread.client(backend)

        def run(step: Step[Any]) -> Any:
            return event_loop_thread.run(aio_drive(step, client))

    run.client = client  # type: ignore[attr-defined]
    return run


def conditional_put(table: str) -> Step[str]:
    """Insert ``a`` only if absent, twice: the second is refused; say what happened."""
    item = {"pk": {"S": "a"}}
    yield from request("put_item", TableName=table, Item=item)
    try:
        yield from request(
            "put_item", TableName=table, Item=item, ConditionExpression="attribute_not_exists(pk)"
        )
    except ConditionFailed as exc:
        return f"{exc.operation}: {exc.code}"
    return "written twice"


def test_given_each_driver_when_a_condition_fails_then_the_step_sees_the_same_error(
    run_step: Callable[..., Any], ddb: Any, data_table: str
) -> None:
    # Given
    table = data_table
    # When
    with count_requests(run_step.client) as counts:  # type: ignore[attr-defined]
        said = run_step(conditional_put(table))
    # Then: one request per call, and the refusal as DynamoDB gave it
    assert said == "PutItem: ConditionalCheckFailedException"
    assert dict(counts.by_operation) == {"PutItem": 2}
    assert ddb.get_item(TableName=table, Key={"pk": {"S": "a"}})["Item"] == {"pk": {"S": "a"}}


def test_given_each_driver_when_a_table_is_missing_then_the_error_names_it(
    run_step: Callable[..., Any], table_name: Callable[[str], str]
) -> None:
    # Given
    missing = table_name("never-made")
    # When
    with pytest.raises(TableNotFound) as raised:
        run_step(request("get_item", TableName=missing, Key={"pk": {"S": "a"}}))
    # Then
    assert repr(missing) in str(raised.value)
    assert isinstance(raised.value.__cause__, ClientError)


def test_given_each_driver_when_the_answer_is_lost_then_the_step_is_told_it_was_resent(
    run_step: Callable[..., Any], data_table: str
) -> None:
    # Given: the put applies, its answer is lost, the SDK sends it again
    table = data_table
    chaos = Chaos(run_step.client)  # type: ignore[attr-defined]
    chaos.arm("lost", at=0)
    resent: list[bool] = []
    # When
    run_step(request("put_item", resent=resent, TableName=table, Item={"pk": {"S": "a"}}))
    # Then
    assert chaos.fired and resent == [True]


def test_given_each_driver_when_the_coordinator_dies_after_a_call_then_it_was_applied(
    run_step: Callable[..., Any], ddb: Any, data_table: str
) -> None:
    # Given
    table = data_table
    chaos = Chaos(run_step.client)  # type: ignore[attr-defined]
    chaos.arm("after", at=1)
    # When
    with pytest.raises(Crash):
        run_step(conditional_put(table))
    # Then: the first put and the refused second one were sent; the crash came after
    assert chaos.calls == ["PutItem", "PutItem"]
    assert "Item" in ddb.get_item(TableName=table, Key={"pk": {"S": "a"}})


def test_given_each_driver_when_a_request_is_invalid_then_dynamodb_refuses_it(
    run_step: Callable[..., Any], ddb: Any, data_table: str
) -> None:
    # Given
    table = data_table
    # When
    with pytest.raises(DynamoDBError) as raised:
        run_step(request("put_item", TableName=table, Item={"other": {"S": "no key"}}))
    # Then
    assert raised.value.code == "ValidationException"
    assert ddb.scan(TableName=table)["Items"] == []


def put_one(table: str, pk: str, fail: bool = False) -> Step[str]:
    """Put ``pk``; with ``fail``, a put DynamoDB refuses (no key) after it."""
    yield from request("put_item", TableName=table, Item={"pk": {"S": pk}})
    if fail:
        yield from request("put_item", TableName=table, Item={"other": {"S": pk}})
    return pk


def test_given_each_driver_when_steps_are_gathered_then_results_come_in_order(
    run_step: Callable[..., Any], ddb: Any, data_table: str
) -> None:
    # Given
    steps = [put_one(data_table, pk) for pk in ("a", "b", "c")]
    # When
    with count_requests(run_step.client) as counts:  # type: ignore[attr-defined]
        results = run_step(gather(steps))
    # Then
    assert results == ["a", "b", "c"]
    assert dict(counts.by_operation) == {"PutItem": 3}
    assert len(ddb.scan(TableName=data_table)["Items"]) == 3


def test_given_each_driver_when_a_gathered_step_fails_then_the_others_end_first(
    run_step: Callable[..., Any], ddb: Any, data_table: str
) -> None:
    # Given: the first step fails on its second request
    steps = [put_one(data_table, "a", fail=True), put_one(data_table, "b")]
    # When
    with pytest.raises(DynamoDBError) as raised:
        run_step(gather(steps))
    # Then: the failure is the first step's, and the second step ran to its end
    assert raised.value.code == "ValidationException"
    keys = sorted(item["pk"]["S"] for item in ddb.scan(TableName=data_table)["Items"])
    assert keys == ["a", "b"]


def test_given_a_pool_when_the_sync_driver_gathers_then_the_pool_runs_the_steps(
    backend: LocalDynamo, data_table: str
) -> None:
    # Given: a pool that records which steps it ran
    ran: list[int] = []

    def pool(run_one: Callable[[Step[Any]], Any], steps: list[Step[Any]]) -> list[Any]:
        ran.append(len(steps))
        return [run_one(step) for step in steps]

    # When
    results = drive(gather(put_one(data_table, pk) for pk in "xy"), backend.client(), parallel=pool)
    # Then
    assert (results, ran) == (["x", "y"], [2])
