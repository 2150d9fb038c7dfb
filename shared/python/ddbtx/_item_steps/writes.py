"""The requests item steps send to an item, and what a refusal means; sent only through
``request`` here, so a harness that rewrites them patches it here."""

from __future__ import annotations

import logging
import typing
from typing import Any

from botocore.exceptions import BotoCoreError

from .. import schema as s
from .._base.effects import Step, request
from .._base.items import MAX_ITEM_BYTES, Item, item_size, probe_key, strip
from .._base.requests import (
    PROTOCOL_OVERHEAD,
    Request,
    grouped,
    merge_set,
    update_shape,
    used_placeholders,
)
from .._stores.completion import Completion
from .._stores.record import new_lock_value
from ..errors import (
    ConditionalCheckFailedError,
    ConditionFailed,
    DynamoDBError,
    InvalidRequestError,
    ValidationFailed,
)
from .view import Local, rejected

logger = logging.getLogger(__name__)

#: verdict: a no-op write that succeeds only while the item exists, is free, and the
#: request's own condition is false; it tells a false condition from a lock race.
VERDICT = "attribute_exists(#ddbtxk) AND attribute_not_exists(#ddbtxl) AND NOT {condition}"

#: Images larger than this live in the images table instead of the item.
INLINE_IMAGE_LIMIT = 64 * 1024


class Identified(typing.Protocol):
    @property
    def id(self) -> str: ...


class Holder(typing.Protocol):
    """What a write under the lock uses of :class:`ddbtx._item_steps.lock.ItemSteps`."""

    @property
    def tx(self) -> Identified: ...
    @property
    def p(self) -> Completion: ...
    @property
    def writes(self) -> ItemWrites: ...
    def lost_lock(self, local: Local) -> Step[dict[str, Any]]: ...


class UnderLock:
    """A group of item steps sent under the lock (apply, rewrite)."""

    def __init__(self, steps: Holder) -> None:
        self.steps = steps
        self.tx = steps.tx
        self.p = steps.p
        self.writes = steps.writes


