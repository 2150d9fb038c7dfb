"""Manual recovery: inspect or recover one transaction, sweep now, break one stray item
lock, or break one lock row (mutex, lease or FIFO) whose holder is gone.

Invoked by an operator (``aws lambda invoke``). Events::

    {"action": "inspect",    "transaction_id": "<id>"}
    {"action": "recover",    "transaction_id": "<id>"}
    {"action": "sweep",      "rollback_after_seconds": 60, "delete_after_seconds": 86400,
                             "page_budget": 50, "full": false}      # all optional
    {"action": "break_lock", "table": "<data table>", "key": {"pk": {"S": "alice"}}}
    {"action": "break_lock_row", "resource": "Moe", "by": "alice@ops",
                             "kind": "lease", "namespace": null, "force": false,
                             "seen": null}                          # kind .. seen optional

``break_lock_row`` watches a lease or FIFO holder for one lease (see
:mod:`ddbtx.locks.breaking`); if that does not fit in the time left, it answers
``"outcome": "observing"`` with ``"seen"``: invoke it again with that ``seen`` a
lease or more later. A break logs an audit line (who, what, the row before) and
publishes the ``LocksBroken`` metric.

Any event may carry ``"correlation_id"`` (a string) for the logs. The answer is
``{"ok": true, "action": ..., "result": {...}}``, or for a malformed event
``{"ok": false, "error": "InvalidEvent", "fields": [{"field": ..., "problem": ...}]}``,
or ``{"ok": false, "error": "LockNotFound", "message": ...}``, or for an id no record
answers to ``{"ok": false, "error": "TransactionNotFound", "transaction_id": ...,
"message": ...}`` (the likely causes; the CLI prints the same and exits 1); nothing is
changed then. Every action is safe to repeat.
"""

import base64
import binascii
import os
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Final, Literal

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import (
    BaseModel,
    Field,
    ValidationError,
    model_validator,
    parse,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from ddbtx import locks, recovery
from ddbtx.errors import InvalidTransactionIdError, LockNotFoundError
from ddbtx.sweeper import JanitorSettings, janitor_client

# Powertools' variables (the CDK app sets them) win; these defaults let the handler run
# anywhere else too (locally, in a test) instead of failing for want of a namespace.
SERVICE: Final = os.environ.get("POWERTOOLS_SERVICE_NAME", "ddbtx-recovery")
logger = Logger(service=SERVICE)
metrics = Metrics(
    namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "ddbtx"), service=SERVICE
)
tracer = Tracer(service=SERVICE)
copy_config_to_registered_loggers(source_logger=logger, include={"ddbtx"})

# Cold start: a missing or malformed variable fails here, with a message naming it.
SETTINGS: Final = JanitorSettings.from_env()
MANAGER: Final = SETTINGS.manager(janitor_client())

# --- event models -------------------------------------------------------------------

_STRICT: Final = {"extra": "forbid", "strict": True}
TransactionId = Annotated[str, Field(min_length=1, max_length=1024)]


class _Event(BaseModel):
    model_config = _STRICT  # type: ignore[assignment]
    correlation_id: str | None = None


class InspectEvent(_Event):
    action: Literal["inspect"]
    transaction_id: TransactionId


class RecoverEvent(_Event):
    action: Literal["recover"]
    transaction_id: TransactionId


class SweepEvent(_Event):
    action: Literal["sweep"]
    rollback_after_seconds: Annotated[int, Field(ge=0)] | None = None
    delete_after_seconds: Annotated[int, Field(ge=0)] | None = None
    page_budget: Annotated[int, Field(ge=1)] | None = None
    full: bool = False


class KeyValue(BaseModel):
    """One key attribute as DynamoDB JSON: exactly one of S, N or B (base64)."""

    model_config = _STRICT  # type: ignore[assignment]
    S: str | None = None
    N: str | None = None
    B: str | None = None

    @model_validator(mode="after")
    def one_type(self) -> "KeyValue":
        given = [kind for kind in ("S", "N", "B") if getattr(self, kind) is not None]
        if len(given) != 1:
            raise ValueError("a key value needs exactly one of S, N or B")
        if self.N is not None:
            try:
                Decimal(self.N)
            except InvalidOperation:
                raise ValueError(f"N must be a number, not {self.N!r}") from None
        if self.B is not None:
            try:
                base64.b64decode(self.B, validate=True)
            except binascii.Error:
                raise ValueError("B must be base64") from None
        return self

    def attribute_value(self) -> dict[str, Any]:
        if self.B is not None:
            return {"B": base64.b64decode(self.B)}
        return {"S": self.S} if self.S is not None else {"N": self.N}


class BreakLockEvent(_Event):
    action: Literal["break_lock"]
    table: Annotated[str, Field(min_length=1, max_length=255)]
    key: Annotated[dict[str, KeyValue], Field(min_length=1, max_length=2)]


class SeenValue(BaseModel):
    """What an ``observing`` answer saw, passed back unchanged."""

    model_config = _STRICT  # type: ignore[assignment]
    hold: Annotated[str, Field(min_length=1)]
    rvn: str
    at: Annotated[float, Field(allow_inf_nan=False)]  # NaN would read as watched through


class BreakLockRowEvent(_Event):
    action: Literal["break_lock_row"]
    resource: Annotated[str, Field(min_length=1, max_length=2048)]
    by: Annotated[str, Field(min_length=1, max_length=1024)]
    kind: Literal["mutex", "lease", "fifo"] | None = None
    namespace: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    force: bool = False
    seen: SeenValue | None = None


RecoveryEvent = Annotated[
    InspectEvent | RecoverEvent | SweepEvent | BreakLockEvent | BreakLockRowEvent,
    Field(discriminator="action"),
]

