"""boto3's ``Table`` shape for asyncio: the sync :class:`~ddbtx._coordinator.resource.Table`, as
coroutines."""

from __future__ import annotations

from typing import Any

from .._coordinator import resource
from .._coordinator.reads import Isolation, locked_read
from .._coordinator.resource import as_python, write_outside


class Table(resource.Table):
    """A data table as boto3's ``Table`` resource shows it, for asyncio: made by
    :meth:`ddbtx.aio.TransactionManager.table` or :meth:`ddbtx.aio.Transaction.table`.

    Examples
    --------
    >>> async with tm.transaction() as tx:                                # doctest: +SKIP
    ...     await tx.table("Accounts").update_item(
    ...         Key={"id": "alice"}, UpdateExpression="ADD balance :n",
    ...         ExpressionAttributeValues={":n": -10})
    """

    async def put_item(self, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        """``PutItem``: ``Item``, ``ConditionExpression``, ``ReturnValues``, ..."""
        send, params = self._writer("put", kwargs)
        return as_python(await send(**params))

    async def update_item(self, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        """``UpdateItem``: ``Key``, ``UpdateExpression``, ``ConditionExpression``, ..."""
        send, params = self._writer("update", kwargs)
        return as_python(await send(**params))

    async def delete_item(self, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        """``DeleteItem``: ``Key``, ``ConditionExpression``, ``ReturnValues``, ..."""
        send, params = self._writer("delete", kwargs)
        return as_python(await send(**params))

    async def get_item(  # type: ignore[override]
        self, *, isolation: Isolation | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """``GetItem``; outside a transaction at ``isolation``, inside one read-locked."""
        send, params = self._reader("get_item", kwargs, isolation)
        return as_python(await send(**params))

    async def query(  # type: ignore[override]
        self, *, isolation: Isolation | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """One page of a ``Query``."""
        send, params = self._reader("query", kwargs, isolation)
        return as_python(await send(**params))

    async def scan(  # type: ignore[override]
        self, *, isolation: Isolation | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """One page of a ``Scan``."""
        send, params = self._reader("scan", kwargs, isolation)
        return as_python(await send(**params))

    def _outside(self, op: str, **params: Any) -> Any:
        manager: Any = self._owner
        return manager.drive(write_outside(manager, op, params))

    def _locked_get(self, tx: Any, **params: Any) -> Any:
        return tx.manager.drive(locked_read(tx, "get", params))
