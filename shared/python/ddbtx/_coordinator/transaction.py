"""One transaction driven with blocking calls: each method runs one coordinator step."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .._base.items import Item
from .reads import locked_batch_get, locked_read
from .resource import Table
from .steps import CoordinatorSteps


class Transaction(CoordinatorSteps):
    """One multi-item transaction. Use :meth:`TransactionManager.begin` to make one.

    Each request returns once its item is locked and its write applied, so its
    errors surface from that call. Any number of coordinators may work on one
    transaction (:meth:`TransactionManager.resume`). Begun with a
    ``transaction_id``, ``already_committed`` tells that an earlier attempt with
    it committed (the transaction then takes no requests).
    """

    def put_item(self, **params: Any) -> dict[str, Any]:
        """Put an item inside the transaction (``Item``, ``ConditionExpression``, ...)."""
        return self.p.run(self.request("put", params))

    def update_item(self, **params: Any) -> dict[str, Any]:
        """Update an item inside the transaction (``Key``, ``UpdateExpression``, ...)."""
        return self.p.run(self.request("update", params))

    def delete_item(self, **params: Any) -> dict[str, Any]:
        """Delete an item when the transaction commits (``Key``, ``ConditionExpression``, ...)."""
        return self.p.run(self.request("delete", params))

    def get_item(self, **params: Any) -> dict[str, Any]:
        """Read an item under a read lock; sees this transaction's own writes."""
        return self.p.run(self.request("get", params))

    def query(self, **params: Any) -> dict[str, Any]:
        """One page of a Query that read-locks every item it returns (repeatable read).

        Each item is judged again on its value under the lock; own writes are
        seen; phantoms are not locked (docs/transactions.md).

        Examples
        --------
        >>> tx.query(TableName="Orders", KeyConditionExpression="customer = :c",  # doctest: +SKIP
        ...          ExpressionAttributeValues={":c": {"S": "alice"}})["Count"]
        2
        """
        return self.p.run(locked_read(self, "query", params))

    def scan(self, **params: Any) -> dict[str, Any]:
        """One page of a Scan that read-locks every item it returns (see :meth:`query`)."""
        return self.p.run(locked_read(self, "scan", params))

    def query_pages(self, **params: Any) -> Iterator[dict[str, Any]]:
        """Every page of :meth:`query`, following ``LastEvaluatedKey`` (a generator)."""
        return self.manager.reads.pages(self.query, params)

    def scan_pages(self, **params: Any) -> Iterator[dict[str, Any]]:
        """Every page of :meth:`scan`, following ``LastEvaluatedKey`` (a generator)."""
        return self.manager.reads.pages(self.scan, params)

    def batch_get_item(self, **params: Any) -> dict[str, Any]:
        """``BatchGetItem`` that read-locks every key; nothing is left unprocessed."""
        return self.p.run(locked_batch_get(self, params))

    def lock_for_read(self, table: str, keys: list[Item]) -> list[Item | None]:
        """Read-lock every key of ``table`` at once; each item's value under the lock (as
        this transaction sees it), or None where there is none."""
        return self.p.run(self.read_many(table, keys))

    def table(self, name: str) -> Table:
        """A boto3-``Table``-like view of a data table inside this transaction.

        Examples
        --------
        >>> tx.table("Accounts").update_item(Key={"id": "a"},  # doctest: +SKIP
        ...     UpdateExpression="ADD balance :n", ExpressionAttributeValues={":n": -10})
        {}
        """
        return Table(self, name)

    def write_all(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Several writes at once: one add for all, then every lock and write concurrently.

        ``requests`` has ``TransactItems``' shape (``{"Put": {...}}``, ...); the
        results come back in order.

        Examples
        --------
        >>> tx.write_all([{"Put": {"TableName": "T", "Item": {"pk": {"S": "a"}}}},  # doctest: +SKIP
        ...               {"Delete": {"TableName": "T", "Key": {"pk": {"S": "b"}}}}])
        [{}, {}]
        """
        return self.p.run(self.write_many(requests))

    def commit(self) -> None:
        """commit + complete: decide the transaction committed, then unlock every item.

        Every request the record names is caught up first (locked and applied).

        Raises
        ------
        TransactionRolledBackError
            If another coordinator rolled it back first.
        """
        self.p.run(self.end.commit())

    def rollback(self) -> None:
        """Roll back: restore every item to its state before the transaction and unlock it."""
        self.p.run(self.end.rollback())

    def delete(self) -> None:
        """delete: remove the completed TX record (the caller has noted the outcome)."""
        self.p.run(self.end.delete())
