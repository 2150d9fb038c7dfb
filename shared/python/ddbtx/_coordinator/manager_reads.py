"""The reads of a :class:`~ddbtx.transaction.TransactionManager` outside transactions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .._base.items import Item
from .._stores.completion import Completion
from .reads import Isolation, Reads
from .resource import Table


class ManagerReads:
    """Reads of one item or many, at an isolation level, in boto3's request shapes."""

    reads: Reads
    protocol: Completion

    def get_item(
        self,
        *,
        TableName: str,  # noqa: N803 - boto3's parameter names
        Key: Item,  # noqa: N803
        isolation: Isolation = Isolation.COMMITTED,
        ConsistentRead: bool = True,  # noqa: N803
        **params: Any,
    ) -> dict[str, Any]:
        """Read one item at the given isolation level; returns ``{"Item": ...}`` or ``{}``.

        Examples
        --------
        >>> tm.get_item(TableName="Accounts", Key={"id": {"S": "a"}})  # doctest: +SKIP
        {'Item': {'id': {'S': 'a'}, 'balance': {'N': '90'}}}
        """
        params.update(TableName=TableName, Key=Key, ConsistentRead=ConsistentRead)
        return self.protocol.run(self.reads.read("get", params, Isolation(isolation).value))

    def query(self, *, isolation: Isolation = Isolation.COMMITTED, **params: Any) -> dict[str, Any]:
        """One page of a Query (``Query``'s parameters) at an :class:`Isolation` level.

        Examples
        --------
        >>> tm.query(TableName="Orders", KeyConditionExpression="customer = :c",  # doctest: +SKIP
        ...          ExpressionAttributeValues={":c": {"S": "alice"}})["Items"]
        [{'customer': {'S': 'alice'}, 'order': {'S': 'o-1'}}]
        """
        return self.protocol.run(self.reads.read("query", params, Isolation(isolation).value))

    def scan(self, *, isolation: Isolation = Isolation.COMMITTED, **params: Any) -> dict[str, Any]:
        """One page of a Scan at the given isolation level (see :meth:`query`).

        Examples
        --------
        >>> tm.scan(TableName="Accounts", FilterExpression="balance < :z",  # doctest: +SKIP
        ...         ExpressionAttributeValues={":z": {"N": "0"}})["Count"]
        0
        """
        return self.protocol.run(self.reads.read("scan", params, Isolation(isolation).value))

    def query_pages(
        self, *, isolation: Isolation = Isolation.COMMITTED, **params: Any
    ) -> Iterator[dict[str, Any]]:
        """Every page of a Query, following ``LastEvaluatedKey`` (a generator).

        Examples
        --------
        >>> for page in tm.query_pages(TableName="Orders",  # doctest: +SKIP
        ...                            KeyConditionExpression="customer = :c",
        ...                            ExpressionAttributeValues={":c": {"S": "alice"}}):
        ...     print(page["Count"])
        """
        return self.reads.pages(lambda **p: self.query(isolation=isolation, **p), params)

    def scan_pages(
        self, *, isolation: Isolation = Isolation.COMMITTED, **params: Any
    ) -> Iterator[dict[str, Any]]:
        """Every page of a Scan, following ``LastEvaluatedKey`` (a generator)."""
        return self.reads.pages(lambda **p: self.scan(isolation=isolation, **p), params)

    def batch_get_item(
        self,
        *,
        RequestItems: dict[str, Any],  # noqa: N803 - boto3's parameter names
        isolation: Isolation = Isolation.COMMITTED,
        **params: Any,
    ) -> dict[str, Any]:
        """``BatchGetItem`` at the given isolation level: ``Responses`` and ``UnprocessedKeys``.

        Examples
        --------
        >>> tm.batch_get_item(RequestItems={"Accounts": {"Keys": [  # doctest: +SKIP
        ...     {"id": {"S": "a"}}, {"id": {"S": "b"}}]}})["Responses"]["Accounts"]
        [{'id': {'S': 'a'}, 'balance': {'N': '90'}}, {'id': {'S': 'b'}, 'balance': {'N': '10'}}]
        """
        params["RequestItems"] = RequestItems
        return self.protocol.run(self.reads.batch_get_item(params, Isolation(isolation).value))

    def table(self, name: str) -> Table:
        """A boto3-``Table``-like view of a data table: Python values, ``conditions`` objects.

        Examples
        --------
        >>> tm.table("Accounts").get_item(Key={"id": "a"})  # doctest: +SKIP
        {'Item': {'id': 'a', 'balance': Decimal('90')}}
        """
        return Table(self, name)  # type: ignore[arg-type]
