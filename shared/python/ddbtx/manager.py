"""The transaction manager: begins, resumes and sweeps multi-item ACID transactions over
DynamoDB, and reads with isolation (docs/protocol.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypeVar, overload

from ._base.requests import KeyTypes
from ._coordinator.exactly import check_transaction_id
from ._coordinator.manager_core import (
    RETRIED,
    AlreadyCommitted,
    Attempts,
    ManagerCore,
    closing,
    deletes,
)
from ._coordinator.manager_reads import ManagerReads
from ._coordinator.manager_steps import sweep
from ._coordinator.oneshot import one_call
from ._coordinator.reads import Isolation
from ._coordinator.transaction import Transaction
from ._item_steps.body_rows import HEADER_SOFT_LIMIT, SPILL_BYTES
from ._item_steps.contention import Contention
from ._item_steps.writes import INLINE_IMAGE_LIMIT
from ._stores.completion import SweepOutcome

__all__ = [
    "HEADER_SOFT_LIMIT",
    "INLINE_IMAGE_LIMIT",
    "SPILL_BYTES",
    "AlreadyCommitted",
    "Contention",
    "Isolation",
    "SweepOutcome",
    "Transaction",
    "TransactionManager",
]

T = TypeVar("T")


class TransactionManager(ManagerCore[Transaction], ManagerReads):
    """Entry point: begins, resumes and sweeps transactions, and reads with isolation.

    Parameters
    ----------
    client
        A boto3 low-level DynamoDB client (thread-safe; shared by every step).
    transactions_table, images_table
        Names of the TX record table and the item image table.
    clock
        Wall clock in epoch seconds; stamps TX records for the sweeper.
    monotonic, sleep
        Used to judge how long a lock holder made no progress, and to wait.
    lock_wait
        Seconds a younger transaction waits for an older one's lock before it
        rolls itself back and raises :class:`TransactionConflictError`.
    stale_after
        Seconds without any change to a pending holder's TX record after which
        its lock is broken by rolling it back (on the monotonic clock).
    wound_patience
        Seconds an older transaction waits for a younger, running lock holder
        before rolling it back (wound-wait); a holder itself waiting for an
        older lock is rolled back at once (waiting could deadlock). The default
        is a few round trips of a saturated table (0.2 s showed no gain).
    contention
        :class:`Contention` policy, wound-wait by default.
    max_workers
        Bound on concurrent per-item steps (completion, catch-up); 1 is serial. By
        default as many as the client keeps HTTP connections, at most 32 (botocore's
        default client keeps 10; ``Config(max_pool_connections=32)`` gives the full
        width). Given larger than the client's pool, a warning says how to widen it.
    completed_ttl
        How long a completed TX record is kept before DynamoDB TTL may delete it.
    key_schemas
        Key attributes per data table, hash first, to skip ``DescribeTable``:
        names (``("pk",)``), or names mapped to types (``{"pk": "S"}``) so that
        key types are checked before anything is written.

    Examples
    --------
    >>> tm = TransactionManager(client, "Transactions", "TransactionImages")  # doctest: +SKIP
    >>> tm.create_tables()                                                    # doctest: +SKIP
    >>> with tm.transaction() as tx:                                          # doctest: +SKIP
    ...     tx.update_item(TableName="Accounts", Key={"id": {"S": "a"}},
    ...                    UpdateExpression="SET balance = balance - :n",
    ...                    ConditionExpression="balance >= :n",
    ...                    ExpressionAttributeValues={":n": {"N": "10"}})
    ...     tx.update_item(TableName="Accounts", Key={"id": {"S": "b"}},
    ...                    UpdateExpression="ADD balance :n",
    ...                    ExpressionAttributeValues={":n": {"N": "10"}})
    """

    @property
    def sleep(self) -> Callable[[float], None]:
        """How this manager waits: setting it changes every pause of its steps."""
        return self.protocol.sleep

    @sleep.setter
    def sleep(self, sleep: Callable[[float], None]) -> None:
        self.protocol.sleep = sleep

    def close(self) -> None:
        """Stop the pool of per-item step threads; a later step starts a new one."""
        self.protocol.close()

    def create_tables(self) -> None:
        """Create the transactions and images tables if missing (idempotent); wait until active."""
        from .tables import create_images_table, create_transactions_table

        create_transactions_table(self.client, self.transactions_table)
        create_images_table(self.client, self.images_table)

    def key_names(self, table: str) -> tuple[str, ...]:
        """The key attribute names of a data table (hash first), read once and cached."""
        return tuple(self.key_types(table))

    def key_types(self, table: str) -> KeyTypes:
        """A data table's key attributes (hash first) and their types, read once and cached."""
        return self.protocol.run(self.schemas.types(table))

    def begin(
        self, *, priority: str | None = None, transaction_id: str | None = None
    ) -> Transaction:
        """Start a transaction. Nothing is written until its first request.

        ``priority``: the id of an earlier attempt of the same work, whose
        wound-wait age the new transaction takes, so a retry cannot starve.

        ``transaction_id``: the caller's id for this work (at most 1,024 UTF-8
        bytes), making it exactly-once (docs/transactions.md): an id already
        used gets its transaction back. Pending, it is resumed (the same
        requests again are matched, not applied twice); committed, it has
        ``already_committed`` set and takes no requests; rolled back, a new
        one starts. Costs one write (the alias), made at once.

        Raises
        ------
        InvalidTransactionIdError
            ``transaction_id`` is not a non-empty str of at most 1,024 UTF-8 bytes.

        Examples
        --------
        >>> tx = tm.begin(transaction_id="order-42")                      # doctest: +SKIP
        >>> if not tx.already_committed:                                  # doctest: +SKIP
        ...     tx.put_item(TableName="Orders", Item={"id": {"S": "order-42"}})
        ...     tx.commit()
        """
        if transaction_id is not None:
            caller_id = check_transaction_id(transaction_id)
            return self.protocol.run(self.opener.by_caller_id(caller_id, self.new_id(priority)))
        return self.new_transaction(priority)

    def make(self, tx_id: str, transaction_id: str | None = None) -> Transaction:
        """A coordinator of transaction ``tx_id`` (nothing is sent)."""
        return Transaction(self, tx_id, transaction_id=transaction_id)

    @contextmanager
    def transaction(
        self,
        *,
        delete: bool | None = None,
        priority: str | None = None,
        transaction_id: str | None = None,
    ) -> Iterator[Transaction]:
        """Commit on normal exit; roll back and re-raise on an exception.

        The completed TX record is kept: late copies of the record's own writes
        fail on it (docs/protocol.md, "Fault model"), and ``completed_ttl`` or the
        sweeper's ``delete_after`` remove it later, with no request of the block's.
        With a ``transaction_id`` (see :meth:`begin`) it also remembers the id;
        check ``tx.already_committed``. ``delete=True`` deletes it on exit (one
        request more, and late copies of its writes are no longer fenced).

        Examples
        --------
        >>> with tm.transaction(transaction_id="order-42") as tx:        # doctest: +SKIP
        ...     if not tx.already_committed:
        ...         tx.put_item(TableName="Orders", Item={"id": {"S": "order-42"}})
        """
        delete = deletes(delete, transaction_id)
        tx = self.begin(priority=priority, transaction_id=transaction_id)
        try:
            yield tx
        except BaseException as exc:
            self.protocol.run(closing(tx, exc, delete))
            raise
        self.protocol.run(closing(tx, None, delete))

    @overload
    def run(self, work: Callable[[Transaction], T], *, attempts: int = 10) -> T: ...

    @overload
    def run(
        self, work: Callable[[Transaction], T], *, attempts: int = 10, transaction_id: str
    ) -> T | AlreadyCommitted: ...

    def run(
        self,
        work: Callable[[Transaction], T],
        *,
        attempts: int = 10,
        transaction_id: str | None = None,
    ) -> T | AlreadyCommitted:
        """Run ``work(tx)`` in a transaction and commit, retrying when contention aborts it.

        A :class:`TransactionRolledBackError` or :class:`TransactionConflictError`
        is retried with the first attempt's priority; ``work`` must be safe to
        run again. Any other error, or the last attempt's, propagates. Returns
        what ``work`` returned.

        With a ``transaction_id`` (see :meth:`begin`) the work is applied at
        most once under that id: if an attempt with it committed, ``work`` is
        not called and an :class:`AlreadyCommitted` is returned instead.

        Examples
        --------
        >>> def pay(tx):                                            # doctest: +SKIP
        ...     tx.update_item(TableName="Accounts", Key={"id": {"S": "a"}},
        ...                    UpdateExpression="ADD balance :n",
        ...                    ExpressionAttributeValues={":n": {"N": "-10"}})
        >>> tm.run(pay, attempts=5)                                 # doctest: +SKIP
        >>> outcome = tm.run(pay, transaction_id="payment-7")       # doctest: +SKIP
        >>> isinstance(outcome, AlreadyCommitted)                   # doctest: +SKIP
        False
        """
        tries = Attempts(attempts, transaction_id)
        while True:
            try:
                with self.transaction(**tries.options()) as tx:
                    return tries.began(tx) or work(tx)
            except RETRIED as exc:
                if done := tries.failed(exc):
                    return done

    def resume(self, tx_id: str) -> Transaction:
        """Take over a transaction started elsewhere (any process may); a decided one is
        completed before this returns."""
        return self.protocol.run(self.opener.resume(tx_id))

    def sweep(
        self, tx_id: str, *, rollback_after: timedelta, delete_after: timedelta
    ) -> SweepOutcome:
        """Move one TX record along: roll back if stale, complete if decided, delete if old.

        Ages run from the record's last change (``ts``); a pending record is rolled
        back only if unchanged since it was read.
        """
        return self.protocol.run(sweep(self.protocol, tx_id, rollback_after, delete_after))

    def transact_write(self, requests: list[dict[str, Any]]) -> str:
        """Write several items atomically; returns ``"native"`` or ``"protocol"``.

        ``requests`` has ``TransactItems``' shape (``{"Put": {...}}``,
        ``{"Update": {...}}``, ``{"Delete": {...}}``). Up to 100 uncontended
        writes (4 MB) commit in one ``TransactWriteItems`` call, each conditioned
        on carrying no protocol lock; otherwise the protocol runs, with
        identical results.

        Raises
        ------
        ConditionalCheckFailedError
            A request's own condition is false; nothing was written.
        InvalidRequestError
            A malformed request; nothing was written.

        Examples
        --------
        >>> tm.transact_write([                                   # doctest: +SKIP
        ...     {"Put": {"TableName": "Orders", "Item": {"id": {"S": "o-1"}}}},
        ...     {"Update": {"TableName": "Stock", "Key": {"sku": {"S": "x"}},
        ...                 "UpdateExpression": "ADD qty :m",
        ...                 "ExpressionAttributeValues": {":m": {"N": "-1"}}}},
        ... ])
        'native'
        """
        if self.protocol.run(one_call(self.schemas, requests)):
            return "native"
        with self.transaction() as tx:
            tx.write_all(requests)
        return "protocol"
