"""Multi-item ACID transactions over DynamoDB: the public API.

See the README for the protocol and :mod:`ddbtx._protocol` for its step table.
The pieces: :class:`~ddbtx._view.RecordView` owns this coordinator's view of
the TX record and every write to it; :class:`~ddbtx._steps.ItemSteps` locks and
applies; :mod:`ddbtx._contention` handles items other transactions hold.
"""

from __future__ import annotations

import enum
import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar, overload

from . import schema as s
from ._contention import Contender, Contention
from ._dynamo import call
from ._exactly import Replay, begin_by_id, check_transaction_id, join, same_request
from ._items import Item, is_locked_by, item_size, strip, write_marker
from ._protocol import Protocol, SweepOutcome, new_tx_id, user_view
from ._record import Header, new_lock_value, new_nonce
from ._requests import KeyTypes, Op, Request, build
from ._steps import INLINE_IMAGE_LIMIT, ItemSteps, _return_values, _wrap
from ._view import HEADER_SOFT_LIMIT, SPILL_BYTES, AddRefused, Local, RecordView, _Decided
from .errors import (
    ConditionalCheckFailedError,
    DuplicateRequestError,
    DynamoDBError,
    InvalidRequestError,
    TableNotFound,
    TransactionCommittedError,
    TransactionConflictError,
    TransactionError,
    TransactionIdReusedError,
    TransactionNotFoundError,
    TransactionRolledBackError,
    ValidationFailed,
)
from .reads import Reads, locked_batch_get, locked_read
from .resource import Table

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

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Isolation(enum.Enum):
    """Read isolation levels of :meth:`TransactionManager.get_item` and the reads of many
    items (``query``, ``scan``, ``batch_get_item``; README: "Reads of many items").

    ``UNCOMMITTED`` reads the item as it is, uncommitted writes included.
    ``COMMITTED`` never returns uncommitted data: a locked item that has a write
    applied is read from its saved image. ``SERIALIZABLE`` takes a read lock in a
    short transaction of its own.
    """

    UNCOMMITTED = "uncommitted"
    COMMITTED = "committed"
    SERIALIZABLE = "serializable"


@dataclass(frozen=True)
class AlreadyCommitted:
    """What :meth:`TransactionManager.run` returns when an earlier attempt with the same
    ``transaction_id`` committed: the work was not run again.

    Attributes
    ----------
    transaction_id
        The caller's id.
    tx_id
        The internal id of the transaction that committed it.
    """

    transaction_id: str
    tx_id: str


