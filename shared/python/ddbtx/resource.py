"""boto3's ``Table`` resource shape over ddbtx: Python values in and out, conditions objects.

``tm.table("Accounts")`` and ``tx.table("Accounts")`` take the arguments of
``boto3.resource("dynamodb").Table("Accounts")``: ``Key={"id": "alice"}``,
``Decimal`` numbers, ``set``, ``bytes``, and ``Attr``/``Key`` objects of
``boto3.dynamodb.conditions`` for ``ConditionExpression``,
``FilterExpression`` and ``KeyConditionExpression``. Values go through boto3's
own ``TypeSerializer``/``TypeDeserializer`` and conditions through boto3's
own ``ConditionExpressionBuilder``, as boto3's resource does, so a request
means exactly what it means to boto3. Everything is converted before
anything is sent: a value boto3 cannot convert (a ``float``) is an
:class:`~ddbtx.InvalidRequestError` and nothing is written.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from typing import Any

from boto3.dynamodb.conditions import ConditionBase, ConditionExpressionBuilder
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from boto3.exceptions import Boto3Error

from . import schema as s
from ._conditions import Condition
from ._dynamo import call
from ._requests import KeyTypes, build
from .errors import (
    ConditionalCheckFailedError,
    ConditionFailed,
    InvalidRequestError,
    TransactionError,
    ValidationFailed,
)
from .guard import guard
from .reads import InTransaction, Isolation, locked_read

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
    """What a table outside any transaction uses of its :class:`~ddbtx.TransactionManager`
    (its reads are the manager's own: ``get_item``, ``query``, ``scan``)."""

    @property
    def client(self) -> Any: ...
    def key_types(self, table: str) -> KeyTypes: ...
    def run(self, work: Callable[[Any], Any]) -> Any: ...


@typing.runtime_checkable
class Inside(InTransaction, typing.Protocol):
    """What a table inside a transaction uses of it (:class:`ddbtx.Transaction`)."""

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

    # -- writes ------------------------------------------------------------------------

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
        params = self._low(kwargs)
        tx = self._tx
        if tx is not None:
            return _python(getattr(tx, f"{op}_item")(**params))
        manager: Outside = self._owner  # type: ignore[assignment]
        return _python(write_outside(manager, op, params))

    # -- reads -------------------------------------------------------------------------

    def get_item(self, *, isolation: Isolation | None = None, **kwargs: Any) -> dict[str, Any]:
        """``GetItem`` (``Key``, ``ProjectionExpression``, ...); outside a transaction at
        ``isolation`` (default ``COMMITTED``), inside one under a read lock."""
        params = self._low(kwargs)
        tx = self._tx
        if tx is None:
            return _python(self._manager_read("get_item", params, isolation))
        if isolation is not None:
            raise InvalidRequestError(
                "isolation is for reads outside a transaction", table=self.name
            )
        if set(params) <= {"TableName", "Key", "ConsistentRead"}:
            return _python(tx.get_item(**params))
        return _python(tx.p.run(locked_read(tx, "get", params)))

    def query(self, *, isolation: Isolation | None = None, **kwargs: Any) -> dict[str, Any]:
        """One page of a ``Query`` (``KeyConditionExpression=Key(...)...``); see
        :meth:`TransactionManager.query` and :meth:`Transaction.query`."""
        return _python(self._read("query", kwargs, isolation))

    def scan(self, *, isolation: Isolation | None = None, **kwargs: Any) -> dict[str, Any]:
        """One page of a ``Scan``; see :meth:`TransactionManager.scan`, :meth:`Transaction.scan`."""
        return _python(self._read("scan", kwargs, isolation))

    def _read(self, op: str, kwargs: dict[str, Any], isolation: Isolation | None) -> dict[str, Any]:
        params = self._low(kwargs)
        tx = self._tx
        if tx is None:
            return self._manager_read(op, params, isolation)
        if isolation is not None:
            raise InvalidRequestError(
                "isolation is for reads outside a transaction", table=self.name
            )
        result: dict[str, Any] = getattr(tx, op)(**params)
        return result

    def _manager_read(
        self, op: str, params: dict[str, Any], isolation: Isolation | None
    ) -> dict[str, Any]:
        manager: Outside = self._owner  # type: ignore[assignment]
        extra = {"isolation": isolation} if isolation is not None else {}
        result: dict[str, Any] = getattr(manager, op)(**params, **extra)
        return result

    # -- conversion --------------------------------------------------------------------

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
        """Each boto3 conditions object in ``params`` as its expression text, its
        placeholders added to ``names`` and ``python_values``."""
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


def write_outside(manager: Outside, op: str, params: dict[str, Any]) -> dict[str, Any]:
    """One write outside any transaction, isolated from them: a native request that fails on
    an item a transaction holds (:func:`ddbtx.guard`); such an item is written by a
    one-request transaction instead, which waits for or wounds the holder. A false
    condition costs the failed write and one read.
    """
    table = params["TableName"]
    request = build(op, params, manager.key_types(table))  # type: ignore[arg-type]
    for _ in range(ATTEMPTS):
        try:
            return call(manager.client, f"{op}_item", **guard(params))
        except ConditionFailed:
            pass
        except ValidationFailed as exc:
            raise InvalidRequestError(f"DynamoDB rejected the request: {exc}", table=table) from exc
        # Held by a transaction, or the request's own condition is false: the item says which.
        found = call(
            manager.client, "get_item", TableName=table, Key=request.key, ConsistentRead=True
        ).get("Item")
        if found is not None and s.ATTR_LOCK in found:
            result: dict[str, Any] = manager.run(lambda tx: getattr(tx, f"{op}_item")(**params))
            return result
        condition = request.condition
        names = params.get("ExpressionAttributeNames")
        values = params.get("ExpressionAttributeValues")
        if condition and not Condition(condition, names).matches(found or {}, values):
            raise ConditionalCheckFailedError(
                "the request's condition is false", table=table, key=request.key
            )
        # Free, and the condition holds now: a holder released the item meanwhile.
    raise TransactionError(f"an item in {table} kept changing under a write")


def _isolation_in_transaction(table: str) -> InvalidRequestError:
    return InvalidRequestError(
        "isolation is for reads outside a transaction (inside one, every read is locked)",
        table=table,
    )


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


def _python(response: Mapping[str, Any]) -> dict[str, Any]:
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
