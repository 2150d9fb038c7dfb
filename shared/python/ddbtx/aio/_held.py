"""What the asyncio lease and FIFO locks share (the steps of :mod:`ddbtx.locks`, driven)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, Self, TypeVar, cast

from .._base.effects import Step
from ..locks._held import HeldLockSteps, Keeper, LockClientSteps
from ._drive import drive

logger = logging.getLogger(__name__)

L = TypeVar("L", bound="HeldLock")
T = TypeVar("T")


class HeldLock(HeldLockSteps):
    """A granted lease or FIFO lock, for asyncio: as :class:`ddbtx.locks.HeldLock`,
    with :meth:`heartbeat` and :meth:`release` coroutines and ``async with``.

    Examples
    --------
    >>> async with lc.acquire("Moe", wait=30.0) as lock:  # doctest: +SKIP
    ...     await write(batch, fence=lock.fencing_token)
    """

    _io_type = asyncio.Lock
    _io: asyncio.Lock

    async def heartbeat(self) -> bool:
        """As :meth:`ddbtx.locks.HeldLock.heartbeat`."""
        async with self._io:
            renewed = await drive(self._renewal(), self._lc.client)
        return self._after_renewal(renewed)

    async def release(self) -> bool:
        """As :meth:`ddbtx.locks.HeldLock.release`."""
        async with self._io:
            return await drive(self._release(), self._lc.client)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if self._state == "held":
            await self.release()
        self._raise_if_lost(exc)

    async def _beat(self) -> None:
        try:
            await self.heartbeat()
        except Exception:
            self._beat_failed()


class HeartbeatTask(Keeper):
    """One task per lock client, renewing its locks; it ends while nothing is held."""

    def __init__(self, period: float, name: str) -> None:
        super().__init__(period, name)
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def add(self, lock: HeldLockSteps, beat: Callable[[], Any]) -> None:
        self._locks[lock] = beat
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        try:
            while not self._closed:
                await asyncio.sleep(self._period)
                if not self._locks:
                    return
                for beat in list(self._locks.values()):
                    await beat()
        finally:
            # No loop runs when the collector closes a task its loop left pending.
            with contextlib.suppress(RuntimeError):
                if self._task is asyncio.current_task():
                    self._task = None


class LockClient(LockClientSteps):
    """:class:`ddbtx.locks.LockClient` for asyncio: an aiobotocore client, an async ``sleep``,
    heartbeats as a task on the running event loop."""

    _keeper = HeartbeatTask

    async def _run(self, step: Step[T]) -> T:
        return await drive(step, self.client, self._sleep or asyncio.sleep)

    def held(self) -> list[HeldLock]:
        """The locks this client holds and heartbeats."""
        return [cast(HeldLock, lock) for lock in self._heartbeats.held()]

    async def close(self) -> None:
        """Stop heartbeating at once, then release every lock still held."""
        self._heartbeats.close()
        for lock in self.held():
            try:
                await lock.release()
            except Exception:  # keep releasing the others; the failed one lapses
                logger.warning("could not release %r on close", lock, exc_info=True)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class Acquiring(Generic[L]):
    """What ``acquire`` returns: await it, or hold the lock for an ``async with`` block."""

    def __init__(self, acquired: Awaitable[L]) -> None:
        self._acquired = acquired
        self._lock: L | None = None

    def __await__(self) -> Generator[Any, None, L]:
        return self._acquired.__await__()

    async def __aenter__(self) -> L:
        self._lock = await self._acquired
        return self._lock

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if self._lock is not None:
            await self._lock.__aexit__(exc_type, exc, tb)
