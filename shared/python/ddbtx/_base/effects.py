"""Requests as values: a step (:data:`Step`) yields effects and is resumed with their answers,
so one step runs unchanged on either driver and the explorer; a driver only performs effects."""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar

from botocore.exceptions import ClientError

from ..errors import ConditionFailed, DdbtxError, DynamoDBError, as_client_exception, translate

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call:
    """One DynamoDB request: the client method's name (``"update_item"``) and its keywords."""

    operation: str
    params: Mapping[str, Any]

    def tables(self) -> tuple[str, ...]:
        """``TableName``, or a batch's ``RequestItems``."""
        if isinstance(self.params.get("TableName"), str):
            return (self.params["TableName"],)
        items = self.params.get("RequestItems")
        return tuple(sorted(items)) if isinstance(items, dict) else ()


@dataclass(frozen=True, slots=True)
class Sleep:
    """A pause of ``seconds`` (the driver's clock: real, virtual or the explorer's)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Gather:
    """Steps to run at once; every one ends before the first failure is thrown in."""

    steps: tuple[Step[Any], ...]


@dataclass(frozen=True, slots=True)
class Reply:
    """A :class:`Call`'s response without ``ResponseMetadata``, and whether it was resent."""

    response: dict[str, Any]
    resent: bool


Effect: TypeAlias = "Call | Sleep | Gather"
#: A protocol step: yields effects, is sent each one's answer, returns ``T``.
Step: TypeAlias = Generator[Effect, Any, T]


def request(operation: str, *, resent: list[bool] | None = None, **params: Any) -> Step[Any]:
    """The step of one call: its response; ``resent`` gets whether the SDK resent it."""
    try:
        reply: Reply = yield Call(operation, params)
    except DynamoDBError as exc:
        if resent is not None:
            resent.append(was_resent(exc))
        raise
    if resent is not None:
        resent.append(reply.resent)
    return reply.response


#: The calls that can report what they consumed (every data-plane call the protocol sends).
_METERED = frozenset(
    {
        "put_item",
        "update_item",
        "delete_item",
        "get_item",
        "query",
        "scan",
        "batch_get_item",
        "batch_write_item",
        "transact_write_items",
        "transact_get_items",
    }
)


class Meter:
    """Capacity units consumed by the calls of one user request, per table."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.units: dict[str, float] = {}
        self._lock = threading.Lock()  # a gather's sub-steps may run on several threads

    def add(self, consumed: Any) -> None:
        """A response's ``ConsumedCapacity`` (one table's, or a batch's list of them)."""
        entries = consumed if isinstance(consumed, list) else [consumed] if consumed else []
        with self._lock:
            for entry in entries:
                table = str(entry.get("TableName", ""))
                self.units[table] = self.units.get(table, 0.0) + float(
                    entry.get("CapacityUnits", 0.0)
                )

    def total(self) -> float:
        return sum(self.units.values())


