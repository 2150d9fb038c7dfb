"""``transact_write``'s fast path: one native ``TransactWriteItems`` call."""

from __future__ import annotations

import logging
from typing import Any

from .. import schema as s
from .._base.effects import Step, request
from .._base.items import item_size
from .._base.requests import KeySchemas, Request, build, grouped
from ..errors import DuplicateRequestError, DynamoDBError, InvalidRequestError, ValidationFailed
from .steps import parse_batch

logger = logging.getLogger(__name__)


def one_call(schemas: KeySchemas, requests: list[dict[str, Any]]) -> Step[bool]:
    """Validate the batch and write it in one call if it fits; False: the protocol's turn."""
    built: list[Request] = []
    for op, params in parse_batch(requests):
        if "ReturnValues" in params:
            raise InvalidRequestError("ReturnValues is not supported in transact_write")
        table = params.get("TableName")
        key_types = (yield from schemas.types(table)) if isinstance(table, str) and table else {}
        built.append(build(op, params, key_types))
    if not built:
        return True
    if len({(r.table, r.rid) for r in built}) != len(built):
        raise DuplicateRequestError("an item appears twice in transact_write")
    size = sum(item_size(r.params.get("Item") or r.key) for r in built)
    if len(built) > 100 or size > 4 * 1024 * 1024:
        return False
    return (yield from native_write(built))


def native_write(requests: list[Request]) -> Step[bool]:
    """One TransactWriteItems call; False when the protocol must take over."""
    items = []
    for r in requests:
        names = {**(r.params.get("ExpressionAttributeNames") or {}), "#ddbtxl": s.ATTR_LOCK}
        # fast path: the item takes part in no protocol transaction, and the
        # request's own condition holds; DynamoDB checks both atomically.
        condition = "attribute_not_exists(#ddbtxl)"
        if r.condition:
            condition = f"{grouped(r.condition)} AND {condition}"
        params = {**r.params, "ConditionExpression": condition, "ExpressionAttributeNames": names}
        if r.op == "update" and not r.params.get("UpdateExpression"):
            # An Update needs an expression: removing an attribute never written changes nothing.
            params["UpdateExpression"] = "REMOVE #ddbtxv"
            names["#ddbtxv"] = s.ATTR_VERDICT
        items.append({r.op.capitalize(): params})
    try:
        # botocore's ClientRequestToken dedupes a retry (no emulator honours it).
        yield from request("transact_write_items", TransactItems=items)
        return True
    except ValidationFailed as exc:
        raise InvalidRequestError(
            f"DynamoDB rejected the request: {exc}",
            operation="TransactWriteItems",
            dynamodb_message=exc.response["Error"].get("Message"),
        ) from exc
    except DynamoDBError as exc:
        # A cancellation or an emulator without the API: the protocol sorts it out.
        logger.debug("transact_write falls back to the protocol: %s", exc.code)
        return False
