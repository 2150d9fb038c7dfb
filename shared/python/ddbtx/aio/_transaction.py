"""One transaction for asyncio: each coroutine runs one coordinator step."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

from .._base.effects import Step
from .._base.items import Item
from .._coordinator.reads import locked_batch_get, locked_read, next_page
from .._coordinator.steps import CoordinatorSteps
from ._table import Table

T = TypeVar("T")


async def pages(
    read: Callable[..., Awaitable[dict[str, Any]]], params: Mapping[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """Every page of a paged read, following ``LastEvaluatedKey``."""
    current: dict[str, Any] | None = dict(params)
    while current is not None:
        response = await read(**current)
        yield response
        current = next_page(current, response)


class Transaction(CoordinatorSteps):
    """:class:`ddbtx.Transaction` for asyncio: the same methods as coroutines. Make one
    with :meth:`ddbtx.aio.TransactionManager.begin`.

    Examples
    --------
    >>> tx = await tm.begin()                                           # doctest: +SKIP
    >>> await tx.update_item(TableName="Accounts", Key={"id": {"S": "a"}},
    ...                      UpdateExpression="ADD balance :n",
    ...                      ExpressionAttributeValues={":n": {"N": "-10"}})
    >>> await tx.commit()
    """

    manager: Any

    async def _run(self, step: Step[T]) -> T:
        result: T = await self.manager.drive(step)
        return result

    async def put_item(self, **params: Any) -> dict[str, Any]:
        """Put an item inside the transaction (as :meth:`ddbtx.Transaction.put_item`)."""
        return await self._run(self.request("put", params))

    async def update_item(self, **params: Any) -> dict[str, Any]:
        """Update an item inside the transaction (as :meth:`ddbtx.Transaction.update_item`)."""
        return await self._run(self.request("update", params))

    async def delete_item(self, **params: Any) -> dict[str, Any]:
        """Delete an item when the transaction commits."""
        return await self._run(self.request("delete", params))

    async def get_item(self, **params: Any) -> dict[str, Any]:
        """Read an item under a read lock; sees this transaction's own writes."""
        return await self._run(self.request("get", params))

    async def query(self, **params: Any) -> dict[str, Any]:
        """One page of a Query that read-locks every item it returns."""
        return await self._run(locked_read(self, "query", params))

    async def scan(self, **params: Any) -> dict[str, Any]:
        """One page of a Scan that read-locks every item it returns."""
        return await self._run(locked_read(self, "scan", params))

    def query_pages(self, **params: Any) -> AsyncIterator[dict[str, Any]]:
        """Every page of :meth:`query` (``async for``)."""
        return pages(self.query, params)

    def scan_pages(self, **params: Any) -> AsyncIterator[dict[str, Any]]:
        """Every page of :meth:`scan` (``async for``)."""
        return pages(self.scan, params)

    async def batch_get_item(self, **params: Any) -> dict[str, Any]:
        """``BatchGetItem`` that read-locks every key; nothing is left unprocessed."""
        return await self._run(locked_batch_get(self, params))

    async def lock_for_read(self, table: str, keys: list[Item]) -> list[Item | None]:
        """Read-lock every key of ``table``; each item's value under the lock, or None."""
        return await self._run(self.read_many(table, keys))

    async def write_all(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Several writes at once (``TransactItems``' shape); the results in order."""
        return await self._run(self.write_many(requests))

    def table(self, name: str) -> Table:
        """boto3's ``Table`` view of a data table inside this transaction (coroutines)."""
        return Table(self, name)  # type: ignore[arg-type]

    async def commit(self) -> None:
        """commit + complete: decide the transaction committed, then unlock every item."""
        await self._run(self.end.commit())

    async def rollback(self) -> None:
        """Roll back: restore every item to its state before the transaction and unlock it."""
        await self._run(self.end.rollback())

    async def delete(self) -> None:
        """delete: remove the completed TX record (the caller has noted the outcome)."""
        await self._run(self.end.delete())
