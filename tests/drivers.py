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
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ddbtx._dynamo import client_config
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

    def close(self) -> None:
        for made in self._clients:
            self.run(made.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(TIMEOUT)
        self.loop.close()


class Synced:
    """``target`` (an object of ``ddbtx.aio``) with its coroutine methods run to their
    end on ``loop``: ``Synced(aio_mutex, loop).acquire("r")`` is ``await
    aio_mutex.acquire("r")``. Every other attribute is the target's own. ``deep``: an
    object of ``ddbtx.aio`` such a method returns is shown the same way (a manager's
    ``begin`` gives a transaction with sync methods)."""

    def __init__(self, target: Any, loop: EventLoopThread, *, deep: bool = False) -> None:
        self._target = target
        self._loop = loop
        self._deep = deep

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        def run(*args: Any, **kwargs: Any) -> Any:
            result = self._loop.run(attribute(*args, **kwargs))
            if self._deep and type(result).__module__.startswith("ddbtx.aio"):
                return Synced(result, self._loop, deep=True)
            return result

        return run