class TransactionManager:
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
        its lock is broken by rolling it back (judged on the monotonic clock).
    wound_patience
        Seconds an older transaction waits for a younger, running lock holder
        before it rolls the holder back (wound-wait). A holder that is itself
        waiting for an older transaction's lock is rolled back at once, since
        waiting for it could deadlock. 0 wounds every younger holder at once.
        The default is a few round trips of a saturated table: a younger holder
        that is running usually commits within it (0.2 s showed no gain).
    contention
        :class:`Contention` policy, wound-wait by default.
    max_workers
        Bound on concurrent per-item steps (completion, catch-up); 1 is serial.
    finished_ttl
        How long a finished TX record is kept before DynamoDB TTL may delete it.
    key_schemas
        Key attributes per data table, hash first, to skip ``DescribeTable``:
        names (``("pk",)``), or names mapped to types (``{"pk": "S"}``) so that
        key types are checked before anything is written, as they are for a
        table whose schema is read.

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

    def __init__(
        self,
        client: Any,
        transactions_table: str = "Transactions",
        images_table: str = "TransactionImages",
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        lock_wait: float = 10.0,
        stale_after: float = 30.0,
        wound_patience: float = 0.5,
        contention: Contention = Contention.WOUND_WAIT,
        max_workers: int = 32,
        finished_ttl: timedelta = timedelta(days=1),
        key_schemas: dict[str, Sequence[str] | KeyTypes] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if lock_wait < 0 or stale_after <= 0 or wound_patience < 0 or max_workers < 1:
            raise ValueError(
                "lock_wait >= 0, stale_after > 0, wound_patience >= 0 and max_workers >= 1 "
                "are required"
            )
        try:
            pool = client.meta.config.max_pool_connections
        except Exception:  # not a botocore client (e.g. a test double): nothing to size
            pool = None
        if isinstance(pool, int) and pool < max_workers:
            # Steps beyond the pool open and drop a connection each: slower, and noisy in logs.
            logger.warning(
                "the client keeps %d HTTP connections but max_workers is %d; create it with "
                "botocore Config(max_pool_connections=%d)",
                pool,
                max_workers,
                max_workers,
            )
        self.client = client
        self.transactions_table = transactions_table
        self.images_table = images_table
        self.clock = clock
        self.monotonic = monotonic
        self.sleep = sleep
        self.lock_wait = lock_wait
        self.stale_after = stale_after
        self.wound_patience = wound_patience
        self.contention = Contention(contention)
        self.rng = rng or random.Random()
        self._keys: dict[str, KeyTypes] = {
            table: keys if isinstance(keys, Mapping) else dict.fromkeys(keys)
            for table, keys in (key_schemas or {}).items()
        }
        self._put_paths: dict[str, str] = {}  # per table: did the last put insert or replace?
        self.protocol = self.p = Protocol(
            client,
            transactions_table,
            images_table,
            clock=clock,
            max_workers=max_workers,
            finished_ttl_seconds=int(finished_ttl.total_seconds()),
            sleep=sleep,
        )
        self.reads = Reads(self)

    def close(self) -> None:
        """Stop the pool of per-item step threads; a later step starts a new one."""
        self.protocol.close()

    # -- tables ----------------------------------------------------------------

    def create_tables(self) -> None:
        """Create the transactions and images tables if missing; wait until active.

        Idempotent, on-demand billing, TTL enabled where the API exists. For
        local and development use: in AWS the CDK app provisions the tables.
        """
        from .tables import create_images_table, create_transactions_table

        create_transactions_table(self.client, self.transactions_table)
        create_images_table(self.client, self.images_table)

    def key_names(self, table: str) -> tuple[str, ...]:
        """The key attribute names of a data table (hash first), read once and cached."""
        return tuple(self.key_types(table))

    def key_types(self, table: str) -> KeyTypes:
        """A data table's key attributes (hash first) and their types, read once and cached."""
        keys = self._keys.get(table)
        if keys is None:
            try:
                desc = call(self.client, "describe_table", TableName=table)["Table"]
            except TableNotFound as exc:
                raise InvalidRequestError(f"table {table!r} does not exist", table=table) from exc
            schema_ = sorted(desc["KeySchema"], key=lambda k: k["KeyType"] != "HASH")
            types = {a["AttributeName"]: a["AttributeType"] for a in desc["AttributeDefinitions"]}
            keys = {k["AttributeName"]: types.get(k["AttributeName"]) for k in schema_}
            self._keys[table] = keys
        return keys

    # -- transactions ----------------------------------------------------------

    def begin(
        self, *, priority: str | None = None, transaction_id: str | None = None
    ) -> Transaction:
        """Start a transaction. Nothing is written until its first request.

        ``priority``: the id of an earlier attempt of the same work. The new
        transaction is then as old as that attempt under wound-wait, so a retry
        after being wounded moves up instead of starting last again, and cannot
        starve. Its id is new and unique.

        ``transaction_id``: the caller's id for this work (at most 1,024 UTF-8
        bytes), making it exactly-once: an attempt with an id already used gets
        that id's transaction back instead of a new one. Pending, it is resumed
        (make the same requests again: they are matched with the recorded ones,
        not applied twice); committed, it comes back with ``already_committed``
        set and takes no requests; rolled back, a new transaction starts. One
        write (the alias) more than :meth:`begin` without an id, made at once.
        The id is remembered as long as the transaction's record is kept
        (README: exactly-once ids). Wound-wait ages never come from it.

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
            return begin_by_id(self, check_transaction_id(transaction_id), priority)
        return Transaction(self, self._new_id(priority))

    def _new_id(self, priority: str | None) -> str:
        clock_ns = lambda: int(self.clock() * 1e9)  # noqa: E731
        return new_tx_id(clock_ns, priority=priority)

    @contextmanager
    def transaction(
        self,
        *,
        delete: bool | None = None,
        priority: str | None = None,
        transaction_id: str | None = None,
    ) -> Iterator[Transaction]:
        """Commit on normal exit; roll back and re-raise on an exception.

        With ``delete`` (the default without a ``transaction_id``) the finished
        TX record is deleted on exit, since the caller has seen the outcome.
        With a ``transaction_id`` (see :meth:`begin`) the record is kept, since
        it is what remembers the id; check ``tx.already_committed`` in the block.
        ``priority`` is as for :meth:`begin`.

        Examples
        --------
        >>> with tm.transaction(transaction_id="order-42") as tx:        # doctest: +SKIP
        ...     if not tx.already_committed:
        ...         tx.put_item(TableName="Orders", Item={"id": {"S": "order-42"}})
        """
        if delete is None:
            delete = transaction_id is None
        elif delete and transaction_id is not None:
            raise ValueError("delete=True would forget the transaction_id as soon as it commits")
        tx = self.begin(priority=priority, transaction_id=transaction_id)
        try:
            yield tx
        except BaseException as exc:
            try:
                # A reuse found at a request wrote nothing: the transaction is another work's.
                if tx.state == s.STATE_PENDING and not isinstance(exc, TransactionIdReusedError):
                    tx.rollback()
                if delete:
                    tx.delete()
            except Exception:  # the caller's exception matters more; the sweeper finishes
                logger.exception("rollback of %s on exception did not complete", tx.id)
            raise
        tx.commit()
        if delete:
            tx.delete()

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

        A retry follows a :class:`TransactionRolledBackError` (another
        transaction rolled this one back) or a :class:`TransactionConflictError`
        (an older one kept the item locked), and begins with the first
        attempt's priority, so under wound-wait it only gets older. ``work``
        must be safe to run again. Any other error, or the last attempt's,
        propagates. Returns what ``work`` returned.

        With a ``transaction_id`` (see :meth:`begin`) the work is applied at
        most once under that id, across processes and retries: if an earlier
        attempt committed it, ``work`` is not called and an
        :class:`AlreadyCommitted` is returned instead (also when another
        attempt with the id commits while this one runs); a pending one is
        resumed with ``work`` run again; a rolled-back one starts over.

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
        if attempts < 1:
            raise ValueError("attempts >= 1 is required")
        priority: str | None = None
        for attempt in range(1, attempts + 1):
            tx: Transaction | None = None
            try:
                with self.transaction(priority=priority, transaction_id=transaction_id) as tx:
                    priority = priority or tx.id
                    if tx.already_committed:
                        return AlreadyCommitted(tx.transaction_id or "", tx.id)
                    result = work(tx)
                return result
            except TransactionCommittedError as exc:
                # Another attempt with the same id committed this transaction meanwhile.
                if tx is None or transaction_id is None or exc.tx_id != tx.id:
                    raise
                return AlreadyCommitted(transaction_id, tx.id)
            except (TransactionRolledBackError, TransactionConflictError):
                if attempt == attempts:
                    raise
        raise AssertionError("unreachable")

    def resume(self, tx_id: str) -> Transaction:
        """Take over a transaction started elsewhere (any process may).

        A pending transaction can then receive more requests, commit or roll
        back; a decided one is driven to completion before this returns.
        """
        header = self.protocol.records.read_header(tx_id)
        if header is None:
            raise TransactionNotFoundError("no such transaction", tx_id=tx_id)
        return self._adopt(header)

    def _adopt(self, header: Header) -> Transaction:
        """A coordinator for the transaction ``header`` was read from; a decided one completed."""
        tx = Transaction(self, header.tx_id, transaction_id=header.caller_id)
        tx.record.adopt(header)
        for table in {entry.table for entry in header.entries.values()}:
            self.key_names(table)  # further requests on these tables are validated without a call
        if header.state != s.STATE_PENDING:
            self.protocol.complete(header)
            tx.record.finished = True
        return tx

    def sweep(
        self,
        tx_id: str,
        *,
        rollback_after: timedelta,
        delete_after: timedelta,
    ) -> SweepOutcome:
        """Move one TX record along: roll back if stale, finish if decided, delete if old.

        Ages are measured from the record's last change (``ts``) by this
        manager's clock; a pending record is rolled back only if it has not
        changed since it was read, so a live coordinator is never overtaken by
        a sweeper that read an old version.
        """
        p = self.protocol
        header = p.records.read_header(tx_id)
        if header is None:
            return SweepOutcome.MISSING
        age_ms = p.now_ms() - header.updated_ms
        if not header.finished:
            if header.state == s.STATE_PENDING and age_ms < rollback_after.total_seconds() * 1000:
                return SweepOutcome.ACTIVE
            return p.settle(tx_id, header, expect_version=header.version)
        if age_ms < delete_after.total_seconds() * 1000:
            return SweepOutcome.KEPT
        p.delete_record(header)
        return SweepOutcome.DELETED

    # -- one-shot writes ---------------------------------------------------------

    def transact_write(self, requests: list[dict[str, Any]]) -> str:
        """Write several items atomically; returns ``"native"`` or ``"protocol"``.

        ``requests`` has the shape of ``TransactWriteItems``' ``TransactItems``:
        ``{"Put": {...}}``, ``{"Update": {...}}`` or ``{"Delete": {...}}``. Up to
        100 uncontended writes totalling at most 4 MB commit in a single
        ``TransactWriteItems`` call, each conditioned on carrying no protocol
        lock so it stays isolated from protocol transactions. On contention,
        past those limits, or where the API is missing (some emulators), the
        general protocol runs with identical results.

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
        built: list[Request] = []
        for op, params in parse_batch(requests):
            if "ReturnValues" in params:
                raise InvalidRequestError("ReturnValues is not supported in transact_write")
            table = params.get("TableName")
            key_types = self.key_types(table) if isinstance(table, str) and table else {}
            built.append(build(op, params, key_types))
        if not built:
            return "native"
        if len({(r.table, r.rid) for r in built}) != len(built):
            raise DuplicateRequestError("an item appears twice in transact_write")
        size = sum(item_size(r.params.get("Item") or r.key) for r in built)
        if len(built) <= 100 and size <= 4 * 1024 * 1024 and self._native_write(built):
            return "native"
        # As a `with` block: a failure to clean up after an error never hides the error.
        with self.transaction() as tx:
            tx.write_all(requests)
        return "protocol"

    def _native_write(self, requests: list[Request]) -> bool:
        """One TransactWriteItems call; False when the protocol must take over."""
        items = []
        for r in requests:
            names = dict(r.params.get("ExpressionAttributeNames") or {})
            names["#ddbtxl"] = s.ATTR_LOCK
            # fast path: the item takes part in no protocol transaction, and the
            # request's own condition holds; DynamoDB checks both atomically.
            condition = "attribute_not_exists(#ddbtxl)"
            if r.condition:
                condition = f"({r.condition}) AND {condition}"
            params = {k: v for k, v in r.params.items() if k != "ExpressionAttributeNames"}
            params.update(ConditionExpression=condition, ExpressionAttributeNames=names)
            if r.op == "update" and not r.params.get("UpdateExpression"):
                # UpdateItem with no expression only makes sure the item exists, but an
                # Update here needs one: removing an attribute never written is the same.
                params["UpdateExpression"] = "REMOVE #ddbtxv"
                names["#ddbtxv"] = s.ATTR_VERDICT
            kind = {"put": "Put", "update": "Update", "delete": "Delete"}[r.op]
            items.append({kind: params})
        try:
            # Retries after a lost response are deduplicated by DynamoDB through the
            # ClientRequestToken botocore fills in and reuses on every attempt (10
            # minutes). moto ignores the token and dynalite lacks the call, so this
            # is the one step no emulator test can check.
            call(self.client, "transact_write_items", TransactItems=items)
            return True
        except ValidationFailed as exc:
            raise InvalidRequestError(f"DynamoDB rejected the request: {exc}") from exc
        except DynamoDBError as exc:
            # TransactionCanceledException (a condition: ours or the user's, or a
            # conflicting native transaction) or an emulator without the API: the
            # general protocol sorts out which, and gives the same result.
            logger.debug("transact_write falls back to the protocol: %s", exc.code)
            return False

    # -- reads outside transactions (ddbtx.reads) ------------------------------

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

        ``ProjectionExpression`` and ``ExpressionAttributeNames`` work as in boto3.

        Examples
        --------
        >>> tm.get_item(TableName="Accounts", Key={"id": {"S": "a"}})  # doctest: +SKIP
        {'Item': {'id': {'S': 'a'}, 'balance': {'N': '90'}}}
        """
        params.update(TableName=TableName, Key=Key, ConsistentRead=ConsistentRead)
        return self.reads.read("get", params, Isolation(isolation).value)

    def query(self, *, isolation: Isolation = Isolation.COMMITTED, **params: Any) -> dict[str, Any]:
        """One page of a Query at the given isolation level, in boto3's response shape.

        Takes ``Query``'s parameters (expressions, ``IndexName``, ``Limit``,
        ``ExclusiveStartKey``, ``Select``, ...). ``COMMITTED`` returns an item
        with an applied write as its saved image and never an item a pending
        transaction inserted; ``UNCOMMITTED`` the items as they are, without
        bare lock holders and pending deletes; ``SERIALIZABLE`` read-locks every
        item returned in a short transaction. README: "Reads of many items".

        Examples
        --------
        >>> tm.query(TableName="Orders", KeyConditionExpression="customer = :c",  # doctest: +SKIP
        ...          ExpressionAttributeValues={":c": {"S": "alice"}})["Items"]
        [{'customer': {'S': 'alice'}, 'order': {'S': 'o-1'}}]
        """
        return self.reads.read("query", params, Isolation(isolation).value)

    def scan(self, *, isolation: Isolation = Isolation.COMMITTED, **params: Any) -> dict[str, Any]:
        """One page of a Scan at the given isolation level (see :meth:`query`).

        Examples
        --------
        >>> tm.scan(TableName="Accounts", FilterExpression="balance < :z",  # doctest: +SKIP
        ...         ExpressionAttributeValues={":z": {"N": "0"}})["Count"]
        0
        """
        return self.reads.read("scan", params, Isolation(isolation).value)

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
        return self.reads.batch_get_item(params, Isolation(isolation).value)

    def table(self, name: str) -> Table:
        """A boto3-``Table``-like view of a data table: Python values, ``conditions`` objects.

        Examples
        --------
        >>> tm.table("Accounts").get_item(Key={"id": "a"})  # doctest: +SKIP
        {'Item': {'id': 'a', 'balance': Decimal('90')}}
        """
        return Table(self, name)


_BATCH_OPS: dict[str, Op] = {"Put": "put", "Update": "update", "Delete": "delete"}


def parse_batch(requests: list[dict[str, Any]]) -> list[tuple[Op, dict[str, Any]]]:
    """``TransactItems``-shaped writes as (operation, params) pairs."""
    if not isinstance(requests, list):
        raise InvalidRequestError("requests must be a list of {'Put'|'Update'|'Delete': {...}}")
    out: list[tuple[Op, dict[str, Any]]] = []
    for entry in requests:
        if not (isinstance(entry, dict) and len(entry) == 1 and next(iter(entry)) in _BATCH_OPS):
            raise InvalidRequestError(f"each request is one of {sorted(_BATCH_OPS)}: {entry!r:.80}")
        ((kind, params),) = entry.items()
        if not isinstance(params, dict):
            raise InvalidRequestError(f"{kind} must be a dict of request parameters")
        out.append((_BATCH_OPS[kind], params))
    return out


class Transaction:
    """One multi-item transaction. Use :meth:`TransactionManager.begin` to make one.

    Each request returns only after its item is locked and its write applied,
    so its errors surface from that call, as with boto3. Any number of
    coordinators may work on one transaction (:meth:`TransactionManager.resume`):
    the TX record, not this object's memory, says what it holds.

    Begun with a ``transaction_id`` (exactly-once), ``transaction_id`` is the
    caller's id and ``already_committed`` tells that an earlier attempt with it
    committed (the transaction then takes no requests).
    """

    def __init__(
        self, manager: TransactionManager, tx_id: str, *, transaction_id: str | None = None
    ) -> None:
        self.manager = manager
        self.id = tx_id
        self.p = manager.protocol
        self.record = RecordView(
            tx_id, self.p.records, parallel=self.p.parallel, batch_write=self.p.batch_write
        )
        self.steps = ItemSteps(self)
        self.contender = Contender(self)
        self.record.caller_id = transaction_id
        #: An earlier attempt with this ``transaction_id`` committed: take no requests.
        self.already_committed = False
        #: Set while a pending transaction resumed by its caller's id runs its work again.
        self.replay: Replay | None = None

    @property
    def transaction_id(self) -> str | None:
        """The caller's exactly-once id (``transaction_id=``), or None."""
        return self.record.caller_id

    @transaction_id.setter
    def transaction_id(self, value: str | None) -> None:
        self.record.caller_id = value

    def __repr__(self) -> str:
        return (
            f"Transaction(id={self.id!r}, state={self.state!r}, "
            f"requests={len(self.record.requests)})"
        )

    @property
    def state(self) -> str:
        """``"P"`` pending, ``"C"`` committed, ``"R"`` rolled back (see :mod:`ddbtx.schema`)."""
        return self.record.state

    # -- public request API (boto3 shapes) ----------------------------------------

    def put_item(self, **params: Any) -> dict[str, Any]:
        """Put an item inside the transaction (``Item``, ``ConditionExpression``, ...)."""
        return self._request("put", params)

    def update_item(self, **params: Any) -> dict[str, Any]:
        """Update an item inside the transaction (``Key``, ``UpdateExpression``, ...)."""
        return self._request("update", params)

    def delete_item(self, **params: Any) -> dict[str, Any]:
        """Delete an item when the transaction commits (``Key``, ``ConditionExpression``, ...)."""
        return self._request("delete", params)

    def get_item(self, **params: Any) -> dict[str, Any]:
        """Read an item under a read lock; sees this transaction's own writes."""
        return self._request("get", params)

    def query(self, **params: Any) -> dict[str, Any]:
        """One page of a Query that read-locks every item it returns (repeatable read).

        Each item is judged again on the value read under its lock, and this
        transaction's own writes are seen. Items that would match but are not
        returned (phantoms) are not locked. README: "Reads of many items".

        Examples
        --------
        >>> tx.query(TableName="Orders", KeyConditionExpression="customer = :c",  # doctest: +SKIP
        ...          ExpressionAttributeValues={":c": {"S": "alice"}})["Count"]
        2
        """
        return locked_read(self, "query", params)

    def scan(self, **params: Any) -> dict[str, Any]:
        """One page of a Scan that read-locks every item it returns (see :meth:`query`)."""
        return locked_read(self, "scan", params)

    def query_pages(self, **params: Any) -> Iterator[dict[str, Any]]:
        """Every page of :meth:`query`, following ``LastEvaluatedKey`` (a generator)."""
        return self.manager.reads.pages(self.query, params)

    def scan_pages(self, **params: Any) -> Iterator[dict[str, Any]]:
        """Every page of :meth:`scan`, following ``LastEvaluatedKey`` (a generator)."""
        return self.manager.reads.pages(self.scan, params)

    def batch_get_item(self, **params: Any) -> dict[str, Any]:
        """``BatchGetItem`` that read-locks every key; nothing is left unprocessed."""
        return locked_batch_get(self, params)

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

        ``requests`` has ``TransactWriteItems``' shape (``{"Put": {...}}``,
        ``{"Update": {...}}``, ``{"Delete": {...}}``); the results come back in
        order. The round trips on the critical path do not grow with the number
        of items (the pool is bounded by ``max_workers``).

        Examples
        --------
        >>> tx.write_all([{"Put": {"TableName": "T", "Item": {"pk": {"S": "a"}}}},  # doctest: +SKIP
        ...               {"Delete": {"TableName": "T", "Key": {"pk": {"S": "b"}}}}])
        [{}, {}]
        """
        self._check_pending()
        batch = parse_batch(requests)
        reqs = [self._build(op, params) for op, params in batch]
        if len({r.rid for r in reqs}) != len(reqs):
            raise DuplicateRequestError("an item appears twice in the batch", tx_id=self.id)
        if self.replay is not None and self.replay.pending():
            # One by one, the recorded ones first: each is matched before anything is written.
            order = sorted(range(len(reqs)), key=lambda i: reqs[i].rid not in self.record.requests)
            answers: dict[int, dict[str, Any]] = {i: self._request(*batch[i]) for i in order}
            return [answers[i] for i in range(len(reqs))]
        locals_ = self._add([self._plan(r) for r in reqs])
        results: list[dict[str, Any]] = self._guarded(
            lambda: self.p.parallel(self.steps.lock_and_apply, locals_)
        )
        return results

    # -- request flow: plan, add, lock (+apply) ------------------------------------------

    def _check_pending(self) -> None:
        if self.record.state == s.STATE_COMMITTED:
            raise TransactionCommittedError("transaction is already committed", tx_id=self.id)
        if self.record.state == s.STATE_ROLLED_BACK:
            raise TransactionRolledBackError("transaction was rolled back", tx_id=self.id)

    def _build(self, op: Op, params: dict[str, Any]) -> Request:
        table = params.get("TableName") if isinstance(params, dict) else None
        try:
            key_types = self.manager.key_types(table) if isinstance(table, str) and table else {}
            return build(op, params, key_types)
        except InvalidRequestError as exc:
            raise InvalidRequestError(
                str(exc).split(" [")[0], tx_id=self.id, table=exc.table, key=exc.key
            ) from exc

    def _plan(self, req: Request) -> Local:
        """Local state for a request: fresh, the retry of an interrupted one, or an upgrade."""
        known = self.record.unrecorded.get(req.rid) or self.record.requests.get(req.rid)
        if known is None:
            return Local(request=req, nonce=new_nonce())
        if not known.confirmed:
            # An earlier call on this item was interrupted (throttling, a network
            # error), or made by an earlier attempt with this transaction_id: the
            # same request again resumes it, idempotently.
            if not same_request(known.request, req):
                raise DuplicateRequestError(
                    "an interrupted request on this item is pending: retry it unchanged, "
                    "commit or roll back",
                    tx_id=self.id,
                    table=req.table,
                    key=req.key,
                )
            return known
        return self._next_write(known, req)

    @staticmethod
    def _next_write(known: Local, req: Request) -> Local:
        """A write to an item this transaction holds, under the same lock: the upgrade of
        its read lock, or its next write (applied over the earlier ones; the image stays
        the one from before the transaction)."""
        prior = None
        if known.request.op != "get":
            op = known.request.op
            prior = (
                write_marker(known.seq, op),
                op == "delete",
                known.applied and not known.transient,
            )
        return Local(
            request=req,
            nonce=known.nonce,
            locked=True,
            transient=known.transient,
            pre=known.pre,
            external_image=known.external_image,
            upgrade=True,
            seq=known.seq + 1 if prior else 1,
            prior=prior,
        )

    def _request(self, op: Op, params: dict[str, Any]) -> dict[str, Any]:
        self._check_pending()
        req = self._build(op, params)
        if self.replay is not None:
            replayed = self.replay.request(req)
            if replayed is not None:
                return replayed
        known = self.record.requests.get(req.rid)
        if op == "get" and known is not None and known.confirmed:
            return self.read_own(known)
        (local,) = self._add([self._plan(req)])
        result: dict[str, Any] = self._guarded(lambda: self.steps.lock_and_apply(local))
        return result

    def _add(self, locals_: list[Local]) -> list[Local]:
        """add: record the requests (those already recorded, retried, are skipped).

        Returns the requests to lock: ``locals_``, or for an exactly-once
        transaction run by two attempts at once, the other's equal requests.
        """
        fresh = [loc for loc in locals_ if loc is not self.record.requests.get(loc.request.rid)]
        if not fresh:
            return locals_
        try:
            self.record.add(fresh)
        except AddRefused as refused:
            try:
                joined = self._join(locals_, refused)
            except TransactionIdReusedError:
                if refused.partial:
                    self._abort()
                raise
            if joined is not None:
                return joined
            if refused.partial:
                self._abort()
            raise refused.error from refused
        except _Decided as decided:
            self._raise_decided(decided.header)
        return locals_

    def _join(self, locals_: list[Local], refused: AddRefused) -> list[Local] | None:
        if self.transaction_id is None or type(refused.error) is not DuplicateRequestError:
            return None
        return join(self, locals_)

    def _replayed(self, local: Local) -> dict[str, Any]:
        """The answer to a request an earlier attempt made and this run makes again."""
        req = local.request
        if req.op == "get" or req.return_values in ("ALL_NEW", "UPDATED_NEW"):
            item = self.read_own(local).get("Item", {})
            return _wrap(item) if req.op == "get" else _return_values(local, item)
        return _return_values(local, {})

    def _read_before_write(self, local: Local) -> dict[str, Any]:
        """A read the earlier attempt made of an item it then wrote: the item before the
        transaction, as that read saw it (the write is caught up first, which saves it)."""
        for _ in range(COMMIT_ROUNDS):
            if local.confirmed:
                break
            self._catch_up([local])
            local = self.record.current(local)
        else:
            raise TransactionError("a recorded request kept moving", tx_id=self.id)
        if local.transient:
            return {}
        if local.pre is None:  # a later write learnt its earlier ones from the item: read it
            req = local.request
            item = self.p.read_item(req.table, req.key) or {}
            image = self.p.image_of(self.id, req.rid, item)
            local.pre = strip(image if image is not None else item)
        return _wrap(local.pre)

    def _guarded(self, step: Callable[[], Any]) -> Any:
        """Run lock/apply steps; errors that doom the transaction roll it back first."""
        try:
            return step()
        except _Decided as decided:
            self._raise_decided(decided.header)
        except (
            ConditionalCheckFailedError,
            InvalidRequestError,
            TransactionConflictError,
            TransactionRolledBackError,
        ):
            self._abort()
            raise

    def read_own(self, local: Local) -> dict[str, Any]:
        """Read-your-writes for an item this transaction already holds."""
        req = local.request
        if req.op == "delete":
            return {}
        item = self.p.read_item(req.table, req.key)
        if item is None or not is_locked_by(item, self.id):
            header = self.read_pending_header()
            raise TransactionRolledBackError(
                "lost the lock on an item",
                tx_id=self.id,
                table=req.table,
                key=req.key,
                other_tx_id=header.decided_by,
            )
        return _wrap(user_view(item))

    # -- settling from the record ---------------------------------------------------------

    def read_pending_header(self) -> Header:
        """The record as it is now, if still pending; otherwise settle and raise."""
        header = self.p.records.read_header(self.id)
        if header is None or header.state != s.STATE_PENDING:
            self._raise_decided(header)
        assert header is not None
        return header

    def _raise_decided(self, header: Header | None) -> None:
        """Another coordinator decided (or a janitor deleted) this transaction: help it
        complete, leave nothing of ours, and tell the caller who won."""
        if header is None:
            raise self._gone()
        self.record.adopt(header)
        self.record.state = header.state
        if header.finished:
            self._undo_late_locks()
        else:
            self.p.complete(header, self._known())
        self.record.finished = True
        if header.state == s.STATE_COMMITTED:
            raise TransactionCommittedError("transaction was committed", tx_id=self.id)
        raise TransactionRolledBackError(
            "transaction was rolled back by another coordinator",
            tx_id=self.id,
            other_tx_id=header.decided_by,
        )

    def _undo_late_locks(self) -> None:
        """Once a record is completed or gone, any lock of ours on an item was taken late
        (this coordinator was paused): a stray, undone."""
        touched = list(self.record.touched.values())
        self.p.parallel(lambda req: self.p.undo(self.id, req.table, req.key, None), touched)

    def _gone(self) -> TransactionRolledBackError:
        """The record was deleted: only janitors delete a record nobody completed here,
        and they never commit a pending one, so to this caller it was rolled back."""
        self._undo_late_locks()
        self.record.state = s.STATE_ROLLED_BACK
        self.record.finished = True
        return TransactionRolledBackError(
            "the TX record is gone: a janitor rolled the transaction back and deleted it",
            tx_id=self.id,
        )

    # -- commit / rollback / delete ----------------------------------------------------------

    def commit(self) -> None:
        """commit + complete: decide the transaction committed, then unlock every item.

        Every request the record names is caught up (locked and applied under
        the recorded nonce) before the decision, which is made only at the
        version this coordinator has seen in full.

        Raises
        ------
        TransactionRolledBackError
            If another coordinator rolled it back first.
        """
        if self.record.state == s.STATE_COMMITTED:
            self._complete()
            return
        self._check_pending()
        if not self.record.created:
            if self.transaction_id is not None:
                self._commit_empty()
                return
            self.record.state = s.STATE_COMMITTED
            self.record.finished = True
            return
        if self.replay is not None:
            self.replay.check_complete()
        for _ in range(COMMIT_ROUNDS):
            pending = self.record.unconfirmed()
            if pending:
                try:
                    self._catch_up(pending)
                except TransactionCommittedError:
                    return  # another coordinator committed (and completed) it
                continue
            header = self.record.decide(s.STATE_COMMITTED)
            if header is None:
                raise self._gone()
            if header.state == s.STATE_COMMITTED:
                self._complete(header)
                return
            if header.state == s.STATE_ROLLED_BACK:
                self._raise_decided(header)
            # Still pending at another version: its requests are merged; catch them up.
        raise TransactionError(
            "commit did not settle after repeated concurrent changes", tx_id=self.id
        )

    def _commit_empty(self) -> None:
        """An exactly-once transaction with no request is still recorded committed, so that
        a retry with its id does not run the work again (one write)."""
        assert self.transaction_id is not None
        if not self.p.records.create_finished(self.id, self.transaction_id, s.STATE_COMMITTED):
            header = self.p.records.read_header(self.id)
            if header is None or header.state == s.STATE_ROLLED_BACK:
                self._raise_decided(header)  # fenced by a retry with the same id: rolled back
            if header is None or header.state != s.STATE_COMMITTED:  # only this object creates it
                raise TransactionError("the record appeared pending", tx_id=self.id)
        self.record.state = s.STATE_COMMITTED
        self.record.created = self.record.finished = True

    def _catch_up(self, pending: list[Local]) -> None:
        self._guarded(lambda: self.p.parallel(self.steps.catch_up, pending))

    def _known(self) -> dict[str, Item]:
        """This coordinator's view of each confirmed item, to settle it without a read."""
        known: dict[str, Item] = {}
        for rid, loc in list(self.record.requests.items()):
            if not loc.confirmed:
                continue
            req = loc.request
            item: Item = {**req.key, s.ATTR_LOCK: {"S": new_lock_value(self.id, loc.nonce)}}
            if loc.transient:
                item[s.ATTR_TRANSIENT] = {"BOOL": True}
            if loc.applied:
                item[s.ATTR_APPLIED] = write_marker(loc.seq, loc.request.op) or {"BOOL": True}
                if loc.external_image:
                    item[s.ATTR_IMAGE_EXTERNAL] = {"BOOL": True}
                elif loc.pre is not None:
                    item[s.ATTR_IMAGE] = {"M": loc.pre}
            known[rid] = item
        return known

    def _complete(self, header: Header | None = None) -> None:
        """complete with this coordinator's knowledge; only strays if others completed first."""
        if self.record.finished:
            return
        if header is not None and header.finished:
            self._undo_late_locks()
            self.record.finished = True
            return
        if header is None:
            header = Header(self.id, self.record.state, self.record.version, 0, False)
        header.entries = header.entries or self.record.entries()
        locals_ = list(self.record.requests.values())
        external = any(loc.external_image for loc in locals_)
        all_known = all(loc.confirmed for loc in locals_)
        self.p.complete(header, self._known(), external_images=external or not all_known)
        self.record.finished = True

    def rollback(self) -> None:
        """Roll back: restore every item to its state before the transaction and unlock it."""
        if self.record.state == s.STATE_ROLLED_BACK:
            self._complete()
            return
        if self.record.state == s.STATE_COMMITTED:
            raise TransactionCommittedError(
                "cannot roll back a committed transaction", tx_id=self.id
            )
        if not self.record.created:
            self.record.state = s.STATE_ROLLED_BACK
            self.record.finished = True
            return
        header = self.record.decide(s.STATE_ROLLED_BACK)
        if header is None:
            self._gone()  # a janitor rolled it back and deleted it: as asked
            return
        self.record.state = header.state
        self._complete(header)
        if header.state == s.STATE_COMMITTED:
            raise TransactionCommittedError("transaction was committed first", tx_id=self.id)

    def _abort(self) -> None:
        """Roll back after a failed request, keeping the original error for the caller."""
        try:
            self.rollback()
        except TransactionCommittedError:
            raise
        except Exception:  # the original error matters more; the sweeper completes the rest
            logger.exception("rollback of %s after a failed request did not complete", self.id)

    def delete(self) -> None:
        """delete: remove the completed TX record (the caller has noted the outcome)."""
        if not self.record.created:
            return
        if self.record.state == s.STATE_PENDING:
            raise TransactionError("commit or roll back before deleting", tx_id=self.id)
        if self.record.finished:
            header = Header(self.id, self.record.state, self.record.version, 0, True)
            header.entries = self.record.entries()
            header.caller_id = self.transaction_id
            self.p.delete_record(header)
            return
        current = self.p.records.read_header(self.id)
        if current is None:
            return
        if not current.finished:
            self.p.complete(current, self._known())
        current.finished = True
        self.p.delete_record(current)


#: Rounds of "catch up, then decide" before a commit gives up on a record that keeps moving.
COMMIT_ROUNDS = 16