class ItemWrites:
    """The requests of one transaction's item steps to its items."""

    def __init__(self, tx: Identified, p: Completion) -> None:
        self.tx = tx
        self.p = p

    def lock_names(self, local: Local) -> tuple[dict[str, str], dict[str, Any]]:
        req = local.request
        names = dict(req.params.get("ExpressionAttributeNames") or {})
        values = dict(req.params.get("ExpressionAttributeValues") or {})
        names.update({"#ddbtxl": s.ATTR_LOCK, "#ddbtxk": next(iter(req.key))})
        values[":ddbtxl"] = {"S": new_lock_value(self.tx.id, local.nonce)}
        return names, values

    def check_condition_now(self, local: Local, *, absent: bool) -> Step[None]:
        """verdict: raise if the request's condition is false on the free item now."""
        if absent:
            yield from self.check_on_absent(local)
            return
        req = local.request
        names, values = self.lock_names(local)
        names["#ddbtxv"] = s.ATTR_VERDICT
        condition = VERDICT.format(condition=grouped(str(req.condition)))
        # The verdict's own answer is the item the condition was false on, when asked for.
        rv = "ALL_OLD" if req.old_on_failure else "NONE"
        try:
            answer = yield from self.update(
                req, "REMOVE #ddbtxv", condition, names, values, ReturnValues=rv
            )
        except ConditionFailed:
            return
        raise (yield from self.condition_false(req, answer.get("Attributes")))

    def check_on_absent(self, local: Local) -> Step[None]:
        """Evaluate the user's condition as DynamoDB would on an absent item."""
        req = local.request
        probe = probe_key(req.key)
        try:
            # A conditional delete of a key that cannot exist writes nothing.
            yield from request(
                "delete_item",
                TableName=req.table,
                Key=probe,
                ConditionExpression=req.condition,
                **used_placeholders(
                    req.params.get("ExpressionAttributeNames") or {},
                    req.params.get("ExpressionAttributeValues") or {},
                    str(req.condition),
                ),
            )
        except ConditionFailed as exc:
            raise (yield from self.condition_false(req)) from exc
        except ValidationFailed as exc:
            # DynamoDB would name an UpdateExpression's error before the condition's
            raise (yield from self.refusal(req, exc)) from exc

    def refusal(
        self, req: Request, exc: ValidationFailed, *, sized: bool = False
    ) -> Step[InvalidRequestError]:
        """DynamoDB refused a write of ``req``, in DynamoDB's own words for the user's request.

        The protocol's write joins the user's expressions with its own, so DynamoDB's message
        may quote ddbtx's text; the user's expressions are asked about alone (only on this
        error path), and DynamoDB's refusal of them, if any, is the answer.
        """
        alone = yield from self._ask_alone(req)
        return rejected(self.tx.id, [req], alone or exc, sized=sized)

    def _ask_alone(self, req: Request) -> Step[ValidationFailed | None]:
        """The user's update and condition expressions sent on their own, on a key that
        cannot exist, under a condition that cannot hold: nothing is written either way.

        Both refused: DynamoDB checks the UpdateExpression, then the condition, then the key
        attributes the update would change; the first error in that order is its answer.
        """
        update = yield from self._ask_update(req)
        if (update is not None and not _after_condition(update)) or not req.condition:
            return update
        names = req.params.get("ExpressionAttributeNames") or {}
        values = req.params.get("ExpressionAttributeValues") or {}
        used = used_placeholders(names, values, req.condition)
        try:
            yield from request(
                "delete_item",
                TableName=req.table,
                Key=probe_key(req.key),
                ConditionExpression=req.condition,
                **used,
            )
        except ValidationFailed as condition:
            return condition
        except ConditionFailed:
            pass
        return update

    def _ask_update(self, req: Request) -> Step[ValidationFailed | None]:
        """DynamoDB's refusal of the user's UpdateExpression whatever the item holds, if any
        (asked once per shape: :func:`ddbtx._base.requests.update_shape`)."""
        shape = update_shape(req)
        if shape is None or shape in self.p.valid_updates:
            return None
        update = str(req.params["UpdateExpression"])
        # never holds on the probe key: the update is parsed and checked, not applied
        exists = "attribute_exists(#ddbtxk)"
        names = {
            **(req.params.get("ExpressionAttributeNames") or {}),
            "#ddbtxk": next(iter(req.key)),
        }
        values = req.params.get("ExpressionAttributeValues") or {}
        try:
            yield from request(
                "update_item",
                TableName=req.table,
                Key=probe_key(req.key),
                UpdateExpression=update,
                ConditionExpression=exists,
                **used_placeholders(names, values, update, exists),
            )
        except ValidationFailed as refused:
            return refused
        except ConditionFailed:
            self.p.valid_update(shape)
        return None

    def condition_false(
        self, req: Request, seen: Item | None = None
    ) -> Step[ConditionalCheckFailedError | InvalidRequestError]:
        """The request's condition is false on ``seen``, the item as this transaction sees it
        (None: absent), handed back with ``ReturnValuesOnConditionCheckFailure=ALL_OLD``.

        DynamoDB checks an UpdateExpression before the condition: one it refuses whatever
        the item holds is the answer instead (ddbtx checked the condition first, with the lock).
        """
        refused = yield from self._ask_update(req)
        if refused is not None:
            return rejected(self.tx.id, [req], refused)
        old = strip(seen) if req.old_on_failure and seen is not None else None
        return ConditionalCheckFailedError(
            "the request's condition is false",
            operation=req.op,
            item=old or None,
            tx_id=self.tx.id,
            table=req.table,
            key=req.key,
        )

    def image_attrs(self, local: Local, values: dict[str, Any]) -> Step[dict[str, Any]]:
        """save image: in the item while both copies fit, else in the images table."""
        image = local.pre
        if image is None:
            return {}
        incoming = item_size(local.request.params.get("Item") or {}) + item_size(values)
        if item_size(image) > INLINE_IMAGE_LIMIT or (
            item_size(image) * 2 + incoming + PROTOCOL_OVERHEAD > MAX_ITEM_BYTES
        ):
            yield from self.save_image(local, image)
            return {s.ATTR_IMAGE_EXTERNAL: {"BOOL": True}}
        return {s.ATTR_IMAGE: {"M": image}}

    def save_image(self, local: Local, image: Item) -> Step[None]:
        """save image: to the images table, every row before the item names it."""
        rows = self.p.image_rows(self.tx.id, local.request.rid, image)
        if len(rows) == 1:
            yield from request("put_item", TableName=self.p.images_table, Item=rows[0])
        else:
            puts = [{"PutRequest": {"Item": r}} for r in rows]
            yield from self.p.write_batches(self.p.images_table, puts)
        local.external_image = True

    def guarded_put(
        self,
        req: Request,
        item: Item,
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
    ) -> Step[None]:
        yield from request(
            "put_item",
            TableName=req.table,
            Item=item,
            ConditionExpression=condition,
            **used_placeholders(names, values, condition),
        )

    def user_update(
        self,
        req: Request,
        protocol_sets: str,
        names: dict[str, str],
        values: dict[str, Any],
        condition: str,
        return_values: str,
    ) -> Step[dict[str, Any]]:
        """The user's UpdateExpression with protocol assignments joined to its SET clause."""
        update = merge_set(req.params.get("UpdateExpression") or "", protocol_sets)
        answer = yield from self.update(
            req, update, condition, names, values, ReturnValues=return_values
        )
        shape = update_shape(req)
        if shape is not None:
            self.p.valid_update(shape)  # DynamoDB took it: no question on a false condition
        return answer

    def update(
        self,
        req: Request,
        update: str,
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
        **extra: Any,
    ) -> Step[dict[str, Any]]:
        response: dict[str, Any] = yield from request(
            "update_item",
            TableName=req.table,
            Key=req.key,
            UpdateExpression=update,
            ConditionExpression=condition,
            **used_placeholders(names, values, update, condition),
            **extra,
        )
        return response


