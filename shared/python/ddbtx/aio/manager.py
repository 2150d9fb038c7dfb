"""The transaction manager for asyncio: :class:`ddbtx.TransactionManager`'s methods as
coroutines, each running the same steps on an aiobotocore client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, TypeVar, Unpack, overload

from .._base.effects import Step
from .._base.requests import KeyTypes
from .._coordinator.exactly import check_transaction_id
from .._coordinator.manager_core import (
    RETRIED,
    AlreadyCommitted,
    Attempts,
    ManagerCore,
    Settings,
    closing,
    deletes,
)
from .._coordinator.manager_steps import sweep
from .._coordinator.oneshot import one_call
from .._coordinator.reads import Isolation
from .._stores.completion import SweepOutcome
from ..tables import images_table, transactions_table
from ._drive import drive
from ._table import Table
from ._transaction import Transaction, pages

T = TypeVar("T")


def _never_blocks(seconds: float) -> None:
    raise RuntimeError("the asyncio manager's steps pause through its driver, never blocking")


class TransactionManager(ManagerCore[Transaction]):
    """:class:`ddbtx.TransactionManager` for asyncio, on an aiobotocore DynamoDB client.

    Takes the same parameters; ``sleep`` is a coroutine function (``asyncio.sleep``).
    Sync and asyncio coordinators may work on one transaction (the same steps run).

    Examples
    --------
    >>> from aiobotocore.session import get_session                    # doctest: +SKIP
    >>> async with get_session().create_client("dynamodb") as client:  # doctest: +SKIP
    ...     tm = TransactionManager(client, "Transactions", "TransactionImages")
    ...     async with tm.transaction() as tx:
    ...         await tx.update_item(TableName="Accounts", Key={"id": {"S": "a"}},
    ...                              UpdateExpression="ADD balance :n",
    ...                              ExpressionAttributeValues={":n": {"N": "-10"}})
    """

    sized_pool = False

    def __init__(
        self,
        client: Any,
        transactions_table: str = "Transactions",
        images_table: str = "TransactionImages",
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        **settings: Unpack[Settings],
    ) -> None:
        super().__init__(client, transactions_table, images_table, sleep=_never_blocks, **settings)
        self.sleep = sleep

    def make(self, tx_id: str, transaction_id: str | None = None) -> Transaction:
        """A coordinator of transaction ``tx_id`` (nothing is sent)."""
        return Transaction(self, tx_id, transaction_id=transaction_id)

    async def drive(self, step: Step[T]) -> T:
        """Run a protocol step on this manager's client and sleep (the asyncio driver)."""
        return await drive(step, self.client, self.sleep)

    async def create_tables(self) -> None:
        """Create the transactions and images tables if missing; wait until active."""
        await self.drive(transactions_table(self.transactions_table))
        await self.drive(images_table(self.images_table))

    async def key_types(self, table: str) -> KeyTypes:
        """A data table's key attributes (hash first) and their types, read once and cached."""
        return await self.drive(self.schemas.types(table))

    async def key_names(self, table: str) -> tuple[str, ...]:
        """The key attribute names of a data table (hash first), read once and cached."""
        return tuple(await self.key_types(table))

    async def begin(
        self, *, priority: str | None = None, transaction_id: str | None = None
    ) -> Transaction:
        """Start a transaction, as :meth:`ddbtx.TransactionManager.begin`."""
        if transaction_id is not None:
            caller_id = check_transaction_id(transaction_id)
            return await self.drive(self.opener.by_caller_id(caller_id, self.new_id(priority)))
        return self.new_transaction(priority)

    @asynccontextmanager
    async def transaction(
        self,
        *,
        delete: bool | None = None,
        priority: str | None = None,
        transaction_id: str | None = None,
    ) -> AsyncIterator[Transaction]:
        """Commit on normal exit; roll back and re-raise on an exception (``async with``)."""
        delete = deletes(delete, transaction_id)
        tx = await self.begin(priority=priority, transaction_id=transaction_id)
        try:
            yield tx
        except BaseException as exc:
            await self.drive(closing(tx, exc, delete))
            raise
        await self.drive(closing(tx, None, delete))

    @overload
    async def run(
        self, work: Callable[[Transaction], Awaitable[T]], *, attempts: int = 10
    ) -> T: ...

    @overload
    async def run(
        self,
        work: Callable[[Transaction], Awaitable[T]],
        *,
        attempts: int = 10,
        transaction_id: str,
    ) -> T | AlreadyCommitted: ...

    async def run(
        self,
        work: Callable[[Transaction], Awaitable[T]],
        *,
        attempts: int = 10,
        transaction_id: str | None = None,
    ) -> T | AlreadyCommitted:
        """``await work(tx)`` and commit, as :meth:`ddbtx.TransactionManager.run`."""
        tries = Attempts(attempts, transaction_id)
        while True:
            try:
                async with self.transaction(**tries.options()) as tx:
                    return tries.began(tx) or await work(tx)
            except RETRIED as exc:
                if done := tries.failed(exc):
                    return done

    async def resume(self, tx_id: str) -> Transaction:
        """Take over a transaction started elsewhere (any process, either driver)."""
        return await self.drive(self.opener.resume(tx_id))

    async def sweep(
        self, tx_id: str, *, rollback_after: timedelta, delete_after: timedelta
    ) -> SweepOutcome:
        """Move one TX record along, as :meth:`ddbtx.TransactionManager.sweep`."""
        return await self.drive(sweep(self.protocol, tx_id, rollback_after, delete_after))

    async def transact_write(self, requests: list[dict[str, Any]]) -> str:
        """Write several items atomically, as :meth:`ddbtx.TransactionManager.transact_write`."""
        if await self.drive(one_call(self.schemas, requests)):
            return "native"
        async with self.transaction() as tx:
            await tx.write_all(requests)
        return "protocol"

    def table(self, name: str) -> Table:
        """boto3's ``Table`` view of a data table (its methods are coroutines)."""
        return Table(self, name)

    async def get_item(
        self,
        *,
        TableName: str,  # noqa: N803 - boto3's parameter names
        Key: dict[str, Any],  # noqa: N803
        isolation: Isolation = Isolation.COMMITTED,
        ConsistentRead: bool = True,  # noqa: N803
        **params: Any,
    ) -> dict[str, Any]:
        """Read one item at the given isolation level; ``{"Item": ...}`` or ``{}``."""
        params.update(TableName=TableName, Key=Key, ConsistentRead=ConsistentRead)
        return await self.drive(self.reads.read("get", params, Isolation(isolation).value))

    async def query(
        self, *, isolation: Isolation = Isolation.COMMITTED, **params: Any
    ) -> dict[str, Any]:
        """One page of a Query at the given isolation level."""
        return await self.drive(self.reads.read("query", params, Isolation(isolation).value))

    async def scan(
        self, *, isolation: Isolation = Isolation.COMMITTED, **params: Any
    ) -> dict[str, Any]:
        """One page of a Scan at the given isolation level."""
        return await self.drive(self.reads.read("scan", params, Isolation(isolation).value))

    def query_pages(
        self, *, isolation: Isolation = Isolation.COMMITTED, **params: Any
    ) -> AsyncIterator[dict[str, Any]]:
        """Every page of a Query (``async for``)."""
        return pages(lambda **p: self.query(isolation=isolation, **p), params)

    def scan_pages(
        self, *, isolation: Isolation = Isolation.COMMITTED, **params: Any
    ) -> AsyncIterator[dict[str, Any]]:
        """Every page of a Scan (``async for``)."""
        return pages(lambda **p: self.scan(isolation=isolation, **p), params)

    async def batch_get_item(
        self,
        *,
        RequestItems: dict[str, Any],  # noqa: N803 - boto3's parameter names
        isolation: Isolation = Isolation.COMMITTED,
        **params: Any,
    ) -> dict[str, Any]:
        """``BatchGetItem`` at the given isolation level."""
        params["RequestItems"] = RequestItems
        return await self.drive(self.reads.batch_get_item(params, Isolation(isolation).value))
