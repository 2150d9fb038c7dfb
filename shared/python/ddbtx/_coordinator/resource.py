"""boto3's ``Table`` resource shape over ddbtx: Python values in and out, conditions objects
(through boto3's own serializers and condition builder), all converted before sending."""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from boto3.dynamodb.conditions import ConditionBase, ConditionExpressionBuilder
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from boto3.exceptions import Boto3Error

from .. import schema as s
from .._base.conditions import Condition
from .._base.effects import Step, request
from .._base.items import strip
from .._base.requests import KeySchemas, build
from .._stores.completion import Completion
from ..errors import (
    ConditionalCheckFailedError,
    ConditionFailed,
    InvalidRequestError,
    TransactionError,
    ValidationFailed,
)
from ..guard import guard
from .manager_core import own_transaction
from .reads import InTransaction, Isolation, locked_read
from .steps import CoordinatorSteps

#: Times a write outside a transaction is tried while its item keeps changing.
ATTEMPTS = 8

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()

#: Parameters holding one item or key, and the one holding values, in Python form.
_ITEMS = ("Item", "Key", "ExclusiveStartKey")
_CONDITIONS = ("ConditionExpression", "FilterExpression", "KeyConditionExpression")
#: Response parts holding items in low-level form.
_ITEM_OUT = ("Item", "Attributes", "LastEvaluatedKey")


class Outside(typing.Protocol):
    """What a table outside any transaction uses of its manager (and its reads)."""

    @property
    def schemas(self) -> KeySchemas: ...
    @property
    def protocol(self) -> Completion: ...
    def new_transaction(self, priority: str | None = None) -> CoordinatorSteps: ...


@typing.runtime_checkable
class Inside(InTransaction, typing.Protocol):
    def put_item(self, **params: Any) -> dict[str, Any]: ...
    def update_item(self, **params: Any) -> dict[str, Any]: ...
    def delete_item(self, **params: Any) -> dict[str, Any]: ...
    def get_item(self, **params: Any) -> dict[str, Any]: ...
    def query(self, **params: Any) -> dict[str, Any]: ...
    def scan(self, **params: Any) -> dict[str, Any]: ...


