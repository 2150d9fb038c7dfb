"""Locks for asyncio, on an aiobotocore DynamoDB client: each class takes its namesake's
parameters in :mod:`ddbtx.locks`, and every method that sends a request is a coroutine."""

from __future__ import annotations

import math
from collections.abc import Awaitable
from typing import Any, cast

from ..locks._mutex_core import MutexSteps
from ..locks._rows import DEFAULT_NAMESPACE
from ..locks.admin import lock_table
from ..locks.fifo import FifoHeldSteps, FifoSteps
from ..locks.lease import LeaseClientSteps, LeaseLockSteps
from ._drive import drive
from ._held import Acquiring, HeldLock, LockClient

#: The asyncio twins of :mod:`ddbtx.locks`' names, and the awaitable an acquire returns.
__all__ = ["Acquiring", "HeldLock", "LockClient", "Mutex", "create_lock_table"]
__all__ += ["FifoHeldLock", "FifoLock", "LeaseLock", "LeaseLockClient"]


async def create_lock_table(client: Any, table: str) -> None:
    """Create the locks table if needed; as :func:`ddbtx.locks.create_lock_table`.

    Examples
    --------
    >>> await create_lock_table(client, "Locks")    # doctest: +SKIP
    """
    await drive(lock_table(table), client)


class Mutex(MutexSteps):
    """:class:`ddbtx.locks.Mutex` for asyncio (an aiobotocore client; the same rows).

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
        """As :meth:`ddbtx.locks.Mutex.acquire`."""
        return await drive(self._acquire_token(resource), self.client) is not None

    async def acquire_token(self, resource: str) -> int | None:
        """As :meth:`ddbtx.locks.Mutex.acquire_token`."""
        return await drive(self._acquire_token(resource), self.client)

    async def release(self, resource: str) -> bool:
        """As :meth:`ddbtx.locks.Mutex.release`."""
        return await drive(self._release(resource), self.client)


class LeaseLock(LeaseLockSteps, HeldLock):
    """A granted lease lock (see :class:`HeldLock`)."""


class LeaseLockClient(LeaseClientSteps, LockClient):
    """:class:`ddbtx.locks.LeaseLockClient` for asyncio (an aiobotocore client, an async
    ``sleep``; the same rows and line as sync clients).

    Examples
    --------
    >>> async with LeaseLockClient(client, "Locks", owner="host-a") as lc:  # doctest: +SKIP
    ...     async with lc.acquire("Moe", wait=30.0) as lock:
    ...         await update_customer("Moe", fence=lock.fencing_token)
    ...     lock = await lc.acquire("Moe")
    ...     await lock.release()
    """

    _lock_type = LeaseLock

    def acquire(
        self, resource: str, *, wait: float = math.inf, data: bytes | None = None
    ) -> Acquiring[LeaseLock]:
        """As :meth:`ddbtx.locks.LeaseLockClient.acquire`; await it or ``async with`` it."""
        step = self._acquire(resource, wait, data)
        return Acquiring(cast("Awaitable[LeaseLock]", self._run(step)))


class FifoHeldLock(FifoHeldSteps, HeldLock):
    """A granted FIFO lock; ``fencing_token`` is its ticket."""


class FifoLock(FifoSteps, LockClient):
    """:class:`ddbtx.locks.FifoLock` for asyncio (an aiobotocore client, an async ``sleep``;
    the same head row as sync clients).

    Examples
    --------
    >>> fifo = FifoLock(client, "Locks", owner="p1")                       # doctest: +SKIP
    >>> async with fifo.acquire("order-history", namespace="sum") as lock:  # doctest: +SKIP
    ...     total = await sum_orders(fence=lock.fencing_token)
    >>> await fifo.close()                                                 # doctest: +SKIP
    """

    _lock_type = FifoHeldLock

    def acquire(
        self, resource: str, *, namespace: str = DEFAULT_NAMESPACE, wait: float = math.inf
    ) -> Acquiring[FifoHeldLock]:
        """As :meth:`ddbtx.locks.FifoLock.acquire`; await it or ``async with`` it."""
        step = self._acquire(resource, namespace, wait)
        return Acquiring(cast("Awaitable[FifoHeldLock]", self._run(step)))
