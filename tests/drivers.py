"""The asyncio driver seen from sync tests: the same test body runs a sync object or an
async one, so each behaviour is checked once and through both drivers.

:class:`EventLoopThread` keeps an event loop on a thread of its own; :class:`Synced`
shows an async object (``ddbtx.aio``) through sync methods that run its coroutines on
that loop. Its aiobotocore client (:meth:`EventLoopThread.client`) takes the same
botocore event hooks as a boto3 client (request counts, chaos, lost answers).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ddbtx._base.dynamo import client_config
from ddbtx.local import LOCAL_CREDENTIALS, LocalDynamo

T = TypeVar("T")
#: A test's asyncio scenario: a coroutine function, run with the ``run`` fixture.
Scenario = Callable[[], Coroutine[Any, Any, Any]]

#: The drivers a parametrized test runs through.
DRIVERS = ("sync", "aio")
#: Seconds a coroutine may take before the test gives up on it.
TIMEOUT = 120.0


class AsyncOver:
    """A sync boto3 client seen as an asyncio one (each method a coroutine). moto's
    in-process mock serves botocore only, not aiobotocore; on moto the asyncio path
    runs the asyncio driver and API over this, on dynalite over aiobotocore itself."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.meta = client.meta

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)

        async def call(**params: Any) -> Any:
            return method(**params)

        return call


class EventLoopThread:
    """An event loop running on a daemon thread until :meth:`close`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="aio-driver", daemon=True
        )
        self._thread.start()
        self._clients: list[Any] = []

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and wait for its result (or its exception)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(TIMEOUT)

    def client(self, backend: LocalDynamo, max_attempts: int = 3) -> Any:
        """An aiobotocore DynamoDB client on ``backend``, configured as boto3's are."""
        from aiobotocore.session import get_session

        async def make() -> Any:
            context = get_session().create_client(
                "dynamodb",
                endpoint_url=backend.endpoint_url,
                config=client_config(max_attempts),
                **LOCAL_CREDENTIALS,
            )
            return await context.__aenter__()

        made = self.run(make())
        self._clients.append(made)
        return made

    def discard(self, client: Any) -> None:
        """Close ``client`` (one of :meth:`client`'s) now, as a process that died drops it."""
        if client in self._clients:
            self._clients.remove(client)
            self.run(client.close())

    def close(self) -> None:
        for made in self._clients:
            self.run(made.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(TIMEOUT)
        self.loop.close()


class Synced:
    """``target`` (an object of ``ddbtx.aio``) with its coroutine methods run to their
    end on ``loop``: ``Synced(aio_mutex, loop).acquire("r")`` is ``await
    aio_mutex.acquire("r")``. An async iterator a method returns (``query_pages``) is
    shown as an iterator, and an async context manager (``transaction()``) as a context
    manager. Every other attribute is the target's own. ``deep``: an object of
    ``ddbtx.aio`` such a method returns is shown the same way (a manager's ``begin``
    gives a transaction with sync methods)."""

    def __init__(self, target: Any, loop: EventLoopThread, *, deep: bool = False) -> None:
        self._target = target
        self._loop = loop
        self._deep = deep

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not callable(attribute) or inspect.isclass(attribute):
            return attribute
        if not inspect.iscoroutinefunction(attribute):

            def call(*args: Any, **kwargs: Any) -> Any:
                result = attribute(*args, **kwargs)
                if hasattr(result, "__anext__"):
                    return self._iterate(result)
                # Only a plain async context manager: an awaitable one (a lease lock's
                # acquire) is the caller's to await.
                plain = hasattr(result, "__aenter__") and not inspect.isawaitable(result)
                return self._within(result) if plain else result

            return call

        def run(*args: Any, **kwargs: Any) -> Any:
            return self._shown(self._loop.run(attribute(*args, **kwargs)))

        return run

    def _shown(self, result: Any) -> Any:
        if self._deep and type(result).__module__.startswith("ddbtx.aio"):
            return Synced(result, self._loop, deep=True)
        return result

    def _iterate(self, iterator: Any) -> Iterator[Any]:
        while True:
            try:
                yield self._loop.run(iterator.__anext__())
            except StopAsyncIteration:
                return

    @contextmanager
    def _within(self, manager: Any) -> Iterator[Any]:
        value = self._loop.run(manager.__aenter__())
        try:
            yield self._shown(value)
        except BaseException as exc:
            if not self._loop.run(manager.__aexit__(type(exc), exc, exc.__traceback__)):
                raise
        else:
            self._loop.run(manager.__aexit__(None, None, None))

    def in_thread(self, work: Callable[[Any], T]) -> Callable[[Any], Coroutine[Any, Any, T]]:
        """``work`` (sync, taking a shown object) as the async callable an ``ddbtx.aio``
        method takes (``run``'s work): it runs on a worker thread, so its sync calls
        reach the loop while the loop waits for it."""

        async def work_async(target: Any) -> T:
            return await asyncio.to_thread(work, self._shown(target))

        return work_async