def metered(step: Step[T], meter: Meter) -> Step[T]:
    """``step`` with every call it (or a step it gathers) sends asking DynamoDB what it
    consumed, added to ``meter``; the answers it is sent are as they were without."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = step.throw(error) if error is not None else step.send(answer)
        except StopIteration as stop:
            result: T = stop.value
            return result
        error = None
        if isinstance(effect, Call) and effect.operation in _METERED:
            effect = Call(effect.operation, {**effect.params, "ReturnConsumedCapacity": meter.mode})
        elif isinstance(effect, Gather):
            effect = Gather(tuple(metered(sub, meter) for sub in effect.steps))
        try:
            answer = yield effect
        except GeneratorExit:
            step.close()
            raise
        except BaseException as exc:  # thrown in by the driver: the step's to see
            error = exc
            continue
        if isinstance(answer, Reply) and "ConsumedCapacity" in answer.response:
            response = dict(answer.response)
            meter.add(response.pop("ConsumedCapacity"))
            answer = Reply(response, answer.resent)


def query_all(**params: Any) -> Step[list[dict[str, Any]]]:
    """Every item a Query returns, page after page (``LastEvaluatedKey``)."""
    items: list[dict[str, Any]] = []
    start: dict[str, Any] = {}
    while True:
        page = yield from request("query", **params, **start)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        start = {"ExclusiveStartKey": page["LastEvaluatedKey"]}


def was_resent(exc: BaseException) -> bool:
    """Whether the SDK sent the request that failed with ``exc`` more than once."""
    response = getattr(exc.__cause__, "response", None)
    meta = response.get("ResponseMetadata", {}) if isinstance(response, dict) else {}
    return int(meta.get("RetryAttempts", 1)) > 0


def pause(seconds: float) -> Step[None]:
    yield Sleep(seconds)


def gather(steps: Iterable[Step[T]]) -> Step[list[T]]:
    """The step of running ``steps`` at once: their results, in order (never an exception:
    drivers take one for a failure, so a step returning one boxes it)."""
    results: list[T] = yield Gather(tuple(steps))
    return results


def first_failure(outcomes: Iterable[object]) -> None:
    """Raise the first exception among a gather's ``outcomes`` (results or exceptions)."""
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome


def insert_new(
    table: str, item: dict[str, Any], condition: str, key: str, *, resent: list[bool] | None = None
) -> Step[bool]:
    """PutItem of a row that must not exist yet (``#id``: ``key``); False when it does."""
    try:
        yield from request(
            "put_item",
            resent=resent,
            TableName=table,
            Item=item,
            ConditionExpression=condition,
            ExpressionAttributeNames={"#id": key},
        )
    except ConditionFailed:
        return False
    return True


def failure(exc: ClientError, call: Call) -> DynamoDBError:
    """``exc`` as the :class:`DynamoDBError` a step sees, caused by ``exc``."""
    error = translate(exc, call.tables())
    error.__cause__ = exc
    error.__suppress_context__ = True
    return error


@contextmanager
def raised_through(client: Any) -> Iterator[None]:
    """What a driver raises is also ``client``'s own exception class for its DynamoDB code
    (:func:`ddbtx.errors.as_client_exception`), so ``except client.exceptions.X`` catches it."""
    try:
        yield
    except DdbtxError as exc:
        as_client_exception(exc, client)
        raise


class _Outcome:
    value: Any = None


class Run(Generic[T]):
    """One step being driven: a driver performs each effect in ``with run.outcome() as out``."""

    def __init__(self, step: Step[T]) -> None:
        self._step = step
        self.done = False
        self.result: T
        self.effect: Effect
        self._advance(lambda: next(step))

    def __iter__(self) -> Iterator[Effect]:
        while not self.done:
            yield self.effect

    def _advance(self, resume: Any) -> None:
        try:
            self.effect = resume()
        except StopIteration as stop:
            self.done = True
            self.result = stop.value

    @contextmanager
    def outcome(self) -> Iterator[_Outcome]:
        """Resume the step with what the block set, or throw in what it raised."""
        out = _Outcome()
        error: BaseException | None = None
        try:
            yield out
        except ClientError as exc:
            # A ddbtx error is a ClientError too (errors.py); only botocore's own is translated.
            botocore_own = not isinstance(exc, DdbtxError)
            error = (
                failure(exc, self.effect) if botocore_own and isinstance(self.effect, Call) else exc
            )
        except BaseException as exc:  # a crash, a timeout, a cancellation: the step's to see
            error = exc
        if error is not None:
            thrown = error
            self._advance(lambda: self._step.throw(thrown))
        elif isinstance(self.effect, Call):
            meta = out.value.pop("ResponseMetadata", None) or {}
            reply = Reply(out.value, int(meta.get("RetryAttempts", 0)) > 0)
            self._advance(lambda: self._step.send(reply))
        else:  # a pause (None) or a gather's results
            value = out.value
            self._advance(lambda: self._step.send(value))
