"""Locks for asyncio, on an aiobotocore DynamoDB client: the steps of :mod:`ddbtx.locks`.

Each class takes the same constructor parameters as its namesake in :mod:`ddbtx.locks`
(with an aiobotocore client), and every method that sends a request is a coroutine
with the same name, parameters, result and errors.
"""

from __future__ import annotations

from typing import Any

from ..locks._mutex_core import MutexSteps
from ..locks.admin import lock_table
from ._drive import drive

__all__ = ["Mutex", "create_lock_table"]


async def create_lock_table(client: Any, table: str) -> None:
    """Create the locks table if needed; as :func:`ddbtx.locks.create_lock_table`.

    Examples
    --------
    >>> await create_lock_table(client, "Locks")    # doctest: +SKIP
    """
    await drive(lock_table(table), client)


class Mutex(MutexSteps):
    """The non-blocking mutex of :class:`ddbtx.locks.Mutex`, for asyncio.

    Same parameters (``client`` an aiobotocore DynamoDB client), same rows: a sync
    and an async ``Mutex`` exclude each other on one table.

    Examples
    --------
    >>> m = Mutex(client, "Locks", owner="worker-1")      # doctest: +SKIP
    >>> token = await m.acquire_token("invoice-42")       # doctest: +SKIP
    >>> if token is not None:                             # doctest: +SKIP
    ...     try:
    ...         await bill("invoice-42", fence=token)
    ...     finally:
    ...         await m.release("invoice-42")
    """

    async def acquire(self, resource: str) -> bool:
        """Take the lock if it is free (or expired); ``False`` at once if anyone holds it."""
        return await drive(self._acquire(resource), self.client)

    async def acquire_token(self, resource: str) -> int | None:
        """Like :meth:`acquire`, returning the grant's fencing token (``None``: not granted)."""
        return await drive(self._acquire_token(resource), self.client)

    async def release(self, resource: str) -> bool:
        """Free the lock if this owner holds it; ``False`` (nothing changed) if not."""
        return await drive(self._release(resource), self.client)