#: Seconds of the invocation kept free after watching a holder (the break and the answer).
WATCH_MARGIN: Final = 5.0


def invalid(exc: ValidationError) -> dict[str, Any]:
    """The answer to a malformed event: each problem with the field it is in."""
    fields = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        if error["type"].startswith("union_tag") or error["type"] == "model_attributes_type":
            loc = ["action"] if error["type"].startswith("union_tag") else ["(event)"]
        elif loc and loc[0] in ("inspect", "recover", "sweep", "break_lock", "break_lock_row"):
            loc = loc[1:]  # the discriminator's tag, not a field
        fields.append({"field": ".".join(loc) or "(event)", "problem": error["msg"]})
    return {"ok": False, "error": "InvalidEvent", "fields": fields}


# --- actions ----------------------------------------------------------------------------


def sweep(event: SweepEvent, context: LambdaContext) -> dict[str, Any]:
    ages = {}
    if event.rollback_after_seconds is not None:
        ages["rollback_after"] = timedelta(seconds=event.rollback_after_seconds)
    if event.delete_after_seconds is not None:
        ages["delete_after"] = timedelta(seconds=event.delete_after_seconds)
    sweeper = SETTINGS.sweeper(MANAGER, **ages)

    def remaining() -> float:
        return context.get_remaining_time_in_millis() / 1000

    if event.full:
        return sweeper.run_full(remaining).to_dict()
    return sweeper.run(remaining, event.page_budget or SETTINGS.page_budget).to_dict()


def break_lock(event: BreakLockEvent) -> dict[str, Any]:
    if SETTINGS.data_tables and event.table not in SETTINGS.data_tables:
        return {
            "ok": False,
            "error": "InvalidEvent",
            "fields": [
                {
                    "field": "table",
                    "problem": f"not one of the data tables {list(SETTINGS.data_tables)}",
                }
            ],
        }
    key = {name: value.attribute_value() for name, value in event.key.items()}
    return recovery.break_lock(MANAGER, event.table, key)


def _field_of(message: str) -> str:
    """The event field a core argument error is about (the core names its argument)."""
    if "several lock rows" in message:
        return "kind"  # ambiguous: name the kind (or the namespace)
    words = message.split()
    for name in ("resource", "namespace", "by"):
        if name in words[:2]:
            return name
    return "(event)"


def break_lock_row(event: BreakLockRowEvent, context: LambdaContext) -> dict[str, Any]:
    """Break one lock row; an audit line and the ``LocksBroken`` metric when broken."""
    if SETTINGS.locks_table is None:
        return {"ok": False, "error": "NoLocksTable", "message": "LOCKS_TABLE is not set"}
    seen = None if event.seen is None else locks.Seen(**event.seen.model_dump())
    time_left = context.get_remaining_time_in_millis() / 1000 - WATCH_MARGIN
    try:
        result = locks.break_lock(
            MANAGER.client, SETTINGS.locks_table, event.resource, by=event.by,
            kind=event.kind, namespace=event.namespace, force=event.force, seen=seen,
            max_wait=max(0.0, time_left),
        )  # fmt: skip
    except LockNotFoundError as exc:
        return {"ok": False, "error": "LockNotFound", "message": str(exc)}
    except ValueError as exc:  # what the event's types cannot say (a '#' in a namespace, ...)
        problem = {"field": _field_of(str(exc)), "problem": str(exc)}
        return {"ok": False, "error": "InvalidEvent", "fields": [problem]}
    answer = result.to_dict()
    logger.info("break_lock_row", extra={"outcome": result.outcome, "reason": result.reason})
    if result.outcome == "broken":
        audit = {"by": event.by, "force": event.force, **answer}
        logger.warning("lock broken", extra={"audit": audit})
        metrics.add_metric(name="LocksBroken", unit=MetricUnit.Count, value=1)
        metrics.add_metadata(key="lock", value=f"{result.kind}:{event.resource}")
        metrics.flush_metrics()
    return answer


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    """Parse the event, run its action, and answer with the result or the invalid fields."""
    try:
        # RecoveryEvent is an annotated union (a discriminated one), which Powertools'
        # parse takes at run time but its overloads type as a class only.
        request: Any = parse(event=event, model=RecoveryEvent)  # type: ignore[call-overload]
    except ValidationError as exc:
        answer = invalid(exc)
        logger.warning("invalid recovery event", extra={"fields": answer["fields"]})
        return answer
    logger.set_correlation_id(request.correlation_id or context.aws_request_id)
    logger.info("recovery action", extra={"action": request.action})
    if isinstance(request, InspectEvent | RecoverEvent):
        action = recovery.inspect if isinstance(request, InspectEvent) else recovery.recover
        try:
            result = action(MANAGER, request.transaction_id)
        except InvalidTransactionIdError as exc:  # what its type cannot say: UTF-8 bytes
            problem = {"field": "transaction_id", "problem": str(exc)}
            return {"ok": False, "error": "InvalidEvent", "fields": [problem]}
        if result.get("found") is False or result.get("outcome") == "missing":
            # The CLI's answer too (exit status 1): the id and why it may not be found.
            return {
                "ok": False, "error": "TransactionNotFound", "action": request.action,
                "transaction_id": result["transaction_id"], "message": result["reason"],
            }  # fmt: skip
    elif isinstance(request, SweepEvent):
        result = sweep(request, context)
    elif isinstance(request, BreakLockEvent):
        result = break_lock(request)
        if result.get("ok") is False:
            return result
    else:
        result = break_lock_row(request, context)
        if result.get("ok") is False:
            return result
    return {"ok": True, "action": request.action, "result": result}