#: DynamoDB's refusal of an update of a key attribute: made only after both expressions
#: were checked (an error in the condition comes first).
KEY_ATTRIBUTE = "This attribute is part of the key"


def _after_condition(refused: ValidationFailed) -> bool:
    return KEY_ATTRIBUTE in str(refused.response["Error"].get("Message", ""))


def ask_as_sent(op: str, probe: dict[str, Any], key: Item) -> Step[ValidationFailed | None]:
    """DynamoDB's own refusal of a request ddbtx refused before sending (``probe``: the
    request as the user wrote it, on a key no item has), or None where DynamoDB takes it.

    DynamoDB refuses the request whole, so nothing is written; an emulator that lets the
    error pass may write the probe's item, which is deleted at once. Only on this error path.
    """
    try:
        yield from request(f"{op}_item", **probe)
    except ValidationFailed as refused:
        return refused
    except ConditionFailed:
        return None  # nothing written: ddbtx's own check says what is wrong
    except (DynamoDBError, BotoCoreError):
        pass  # no answer (or another error): the probe may have been written all the same
    if op != "delete":
        # A delete of a key no other item has: safe to repeat, and to fail (its
        # error would hide the user's; a probe item left by it is named in docs/limits.md)
        try:
            yield from request("delete_item", TableName=probe["TableName"], Key=key)
        except (DynamoDBError, BotoCoreError):
            logger.warning("a probe item may be left at %s in %s", key, probe["TableName"])
    return None


def image_sets(image: dict[str, Any], names: dict[str, str], values: dict[str, Any]) -> str:
    """SET clauses (each after ", ") writing ``image``'s attributes, placeholders added."""
    clauses = ""
    for i, (attr, value) in enumerate(image.items()):
        names[f"#ddbtxi{i}"], values[f":ddbtxi{i}"] = attr, value
        clauses += f", #ddbtxi{i} = :ddbtxi{i}"
    return clauses
