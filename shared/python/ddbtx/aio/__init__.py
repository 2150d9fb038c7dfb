"""ddbtx for asyncio (``pip install '.[aio]'``): the sync API's steps and classes, with
coroutines, on an aiobotocore client; :mod:`ddbtx.aio.locks` has the locks.

Examples
--------
>>> from aiobotocore.session import get_session                    # doctest: +SKIP
>>> from ddbtx.aio import TransactionManager
>>> from ddbtx.aio.locks import Mutex
>>> async with get_session().create_client("dynamodb") as client:  # doctest: +SKIP
...     m = Mutex(client, "Locks", owner="worker-1")
...     token = await m.acquire_token("invoice-42")
...     tm = TransactionManager(client, "Transactions", "TransactionImages")
...     async with tm.transaction() as tx:
...         await tx.put_item(TableName="Orders", Item={"id": {"S": "o-1"}})
"""

from .._coordinator.manager_core import AlreadyCommitted
from .._coordinator.reads import Isolation
from ._table import Table
from ._transaction import Transaction
from .manager import TransactionManager

__all__ = ["AlreadyCommitted", "Isolation", "Table", "Transaction", "TransactionManager"]