class Table:
    """A data table as boto3's ``Table`` resource shows it, through ddbtx.

    Made by :meth:`TransactionManager.table` (each write is atomic and
    isolated from transactions; reads take ``isolation=``) or
    :meth:`Transaction.table` (every call is part of the transaction).

    Examples
    --------
    >>> from decimal import Decimal                               # doctest: +SKIP
    >>> from boto3.dynamodb.conditions import Attr
    >>> with tm.transaction() as tx:
    ...     accounts = tx.table("Accounts")
    ...     accounts.update_item(Key={"id": "alice"},
    ...                          UpdateExpression="SET balance = balance - :n",
    ...                          ConditionExpression=Attr("balance").gte(Decimal(10)),
    ...                          ExpressionAttributeValues={":n": Decimal(10)})
    """

    def __init__(self, owner: Outside | Inside, name: str) -> None:
        self.name = self.table_name = name
        self._owner = owner

    def __repr__(self) -> str:
        return f"Table(name={self.name!r})"

    @property
    def _tx(self) -> Inside | None:
        return self._owner if isinstance(self._owner, Inside) else None

    def put_item(self, **kwargs: Any) -> dict[str, Any]:
        """``PutItem``: ``Item``, ``ConditionExpression``, ``ReturnValues``, ..."""
        return self._write("put", kwargs)

    def update_item(self, **kwargs: Any) -> dict[str, Any]:
        """``UpdateItem``: ``Key``, ``UpdateExpression``, ``ConditionExpression``, ..."""
        return self._write("update", kwargs)

    def delete_item(self, **kwargs: Any) -> dict[str, Any]:
        """``DeleteItem``: ``Key``, ``ConditionExpression``, ``ReturnValues``, ..."""
        return self._write("delete", kwargs)

    def _write(self, op: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        send, params = self._writer(op, kwargs)
        return as_python(send(**params))

    def _writer(self, op: str, kwargs: dict[str, Any]) -> tuple[Callable[..., Any], dict[str, Any]]:
        """How a write is sent (in the transaction, or outside any), and its parameters."""
        params = self._low(kwargs)
        tx = self._tx
        return getattr(tx, f"{op}_item") if tx is not None else partial(self._outside, op), params

    def _outside(self, op: str, **params: Any) -> Any:
        manager: Outside = self._owner  # type: ignore[assignment]
        return manager.protocol.run(write_outside(manager, op, params))

    def get_item(self, *, isolation: Isolation | None = None, **kwargs: Any) -> dict[str, Any]:
        """``GetItem`` (``Key``, ``ProjectionExpression``, ...); outside a transaction at
        ``isolation`` (default ``COMMITTED``), inside one under a read lock."""
        send, params = self._reader("get_item", kwargs, isolation)
        return as_python(send(**params))

    def _reader(
        self, op: str, kwargs: dict[str, Any], isolation: Isolation | None
    ) -> tuple[Callable[..., Any], dict[str, Any]]:
        """How a read is sent (the manager's, or the transaction's), and its parameters."""
        params = self._low(kwargs)
        tx = self._tx
        if tx is None:
            extra = {"isolation": isolation} if isolation is not None else {}
            return getattr(self._owner, op), {**params, **extra}
        if isolation is not None:
            raise InvalidRequestError(
                "isolation is for reads outside a transaction", table=self.name
            )
        if op == "get_item" and not set(params) <= {"TableName", "Key", "ConsistentRead"}:
            return partial(self._locked_get, tx), params
        return getattr(tx, op), params

    def _locked_get(self, tx: Inside, **params: Any) -> Any:
        return tx.p.run(locked_read(tx, "get", params))

    def query(self, *, isolation: Isolation | None = None, **kwargs: Any) -> dict[str, Any]:
        """One page of a ``Query`` (``KeyConditionExpression=Key(...)...``); see
        :meth:`TransactionManager.query` and :meth:`Transaction.query`."""
        send, params = self._reader("query", kwargs, isolation)
        return as_python(send(**params))

    def scan(self, *, isolation: Isolation | None = None, **kwargs: Any) -> dict[str, Any]:
        """One page of a ``Scan``; see :meth:`TransactionManager.scan`, :meth:`Transaction.scan`."""
        send, params = self._reader("scan", kwargs, isolation)
        return as_python(send(**params))

    def _low(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The request in the client's shape, or InvalidRequestError naming what boto3 refused."""
        if "TableName" in kwargs:
            raise InvalidRequestError("TableName is the table's own; leave it out", table=self.name)
        params: dict[str, Any] = {"TableName": self.name, **kwargs}
        names = dict(params.get("ExpressionAttributeNames") or {})
        python_values = dict(params.get("ExpressionAttributeValues") or {})
        try:
            self._render(params, names, python_values)
            for param in _ITEMS:
                if param in params:
                    params[param] = _to_low(params[param], param)
            if names:
                params["ExpressionAttributeNames"] = names
            if python_values:
                params["ExpressionAttributeValues"] = _to_low(
                    python_values, "ExpressionAttributeValues"
                )
        except (TypeError, ValueError, Boto3Error) as exc:
            raise InvalidRequestError(f"{exc} (boto3 cannot convert it)", table=self.name) from exc
        return params

    def _render(
        self, params: dict[str, Any], names: dict[str, str], python_values: dict[str, Any]
    ) -> None:
        """Each boto3 conditions object in ``params`` as text, its placeholders added."""
        builder = ConditionExpressionBuilder()
        for param in _CONDITIONS:
            condition = params.get(param)
            if not isinstance(condition, ConditionBase):
                continue
            built = builder.build_expression(
                condition, is_key_condition=param == "KeyConditionExpression"
            )
            clash = sorted(
                (set(built.attribute_name_placeholders) & set(names))
                | (set(built.attribute_value_placeholders) & set(python_values))
            )
            if clash:
                raise InvalidRequestError(
                    f"placeholders {clash} are both given and made by boto3's condition "
                    "builder; rename them",
                    table=self.name,
                )
            params[param] = built.condition_expression
            names.update(built.attribute_name_placeholders)
            python_values.update(built.attribute_value_placeholders)


def write_outside(manager: Outside, op: str, params: dict[str, Any]) -> Step[dict[str, Any]]:
    """One write outside any transaction: a native request guarded against locks
    (:func:`ddbtx.guard`); on a held item, a one-request transaction instead."""
    table = params["TableName"]
    key_types = yield from manager.schemas.types(table)
    wanted = build(op, params, key_types)  # type: ignore[arg-type]
    for _ in range(ATTEMPTS):
        try:
            response: dict[str, Any] = yield from request(f"{op}_item", **guard(params))
            return response
        except ConditionFailed:
            pass
        except ValidationFailed as exc:
            raise InvalidRequestError(
                f"DynamoDB rejected the request: {exc}",
                operation=op,
                dynamodb_message=exc.response["Error"].get("Message"),
                table=table,
            ) from exc
        # Held by a transaction, or the request's own condition is false: the item says which.
        found = yield from manager.protocol.read_item(table, wanted.key)
        if found is not None and s.ATTR_LOCK in found:
            return (yield from own_transaction(manager.new_transaction, op, params))  # type: ignore[arg-type]
        names = params.get("ExpressionAttributeNames")
        values = params.get("ExpressionAttributeValues")
        if wanted.condition and not Condition(wanted.condition, names).matches(found or {}, values):
            raise ConditionalCheckFailedError(
                "the request's condition is false",
                operation=op,
                item=strip(found) if found and wanted.old_on_failure else None,
                table=table,
                key=wanted.key,
            )
        # Free, and the condition holds now: a holder released the item meanwhile.
    raise TransactionError(f"an item in {table} kept changing under a write")


def _to_low(values: Any, param: str) -> dict[str, Any]:
    if not isinstance(values, Mapping):
        raise InvalidRequestError(f"{param} must be a dict of attribute names to values")
    out = {}
    for name, value in values.items():
        try:
            out[name] = _serializer.serialize(value)
        except TypeError as exc:
            raise TypeError(f"{param}[{name!r}]: {exc}") from exc
    return out


def as_python(response: Mapping[str, Any]) -> dict[str, Any]:
    """A response with every item in Python form, as boto3's resource returns it."""
    out = dict(response)
    for part in _ITEM_OUT:
        if part in out:
            out[part] = _from_low(out[part])
    if "Items" in out:
        out["Items"] = [_from_low(item) for item in out["Items"]]
    return out


def _from_low(item: Mapping[str, Any]) -> dict[str, Any]:
    return {name: _deserializer.deserialize(value) for name, value in item.items()}
