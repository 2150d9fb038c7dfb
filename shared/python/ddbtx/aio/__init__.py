"""ddbtx for asyncio: the same protocol steps as the sync API, run on an aiobotocore client.

Install with ``pip install '.[aio]'`` from a checkout. Every step is the one :mod:`ddbtx` runs
(:mod:`ddbtx._effects`); only the driver differs, so a sync and an async process work
on the same tables, locks and rows alike.

Available so far: :mod:`ddbtx.aio.locks` (:class:`~ddbtx.aio.locks.Mutex`,
:func:`~ddbtx.aio.locks.create_lock_table`). The transaction manager follows as its
steps move into the driver-free core.

Examples
--------
>>> from aiobotocore.session import get_session                    # doctest: +SKIP
>>> from ddbtx.aio.locks import Mutex
>>> async with get_session().create_client("dynamodb") as client:  # doctest: +SKIP
...     m = Mutex(client, "Locks", owner="worker-1")
...     token = await m.acquire_token("invoice-42")
"""
