"""Manual recovery: inspect or settle one transaction, sweep now, or break one stray lock.

Invoked by an operator (``aws lambda invoke``). Events::

    {"action": "inspect",    "transaction_id": "<id>"}
    {"action": "recover",    "transaction_id": "<id>"}
    {"action": "sweep",      "rollback_after_seconds": 60, "delete_after_seconds": 86400,
                             "page_budget": 50, "full": false}      # all optional
    {"action": "break_lock", "table": "<data table>", "key": {"pk": {"S": "alice"}}}

Any event may carry ``"correlation_id"`` (a string) for the logs. The answer is
``{"ok": true, "action": ..., "result": {...}}``, or for a malformed event
``{"ok": false, "error": "InvalidEvent", "fields": [{"field": ..., "problem": ...}]}``
(nothing is changed then). Every action is safe to repeat.
"""

import base64
import binascii
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Final, Literal

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.parser import (
    BaseModel,
    Field,
    ValidationError,
    model_validator,
    parse,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from ddbtx import recovery
from ddbtx.sweeper import JanitorSettings, janitor_client

logger = Logger()
tracer = Tracer()
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


RecoveryEvent = Annotated[
    InspectEvent | RecoverEvent | SweepEvent | BreakLockEvent, Field(discriminator="action")
]


def invalid(exc: ValidationError) -> dict[str, Any]:
    """The answer to a malformed event: each problem with the field it is in."""
    fields = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        if error["type"].startswith("union_tag") or error["type"] == "model_attributes_type":
            loc = ["action"] if error["type"].startswith("union_tag") else ["(event)"]
        elif loc and loc[0] in ("inspect", "recover", "sweep", "break_lock"):
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


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    """Parse the event, run its action, and answer with the result or the invalid fields."""
    try:
        request: Any = parse(event=event, model=RecoveryEvent)  # type: ignore[arg-type]
    except ValidationError as exc:
        answer = invalid(exc)
        logger.warning("invalid recovery event", extra={"fields": answer["fields"]})
        return answer
    logger.set_correlation_id(request.correlation_id or context.aws_request_id)
    logger.info("recovery action", extra={"action": request.action})
    if isinstance(request, InspectEvent):
        result = recovery.inspect(MANAGER, request.transaction_id)
    elif isinstance(request, RecoverEvent):
        result = recovery.recover(MANAGER, request.transaction_id)
    elif isinstance(request, SweepEvent):
        result = sweep(request, context)
    else:
        result = break_lock(request)
        if result.get("ok") is False:
            return result
    return {"ok": True, "action": request.action, "result": result}
