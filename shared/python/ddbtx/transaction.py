"""Multi-item ACID transactions over DynamoDB: the public API.

See the README for the protocol; :mod:`ddbtx._protocol` has the steps shared
with other coordinators and the sweeper.
"""

from __future__ import annotations

import enum
import logging
import random
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, TypeVar

from . import schema as s
from ._dynamo import call
from ._items import (
    MAX_ITEM_BYTES,
    Item,
    flag,
    is_locked_by,
    item_size,
    lock_owner,
    request_id,
    strip,
)
from ._protocol import (
    Entry,
    Header,
    Protocol,
    entry_to_av,
    new_lock_value,
    new_nonce,
    new_tx_id,
    shard_of,
    user_view,
)
from ._requests import PROTOCOL_OVERHEAD, KeyTypes, Op, Request, build, merge_set
from .errors import (
    ConditionalCheckFailedError,
    ConditionFailed,
    DuplicateRequestError,
    DynamoDBError,
    InvalidRequestError,
    TableNotFound,
    TransactionCommittedError,
    TransactionConflictError,
    TransactionError,
    TransactionNotFoundError,
    TransactionRolledBackError,
    ValidationFailed,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Request bodies larger than this go to their own row instead of the header.
SPILL_BYTES = 16 * 1024
#: The header spills every body once it reaches this size. Every change to the
#: header (each add, the decision, the finish) is billed for its whole size, so
#: it stays small: a large transaction pays one extra put per spilled body
#: instead of rewriting hundreds of KB per request.
HEADER_SOFT_LIMIT = 32 * 1024
#: Spilled request rows expire after this long even if their record never
#: named them (the coordinator died between spilling and adding). A pending
#: record is rolled back by the sweeper long before; only its resume needs them.
SPILLED_ROW_TTL = timedelta(days=7)
#: Images larger than this live in the images table instead of the item.
INLINE_IMAGE_LIMIT = 64 * 1024


class Isolation(enum.Enum):
    """Read isolation levels of :meth:`TransactionManager.get_item`.

    ``UNCOMMITTED`` reads the item as it is, uncommitted writes included.
    ``COMMITTED`` never returns uncommitted data: a locked item that has a write
    applied is read from its saved image. ``SERIALIZABLE`` takes a read lock in a
    short transaction of its own.
    """

    UNCOMMITTED = "uncommitted"
    COMMITTED = "committed"
    SERIALIZABLE = "serializable"


class Contention(enum.Enum):
    """What a transaction does when an item it needs is locked by a pending one."""

    #: The older transaction (smaller id) rolls the younger back; the younger waits.
    WOUND_WAIT = "wound-wait"
    #: Always roll the lock holder back (the Java library's policy; for comparison).
    ROLLBACK_HOLDER = "rollback-holder"


class SweepOutcome(enum.Enum):
    """What :meth:`TransactionManager.sweep` did to one TX record."""

    MISSING = "missing"
    ACTIVE = "active"  #: pending and recently changed: left alone
    ROLLED_BACK = "rolled_back"  #: pending and stale: rolled back and finished
    ROLLED_FORWARD = "rolled_forward"  #: committed but unfinished: completed
    FINALISED = "finalised"  #: rolled back but unfinished: completed
    KEPT = "kept"  #: finished, younger than the delete age
    DELETED = "deleted"


@dataclass
class _Local:
    """This coordinator's knowledge of one request."""

    request: Request
    nonce: str
    locked: bool = False  # this request's lock (its nonce) is on the item
    confirmed: bool = False  # the request is complete: locked, and its write applied
    transient: bool = False
    applied: bool = False
    pre: Item | None = None  # the item before the write (user view), None if absent
    external_image: bool = False
    upgrade: bool = False  # a write on an item this transaction had read-locked


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
        self.protocol = Protocol(
            client,
            transactions_table,
            images_table,
            clock=clock,
            max_workers=max_workers,
            finished_ttl_seconds=int(finished_ttl.total_seconds()),
            sleep=sleep,
        )

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

    def begin(self, *, priority: str | None = None) -> Transaction:
        """Start a transaction. Nothing is written until its first request.

        ``priority``: the id of an earlier attempt of the same work. The new
        transaction is then as old as that attempt under wound-wait, so a retry
        after being wounded moves up instead of starting last again, and cannot
        starve. Its id is new and unique.
        """
        clock_ns = lambda: int(self.clock() * 1e9)  # noqa: E731
        return Transaction(self, new_tx_id(clock_ns, priority=priority))

    @contextmanager
    def transaction(
        self, *, delete: bool = True, priority: str | None = None
    ) -> Iterator[Transaction]:
        """Commit on normal exit; roll back and re-raise on an exception.

        With ``delete`` (the default) the finished TX record is deleted on exit,
        since the caller has seen the outcome. ``priority`` is as for :meth:`begin`.
        """
        tx = self.begin(priority=priority)
        try:
            yield tx
        except BaseException:
            try:
                if tx.state == s.STATE_PENDING:
                    tx.rollback()
                if delete:
                    tx.delete()
            except Exception:  # the caller's exception matters more; the sweeper finishes
                logger.exception("rollback of %s on exception did not complete", tx.id)
            raise
        tx.commit()
        if delete:
            tx.delete()

    def run(self, work: Callable[[Transaction], T], *, attempts: int = 10) -> T:
        """Run ``work(tx)`` in a transaction and commit, retrying when contention aborts it.

        A retry follows a :class:`TransactionRolledBackError` (another
        transaction rolled this one back) or a :class:`TransactionConflictError`
        (an older one kept the item locked), and begins with the first
        attempt's priority, so under wound-wait it only gets older. ``work``
        must be safe to run again. Any other error, or the last attempt's,
        propagates.

        Examples
        --------
        >>> def pay(tx):                                            # doctest: +SKIP
        ...     tx.update_item(TableName="Accounts", Key={"id": {"S": "a"}},
        ...                    UpdateExpression="ADD balance :n",
        ...                    ExpressionAttributeValues={":n": {"N": "-10"}})
        >>> tm.run(pay, attempts=5)                                 # doctest: +SKIP
        """
        if attempts < 1:
            raise ValueError("attempts >= 1 is required")
        priority: str | None = None
        for attempt in range(1, attempts + 1):
            try:
                with self.transaction(priority=priority) as tx:
                    priority = priority or tx.id
                    result = work(tx)
                return result
            except (TransactionRolledBackError, TransactionConflictError):
                if attempt == attempts:
                    raise
        raise AssertionError("unreachable")

    def resume(self, tx_id: str) -> Transaction:
        """Take over a transaction started elsewhere (any process may).

        A pending transaction can then receive more requests, commit or roll
        back; a decided one is driven to completion before this returns.
        """
        header = self.protocol.read_header(tx_id)
        if header is None:
            raise TransactionNotFoundError("no such transaction", tx_id=tx_id)
        tx = Transaction(self, tx_id)
        tx._adopt(header)
        if header.state != s.STATE_PENDING:
            self.protocol.finish(header)
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
        header = p.read_header(tx_id)
        if header is None:
            return SweepOutcome.MISSING
        age_ms = p.now_ms() - header.updated_ms
        if not header.finished:
            if header.state == s.STATE_PENDING:
                if age_ms < rollback_after.total_seconds() * 1000:
                    return SweepOutcome.ACTIVE
                decided = p.decide(tx_id, s.STATE_ROLLED_BACK, expect_version=header.version)
                if decided is None:
                    return SweepOutcome.MISSING
                if decided.state == s.STATE_PENDING:
                    return SweepOutcome.ACTIVE  # it moved on since we read it
                outcome = (
                    SweepOutcome.ROLLED_BACK
                    if decided.state == s.STATE_ROLLED_BACK
                    else SweepOutcome.ROLLED_FORWARD
                )
                p.finish(decided)
                return outcome
            p.finish(header)
            if header.state == s.STATE_COMMITTED:
                return SweepOutcome.ROLLED_FORWARD
            return SweepOutcome.FINALISED
        if age_ms < delete_after.total_seconds() * 1000:
            return SweepOutcome.KEPT
        p.delete_record(tx_id, header)
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

    # -- reads outside transactions --------------------------------------------

    def get_item(
        self,
        *,
        TableName: str,  # noqa: N803 - boto3's parameter names
        Key: Item,  # noqa: N803
        isolation: Isolation = Isolation.COMMITTED,
        ConsistentRead: bool = True,  # noqa: N803
    ) -> dict[str, Any]:
        """Read one item at the given isolation level; returns ``{"Item": ...}`` or ``{}``.

        Examples
        --------
        >>> tm.get_item(TableName="Accounts", Key={"id": {"S": "a"}})  # doctest: +SKIP
        {'Item': {'id': {'S': 'a'}, 'balance': {'N': '90'}}}
        """
        isolation = Isolation(isolation)
        if isolation is Isolation.SERIALIZABLE:
            tx = self.begin()
            try:
                return tx.get_item(TableName=TableName, Key=Key)
            finally:
                tx.rollback()
                tx.delete()
        build("get", {"TableName": TableName, "Key": Key}, self.key_types(TableName))
        for _ in range(8):
            resp = call(
                self.client, "get_item", TableName=TableName, Key=Key, ConsistentRead=ConsistentRead
            )
            item = resp.get("Item")
            if isolation is Isolation.UNCOMMITTED or not item or s.ATTR_LOCK not in item:
                return _wrap(user_view(item))
            view = self._committed_view(TableName, Key, item)
            if view is not None:
                return _wrap(view)
        raise TransactionError(f"item in {TableName} kept changing under a committed read")

    def _committed_view(self, table: str, key: Item, item: Item) -> Item | None:
        """The last committed state of a locked item, or None to read again."""
        transient = flag(item, s.ATTR_TRANSIENT)
        if not flag(item, s.ATTR_APPLIED):
            return {} if transient else strip(item)
        if transient:
            return {}
        owner = lock_owner(item) or ""
        image = self.protocol.image_of(owner, request_id(table, key), item)
        # None: the external image was removed by a completion racing us; read again.
        return strip(image) if image is not None else None


_BATCH_OPS: dict[str, Op] = {"Put": "put", "Update": "update", "Delete": "delete"}

#: Requests per header write when adding a batch (keeps expressions under 4 KB).
ADD_BATCH = 20


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


def _wrap(item: Item) -> dict[str, Any]:
    """A read's response shape: ``{"Item": ...}``, or ``{}`` when there is no item."""
    return {"Item": item} if item else {}


def _attributes(item: Item | None) -> dict[str, Any]:
    """A write's response shape: ``{"Attributes": ...}``, or ``{}``."""
    return {"Attributes": item} if item else {}


class Transaction:
    """One multi-item transaction. Use :meth:`TransactionManager.begin` to make one.

    Each request returns only after its item is locked and its write applied,
    so its errors surface from that call, as with boto3.
    """

    def __init__(self, manager: TransactionManager, tx_id: str) -> None:
        self.manager = manager
        self.id = tx_id
        self.p = manager.protocol
        self._state = s.STATE_PENDING
        self._created = False
        self._version = 0
        self._header_bytes = 0
        self._requests: dict[str, _Local] = {}
        self._spilled: set[str] = set()
        self._finished = False
        self._marked = False  # our record carries the wait mark (TX_WAITING) until the next add

    def __repr__(self) -> str:
        return f"Transaction(id={self.id!r}, state={self.state!r}, requests={len(self._requests)})"

    @property
    def state(self) -> str:
        """``"P"`` pending, ``"C"`` committed, ``"R"`` rolled back (see :mod:`ddbtx.schema`)."""
        return self._state

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

    # -- request flow: add, lock (+apply) --------------------------------------

    def _check_pending(self) -> None:
        if self._state == s.STATE_COMMITTED:
            raise TransactionCommittedError("transaction is already committed", tx_id=self.id)
        if self._state == s.STATE_ROLLED_BACK:
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

    def _plan(self, req: Request) -> _Local:
        """Local state for a request: fresh, the retry of an interrupted one, or an upgrade."""
        known = self._requests.get(req.rid)
        if known is None:
            local = _Local(request=req, nonce=new_nonce())
        elif not known.confirmed:
            # An earlier call on this item was interrupted (throttling, a network
            # error): the same request again resumes it, idempotently.
            if known.request.op != req.op or known.request.params != req.params:
                raise DuplicateRequestError(
                    "an interrupted request on this item is pending: retry it unchanged, "
                    "commit or roll back",
                    tx_id=self.id,
                    table=req.table,
                    key=req.key,
                )
            return known
        elif known.request.op != "get":
            raise DuplicateRequestError(
                "the item already has a write in this transaction",
                tx_id=self.id,
                table=req.table,
                key=req.key,
            )
        else:
            local = _Local(
                request=req,
                nonce=known.nonce,
                locked=True,
                transient=known.transient,
                pre=known.pre,
                upgrade=True,
            )
        self._requests[req.rid] = local
        return local

    def _request(self, op: Op, params: dict[str, Any]) -> dict[str, Any]:
        self._check_pending()
        req = self._build(op, params)
        known = self._requests.get(req.rid)
        if op == "get" and known is not None and known.confirmed:
            return self._read_own(known)
        local = self._plan(req)
        self._add_all([local], previous={req.rid: known})
        result: dict[str, Any] = self._guarded(lambda: self._lock_and_apply(local))
        return result

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
        reqs = [self._build(op, params) for op, params in parse_batch(requests)]
        if len({r.rid for r in reqs}) != len(reqs):
            raise DuplicateRequestError("an item appears twice in the batch", tx_id=self.id)
        previous = {r.rid: self._requests.get(r.rid) for r in reqs}
        locals_ = [self._plan(r) for r in reqs]
        self._add_all(locals_, previous=previous)
        results: list[dict[str, Any]] = self._guarded(
            lambda: self.p.parallel(self._lock_and_apply, locals_)
        )
        return results

    def _guarded(self, step: Callable[[], Any]) -> Any:
        """Run lock/apply steps; errors that doom the transaction roll it back first."""
        try:
            return step()
        except (ConditionalCheckFailedError, InvalidRequestError, TransactionConflictError):
            self._abort()
            raise
        except TransactionRolledBackError:
            self._abort()
            raise

    def _read_own(self, local: _Local) -> dict[str, Any]:
        """Read-your-writes for an item this transaction already holds."""
        req = local.request
        if req.op == "delete":
            return {}
        item = self.p.read_item(req.table, req.key)
        if item is None or not is_locked_by(item, self.id):
            raise TransactionRolledBackError(
                "lost the lock on an item", tx_id=self.id, table=req.table, key=req.key
            )
        return _wrap(user_view(item))

    def _entry_bodies(self, locals_: list[_Local]) -> tuple[dict[str, dict[str, Any]], list[Entry]]:
        """Requests as stored in the header, and the entries whose bodies need their own row."""
        bodies: dict[str, dict[str, Any]] = {}
        spills: list[Entry] = []
        for local in locals_:
            req = local.request
            entry = Entry(req.rid, req.op, req.table, req.key, local.nonce, dict(req.params))
            body = entry_to_av(entry)
            size = item_size({"x": body})
            if size > SPILL_BYTES or self._header_bytes + size > HEADER_SOFT_LIMIT:
                spills.append(replace(entry))
                entry.spilled, entry.params = True, None
                body = entry_to_av(entry)
                size = item_size({"x": body})
            self._header_bytes += size
            bodies[req.rid] = body
        return bodies, spills

    def _add_all(self, locals_: list[_Local], *, previous: dict[str, _Local | None]) -> None:
        """add: record requests and their lock nonces in the TX record before touching items.

        A request rejected here wrote nothing: its local state is dropped (or the
        read lock it upgraded restored), so the transaction stays usable. A batch
        refused after some of its chunks were recorded rolls the transaction back:
        the record cannot take those back, and none of the batch may be applied.
        """
        header_bytes, spilled = self._header_bytes, set(self._spilled)
        bodies, spills = self._entry_bodies(locals_)
        recorded: set[str] = set()  # requests of chunks added before another was refused
        try:
            # Bodies are in place before the record names them (resume reads them).
            self._spill(spills)
            self._spilled.update(entry.rid for entry in spills)
            if not self._created:
                # A PutItem has no expression to outgrow: the record starts with them all.
                self._create(locals_, bodies, {"N": str(self.p.now_ms())})
            else:
                # Expressions stay under 4 KB in chunks; DynamoDB serialises the
                # chunks' conditional updates on the record, so they go out together.
                chunks = [locals_[i : i + ADD_BATCH] for i in range(0, len(locals_), ADD_BATCH)]
                outcomes = self.p.parallel(
                    lambda chunk: self._add_chunk_or_refusal(chunk, bodies), chunks
                )
                versions = [v for v in outcomes if isinstance(v, int)]
                if versions:
                    self._marked = False
                refusals = [e for e in outcomes if not isinstance(e, int)]
                if refusals:
                    recorded = {
                        local.request.rid
                        for chunk, outcome in zip(chunks, outcomes, strict=True)
                        if isinstance(outcome, int)
                        for local in chunk
                    }
                    raise refusals[0]
                # Each chunk adds one to the version. More means another coordinator
                # added requests in between, not seen applied here: the old version
                # makes the commit's decision fail and catch them up first.
                if max(versions) == self._version + len(chunks):
                    self._version = max(versions)
        except (InvalidRequestError, DuplicateRequestError):
            for local in locals_:
                rid = local.request.rid
                if rid in recorded:
                    continue
                before = previous.get(rid)
                if before is None:
                    self._requests.pop(rid, None)
                else:
                    self._requests[rid] = before
            self._header_bytes = header_bytes
            self._spilled = spilled | (recorded & self._spilled)
            self._drop_spills([entry for entry in spills if entry.rid not in recorded], previous)
            if recorded:
                self._abort()
            raise

    def _add_chunk_or_refusal(
        self, chunk: list[_Local], bodies: dict[str, dict[str, Any]]
    ) -> int | InvalidRequestError | DuplicateRequestError:
        """:meth:`_add_chunk`, returning a refusal instead of raising it (other chunks may land)."""
        try:
            return self._add_chunk(chunk, bodies)
        except (InvalidRequestError, DuplicateRequestError) as exc:
            return exc

    def _drop_spills(self, spills: list[Entry], previous: dict[str, _Local | None]) -> None:
        """Undo the body rows of rejected requests: the record never names them.

        With no ``previous`` request for an entry, its row is simply deleted (also
        used for a taken-over request's row under a nonce the record no longer names).

        A rejected upgrade wrote over its read's row (same item, same nonce):
        that row gets the read's body back if the record says it is spilled, and
        is deleted if the read's body is in the header (the row is new).
        """

        rows: list[dict[str, Any]] = []
        for entry in spills:
            before = previous.get(entry.rid)
            if before is None or entry.rid not in self._spilled:
                rows.append({"DeleteRequest": {"Key": self.p.spill_key(self.id, entry)}})
            else:
                old = before.request
                restored = Entry(old.rid, old.op, old.table, old.key, before.nonce, old.params)
                rows.append({"PutRequest": {"Item": self._spill_row(restored)}})
        try:
            self.p.batch_write(self.p.tx_table, rows)
        except Exception:  # rows the record never names expire by their TTL
            logger.warning("could not undo unnamed body rows of %s", self.id, exc_info=True)

    def _add_chunk(self, chunk: list[_Local], bodies: dict[str, dict[str, Any]]) -> int:
        """One conditional update of the record adding ``chunk``; returns the version after."""
        now = {"N": str(self.p.now_ms())}
        names = {
            "#rq": s.TX_REQUESTS,
            "#st": s.TX_STATE,
            "#v": s.TX_VERSION,
            "#ts": s.TX_UPDATED,
            "#wt": s.TX_WAITING,
        }
        values: dict[str, Any] = {":p": {"S": s.STATE_PENDING}, ":one": {"N": "1"}, ":now": now}
        sets, conditions = ["#v = #v + :one", "#ts = :now"], ["#st = :p"]
        for i, local in enumerate(chunk):
            names[f"#r{i}"] = local.request.rid
            values[f":e{i}"] = bodies[local.request.rid]
            sets.append(f"#rq.#r{i} = :e{i}")
            if local.upgrade:
                names["#o"], names["#n"] = "o", "n"
                values[":get"], values[f":n{i}"] = {"S": "get"}, {"S": local.nonce}
                # add (upgrade): a pending transaction turning its own read lock into a write.
                conditions.append(f"#rq.#r{i}.#o = :get AND #rq.#r{i}.#n = :n{i}")
            else:
                # add: only a pending transaction takes requests, and one per item.
                conditions.append(f"attribute_not_exists(#rq.#r{i})")
        try:
            resp = call(
                self.p.client,
                "update_item",
                TableName=self.p.tx_table,
                Key=self.p.header_key(self.id),
                # A coordinator that adds is no longer blocked: its wait mark goes
                # in the same write, so a wait episode costs one write to mark.
                UpdateExpression="SET " + ", ".join(sets) + " REMOVE #wt",
                ConditionExpression=" AND ".join(conditions),
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="UPDATED_NEW",
            )
            return int(resp["Attributes"][s.TX_VERSION]["N"])
        except ConditionFailed:
            return self._settle_add(chunk)
        except ValidationFailed as exc:
            raise self._rejected([local.request for local in chunk], exc) from exc

    def _rejected(self, requests: Sequence[Request | Entry], exc: Exception) -> InvalidRequestError:
        """DynamoDB refused before writing anything: name the item when there is one."""
        one = requests[0] if len(requests) == 1 else None
        return InvalidRequestError(
            f"DynamoDB rejected the request: {exc}",
            tx_id=self.id,
            table=one.table if one else None,
            key=one.key if one else None,
        )

    def _create(
        self, chunk: list[_Local], bodies: dict[str, dict[str, Any]], now: dict[str, str]
    ) -> None:
        """create + add: the TX record is written with its first requests."""
        item = {
            **self.p.header_key(self.id),
            s.TX_STATE: {"S": s.STATE_PENDING},
            s.TX_VERSION: {"N": "1"},
            s.TX_UPDATED: now,
            s.TX_SWEEP_KEY: {"S": f"{s.STATE_PENDING}#{shard_of(self.id)}"},
            s.TX_REQUESTS: {"M": bodies},
        }
        try:
            call(
                self.p.client,
                "put_item",
                TableName=self.p.tx_table,
                Item=item,
                # create: transaction ids are unique; a failure is our own retried write.
                ConditionExpression="attribute_not_exists(#id)",
                ExpressionAttributeNames={"#id": s.TX_PK},
            )
            self._version = 1
        except ConditionFailed:
            header = self.p.read_header(self.id)
            if header is None or any(
                (mine := header.entries.get(local.request.rid)) is None or mine.nonce != local.nonce
                for local in chunk
            ):
                raise TransactionError("transaction id collision", tx_id=self.id) from None
            self._version = header.version
        except ValidationFailed as exc:
            raise self._rejected([local.request for local in chunk], exc) from exc
        self._created = True

    def _spill(self, entries: list[Entry]) -> None:
        """Keep large request bodies in their own rows so the header stays small."""
        try:
            self.p.batch_write(
                self.p.tx_table, [{"PutRequest": {"Item": self._spill_row(e)}} for e in entries]
            )
        except ValidationFailed as exc:
            raise self._rejected(entries, exc) from exc

    def _spill_row(self, entry: Entry) -> Item:
        from ._protocol import params_to_av

        expires = int(self.p.clock() + SPILLED_ROW_TTL.total_seconds())
        return {
            **self.p.spill_key(self.id, entry),
            "p": params_to_av(entry.params or {}),
            "n": {"S": entry.nonce},
            s.TX_TTL: {"N": str(expires)},
        }

    def _settle_add(self, chunk: list[_Local]) -> int:
        """The add's condition failed: find out whether it was ours, a duplicate or a decision."""
        header = self.p.read_header(self.id)
        if header is None:
            raise self._gone()
        self._raise_if_decided(header)
        for local in chunk:
            req = local.request
            mine = header.entries.get(req.rid)
            if mine is None or mine.nonce != local.nonce or mine.op != req.op:
                raise DuplicateRequestError(
                    "another coordinator already added this item",
                    tx_id=self.id,
                    table=req.table,
                    key=req.key,
                )
        # Every entry is ours: an attempt whose response was lost had applied them.
        return header.version

    def _settle_decided(self, header: Header) -> None:
        """Another coordinator decided this transaction: help finish it, leave nothing of ours.

        Once a record is finished, any lock of this transaction still on an item
        was taken late (this coordinator was paused) and is a stray: undo it.
        """
        self._state = header.state
        if header.finished:
            self._release_own_locks()
        else:
            self.p.finish(header, self._known())
        self._finished = True

    def _release_own_locks(self) -> None:
        """Undo whatever this coordinator may still hold; only strays can be left by now."""
        held = [loc for loc in self._requests.values() if loc.locked]
        self.p.parallel(
            lambda loc: self.p.undo(self.id, loc.request.table, loc.request.key, None), held
        )

    def _gone(self) -> TransactionNotFoundError:
        """The record was deleted (finished long ago): release our strays, report it."""
        self._release_own_locks()
        self._finished = True
        return TransactionNotFoundError("TX record is gone", tx_id=self.id)

    def _raise_if_decided(self, header: Header) -> None:
        if header.state == s.STATE_PENDING:
            return
        self._settle_decided(header)
        if header.state == s.STATE_COMMITTED:
            raise TransactionCommittedError("transaction was committed", tx_id=self.id)
        raise TransactionRolledBackError(
            "transaction was rolled back by another coordinator", tx_id=self.id
        )

    # -- lock and apply --------------------------------------------------------

    def _lock_and_apply(self, local: _Local) -> dict[str, Any]:
        """lock (+apply): take the item's lock with this request's nonce and make the write."""
        req = local.request
        if local.locked:  # upgrade of our own read lock, or the retry of an interrupted write
            return self._apply_locked(local)
        # Other requests usually find their item; a put creates one, or replaces
        # one, as the last put on that table did. A wrong guess costs one failed
        # conditional write; after a missed insert the item most likely exists.
        path = self.manager._put_paths.get(req.table, "insert") if req.op == "put" else "existing"
        guessing = True
        waiter = _Waiter(self.manager)
        polling = False  # waiting on a holder: read the item, write only once it is free
        while True:
            if not polling:
                try:
                    if path == "existing":
                        result = self._lock_existing(local)
                    else:
                        result = self._lock_insert(local)
                    if req.op == "put":
                        self.manager._put_paths[req.table] = path
                    return result
                except ConditionFailed:
                    if guessing and path == "insert":
                        guessing, path = False, "existing"
                        continue
                    guessing = False
                except ValidationFailed as exc:
                    raise self._rejected([req], exc) from exc
            item = self.p.read_item(req.table, req.key)
            owner = lock_owner(item)
            if item is None or owner is None:
                observed = "insert" if item is None else "existing"
                # The write failed on a free item: either the request's own condition
                # is false, or a holder released the item between the write and the
                # read. Only a verdict on the item as it is now tells them apart.
                if observed == path and req.condition and not polling:
                    self._check_condition_now(local, absent=item is None)
                path, polling = observed, False
                continue
            polling = False
            if owner == self.id:
                assert item is not None
                if item[s.ATTR_LOCK]["S"] == new_lock_value(self.id, local.nonce):
                    return self._adopt_own_lock(local, item)
                self.p.undo(self.id, req.table, req.key, item)  # our own stray lock
                continue
            assert item is not None
            polling = self._contend(owner, waiter, req)

    def _lock_names(self, local: _Local) -> tuple[dict[str, str], dict[str, Any]]:
        req = local.request
        names = dict(req.params.get("ExpressionAttributeNames") or {})
        values = dict(req.params.get("ExpressionAttributeValues") or {})
        names.update({"#ddbtxl": s.ATTR_LOCK, "#ddbtxk": next(iter(req.key))})
        values[":ddbtxl"] = {"S": new_lock_value(self.id, local.nonce)}
        return names, values

    def _lock_existing(self, local: _Local) -> dict[str, Any]:
        """lock: an existing, unlocked item; the user's condition is checked in the same write."""
        req = local.request
        names, values = self._lock_names(local)
        names["#ddbtxa"] = s.ATTR_LOCKED_AT
        values[":ddbtxa"] = {"N": str(self.p.now_ms())}
        sets = "#ddbtxl = :ddbtxl, #ddbtxa = :ddbtxa"
        if req.op == "delete":
            names["#ddbtxd"] = s.ATTR_DELETED
            values[":ddbtxt"] = {"BOOL": True}
            sets += ", #ddbtxd = :ddbtxt"
        # lock: the item exists, nobody holds it, and the request's own condition holds.
        condition = "attribute_exists(#ddbtxk) AND attribute_not_exists(#ddbtxl)"
        if req.condition:
            condition = f"({req.condition}) AND {condition}"
        resp = call(
            self.p.client,
            "update_item",
            TableName=req.table,
            Key=req.key,
            UpdateExpression=f"SET {sets}",
            ConditionExpression=condition,
            ExpressionAttributeNames=_used(names, sets, condition),
            ExpressionAttributeValues=_used(values, sets, condition),
            ReturnValues="ALL_OLD",
        )
        local.pre = strip(resp.get("Attributes"))
        local.transient = False
        local.locked = True
        if req.op in ("put", "update"):
            return self._apply(local, check_condition=False)
        local.confirmed = True
        if req.op == "get":
            return _wrap(local.pre)
        return _attributes(local.pre) if req.return_values == "ALL_OLD" else {}

    def _lock_insert(self, local: _Local) -> dict[str, Any]:
        """lock (+apply): the item does not exist; insert it locked, with the write if any.

        Guarded by the item's own key not existing, so an item created and
        committed by someone else in between can never be taken for ours.
        """
        req = local.request
        names, values = self._lock_names(local)
        now = {"N": str(self.p.now_ms())}
        true = {"BOOL": True}
        condition = "attribute_not_exists(#ddbtxk)"
        if req.condition:
            # lock: the item is absent and the request's own condition holds on the absent item.
            condition = f"({req.condition}) AND {condition}"
        local.pre, local.transient = None, True
        protocol = {s.ATTR_LOCK: values[":ddbtxl"], s.ATTR_LOCKED_AT: now, s.ATTR_TRANSIENT: true}
        if req.op == "update":
            names.update(
                {
                    "#ddbtxa": s.ATTR_LOCKED_AT,
                    "#ddbtxn": s.ATTR_TRANSIENT,
                    "#ddbtxp": s.ATTR_APPLIED,
                }
            )
            values.update({":ddbtxa": now, ":ddbtxt": true})
            rv = req.return_values
            resp = self._user_update(
                req,
                "#ddbtxl = :ddbtxl, #ddbtxa = :ddbtxa, #ddbtxn = :ddbtxt, #ddbtxp = :ddbtxt",
                names,
                values,
                condition,
                rv if rv in ("ALL_NEW", "UPDATED_NEW") else "NONE",
            )
            local.applied = local.locked = local.confirmed = True
            return _attributes(strip(resp.get("Attributes")))
        if req.op == "put":
            item = {**req.params["Item"], **protocol, s.ATTR_APPLIED: true}
            local.applied = True
        else:
            item = {**req.key, **protocol}
            if req.op == "delete":
                item[s.ATTR_DELETED] = true
        self._guarded_put(req, item, condition, names, values)
        local.locked = local.confirmed = True
        return {}

    def _adopt_own_lock(self, local: _Local, item: Item) -> dict[str, Any]:
        """Our lock is already on the item (a retried write landed, or we resumed).

        The write is applied if it is not yet, with the request's condition
        evaluated again: the lock may have come from a read lock that never
        checked it, and on a locked item the answer cannot have changed.
        """
        local.locked = True
        local.transient = flag(item, s.ATTR_TRANSIENT)
        local.applied = flag(item, s.ATTR_APPLIED)
        op = local.request.op
        if local.applied:
            image = self.p.image_of(self.id, local.request.rid, item)
            local.pre = None if local.transient else strip(image)
            local.confirmed = True
            return _return_values(local, item)
        local.pre = None if local.transient else strip(item)
        if op in ("put", "update"):
            return self._apply(local, check_condition=True)
        if op == "delete" and not flag(item, s.ATTR_DELETED):
            return self._mark_deleted(local)
        local.confirmed = True
        return _wrap(local.pre or {}) if op == "get" else {}

    def _apply_locked(self, local: _Local) -> dict[str, Any]:
        """A write on an item this transaction already read-locked (upgrade)."""
        req = local.request
        if req.op == "get":
            return self._read_own(local)
        if req.op == "delete":
            return self._mark_deleted(local)
        return self._apply(local, check_condition=True)

    def _mark_deleted(self, local: _Local) -> dict[str, Any]:
        """apply (delete): mark a locked item for deletion at commit, after its condition."""
        req = local.request
        if req.condition:
            self._check_condition(local)
        names = {"#l": s.ATTR_LOCK, "#d": s.ATTR_DELETED}
        values = {":l": {"S": new_lock_value(self.id, local.nonce)}, ":t": {"BOOL": True}}
        self._guarded_write(local, "SET #d = :t", names, values)
        local.confirmed = True
        return _attributes(local.pre) if req.return_values == "ALL_OLD" else {}

    def _check_condition_now(self, local: _Local, *, absent: bool) -> None:
        """Raise :class:`ConditionalCheckFailedError` if the request's condition is false now.

        Returns when it holds, or when the item is locked again (the caller retries).
        """
        req = local.request
        if absent:
            self._check_condition(local, absent=True)
            return
        names, values = self._lock_names(local)
        names["#ddbtxv"] = s.ATTR_VERDICT
        # verdict: a write that changes nothing and succeeds only while the item
        # exists, nobody holds it and the request's own condition is false.
        condition = (
            f"attribute_exists(#ddbtxk) AND attribute_not_exists(#ddbtxl) AND NOT ({req.condition})"
        )
        used = _used(values, condition)
        try:
            call(
                self.p.client,
                "update_item",
                TableName=req.table,
                Key=req.key,
                UpdateExpression="REMOVE #ddbtxv",
                ConditionExpression=condition,
                ExpressionAttributeNames=_used(names, "#ddbtxv", condition),
                **({"ExpressionAttributeValues": used} if used else {}),
            )
        except ConditionFailed:
            return
        raise ConditionalCheckFailedError(
            "the request's condition is false", tx_id=self.id, table=req.table, key=req.key
        )

    def _check_condition(self, local: _Local, *, absent: bool = False) -> None:
        """Evaluate the user's condition on the item's logical state (absent if transient)."""
        req = local.request
        if not (local.transient or absent):
            return  # checked in the guarded write itself
        probe = {name: _probe_value(value) for name, value in req.key.items()}
        try:
            # A conditional delete of a key that cannot exist writes nothing and
            # evaluates the condition exactly as DynamoDB would on an absent item.
            call(
                self.p.client,
                "delete_item",
                TableName=req.table,
                Key=probe,
                ConditionExpression=req.condition,
                **_expr_params(req.params),
            )
        except ConditionFailed as exc:
            raise ConditionalCheckFailedError(
                "the request's condition is false", tx_id=self.id, table=req.table, key=req.key
            ) from exc

    def _guarded_write(
        self, local: _Local, update: str, names: dict[str, str], values: dict[str, Any]
    ) -> None:
        req = local.request
        try:
            call(
                self.p.client,
                "update_item",
                TableName=req.table,
                Key=req.key,
                UpdateExpression=update,
                # apply: only while this request's lock holds the item.
                ConditionExpression="#l = :l",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ConditionFailed:
            self._lost_lock(local)

    def _apply(self, local: _Local, *, check_condition: bool) -> dict[str, Any]:
        """save image + apply: the write, with the pre-write image, under our lock."""
        req = local.request
        if check_condition and req.condition:
            self._check_condition(local)
        image = local.pre
        names = dict(req.params.get("ExpressionAttributeNames") or {})
        values = dict(req.params.get("ExpressionAttributeValues") or {})
        names.update({"#ddbtxl": s.ATTR_LOCK, "#ddbtxp": s.ATTR_APPLIED})
        values.update(
            {":ddbtxl": {"S": new_lock_value(self.id, local.nonce)}, ":ddbtxt": {"BOOL": True}}
        )
        # apply: only under this request's lock, and only once.
        condition = "#ddbtxl = :ddbtxl AND attribute_not_exists(#ddbtxp)"
        if check_condition and req.condition and not local.transient:
            condition = f"({req.condition}) AND {condition}"
        image_attrs: dict[str, Any] = {}
        if image is not None:
            incoming = item_size(req.params.get("Item") or {}) + item_size(values)
            if item_size(image) > INLINE_IMAGE_LIMIT or (
                item_size(image) * 2 + incoming + PROTOCOL_OVERHEAD > MAX_ITEM_BYTES
            ):
                self._save_image(local, image)
                image_attrs[s.ATTR_IMAGE_EXTERNAL] = {"BOOL": True}
            else:
                image_attrs[s.ATTR_IMAGE] = {"M": image}
        rv = req.return_values
        try:
            if req.op == "put":
                item = {
                    **req.params["Item"],
                    s.ATTR_LOCK: values[":ddbtxl"],
                    s.ATTR_LOCKED_AT: {"N": str(self.p.now_ms())},
                    s.ATTR_APPLIED: {"BOOL": True},
                    **image_attrs,
                }
                if local.transient:
                    item[s.ATTR_TRANSIENT] = {"BOOL": True}
                self._guarded_put(req, item, condition, names, values)
                local.applied = local.confirmed = True
                return _attributes(image) if rv == "ALL_OLD" else {}
            sets = "#ddbtxp = :ddbtxt"
            for i, (attr, value) in enumerate(image_attrs.items()):
                names[f"#ddbtxi{i}"] = attr
                values[f":ddbtxi{i}"] = value
                sets += f", #ddbtxi{i} = :ddbtxi{i}"
            resp = self._user_update(
                req, sets, names, values, condition, "NONE" if rv == "ALL_OLD" else rv
            )
            local.applied = local.confirmed = True
            if rv == "ALL_OLD":
                return _attributes(image)
            return _attributes(strip(resp.get("Attributes")))
        except ValidationFailed as exc:
            raise InvalidRequestError(
                f"DynamoDB rejected the write: {exc}", tx_id=self.id, table=req.table, key=req.key
            ) from exc
        except ConditionFailed:
            item_now = self.p.read_item(req.table, req.key)
            lock = (item_now or {}).get(s.ATTR_LOCK, {}).get("S")
            if lock == values[":ddbtxl"]["S"] and flag(item_now, s.ATTR_APPLIED):
                local.applied = local.confirmed = True  # our own write, its response lost
                assert item_now is not None
                return _return_values(local, item_now)
            if lock == values[":ddbtxl"]["S"]:
                raise ConditionalCheckFailedError(
                    "the request's condition is false", tx_id=self.id, table=req.table, key=req.key
                ) from None
            self._lost_lock(local)
            raise AssertionError("unreachable") from None

    def _guarded_put(
        self,
        req: Request,
        item: Item,
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
    ) -> None:
        """Put a whole item under ``condition``, passing only the placeholders it uses."""
        used_values = _used(values, condition)
        call(
            self.p.client,
            "put_item",
            TableName=req.table,
            Item=item,
            ConditionExpression=condition,
            ExpressionAttributeNames=_used(names, condition),
            **({"ExpressionAttributeValues": used_values} if used_values else {}),
        )

    def _user_update(
        self,
        req: Request,
        protocol_sets: str,
        names: dict[str, str],
        values: dict[str, Any],
        condition: str,
        return_values: str,
    ) -> dict[str, Any]:
        """The user's UpdateExpression with protocol assignments joined to its SET clause."""
        update = merge_set(req.params.get("UpdateExpression") or "", protocol_sets)
        return call(
            self.p.client,
            "update_item",
            TableName=req.table,
            Key=req.key,
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeNames=_used(names, update, condition),
            ExpressionAttributeValues=_used(values, update, condition),
            ReturnValues=return_values,
        )

    def _save_image(self, local: _Local, image: Item) -> None:
        """save: an image too large to ride inside the item goes to the images table."""
        call(
            self.p.client,
            "put_item",
            TableName=self.p.images_table,
            Item={
                s.IMAGE_PK: {"S": self.id},
                s.IMAGE_SK: {"S": local.request.rid},
                s.IMAGE_ITEM: {"M": image},
                s.IMAGE_TTL: {"N": str(int(self.p.clock()) + 7 * 86400)},
            },
        )
        local.external_image = True

    def _lost_lock(self, local: _Local) -> None:
        """Our lock vanished: another coordinator rolled this transaction back."""
        header = self.p.read_header(self.id)
        if header is None:
            raise self._gone()
        self._raise_if_decided(header)
        req = local.request
        raise TransactionRolledBackError(
            "the item's lock was taken from this transaction",
            tx_id=self.id,
            table=req.table,
            key=req.key,
        )

    # -- contention ------------------------------------------------------------

    def _contend(self, owner: str, waiter: _Waiter, req: Request) -> bool:
        """The item is locked by another transaction: wound it, wait, or help it finish.

        Returns True after a wait, so the caller next reads the item (one request)
        instead of retrying its lock (a failed write and then that read anyway).
        """
        p = self.p
        if waiter.watching(owner):
            # A holder already judged worth waiting for: its record is read again
            # only once it may have gone stale or the wait is over, not on every poll.
            if not waiter.expired():
                waiter.pause()
                return True
            if not waiter.decided:
                raise self._waited_too_long(owner, req)
        header = p.read_header(owner)
        if header is None:
            item = p.read_item(req.table, req.key)
            if item is not None and lock_owner(item) == owner:
                p.release_orphan(req.table, req.key, item)
            return False
        if header.finished:
            item = p.read_item(req.table, req.key)
            if item is not None and lock_owner(item) == owner:
                p.undo(owner, req.table, req.key, item)  # stray lock of a finished tx
            return False
        pending = header.state == s.STATE_PENDING
        if pending and self.manager.contention is Contention.ROLLBACK_HOLDER:
            self._break(owner, None)
            return False
        if pending and self.id < owner:
            return self._outwait_younger(owner, header, waiter)
        # Wait: for an older pending holder (wound-wait), or for a decided one whose
        # coordinator is releasing its items right now; helping it would only repeat
        # that work. A decided holder is finished here once the wait shows it is not.
        stale = waiter.holder_is_stale(owner, header.version, decided=not pending)
        if pending and stale:
            self._break(owner, header.version)
            return False
        if not pending and (stale or waiter.expired() or waiter.grace_over()):
            p.finish(header)
            return False
        if waiter.expired():
            raise self._waited_too_long(owner, req)
        if pending and not self._marked:
            # Blocked on an older transaction for up to lock_wait: older contenders
            # must roll this one back rather than wait for it (they could deadlock).
            self._mark_waiting(owner)
        waiter.pause()
        return True

    def _outwait_younger(self, owner: str, header: Header, waiter: _Waiter) -> bool:
        """Wound-wait, patiently: wait for a younger, running holder; roll it back when needed.

        A younger holder that is running will most likely commit soon, and rolling
        it back wastes its work and its retry. It is rolled back once it marks
        itself waiting (it is blocked on an older transaction: waiting for it could
        be a deadlock) or ``wound_patience`` is over (it may be idle, or blocked on
        a younger one of its own). While it is pending its locks stay put, so each
        poll reads its TX record alone. Returns True once it is no longer pending
        (the caller reads the item next), False after rolling it back.
        """
        current: Header | None = header
        while current is not None and current.state == s.STATE_PENDING and not current.finished:
            # wound: the older transaction rolls back a younger holder that is blocked,
            # or that kept it waiting past its patience.
            if current.waiting or waiter.impatient():
                self._break(owner, None)
                return False
            waiter.pause()
            current = self.p.read_header(owner)
        return True

    def _mark_waiting(self, owner: str) -> None:
        """Mark this transaction's record as blocked on ``owner``, leaving ``v`` and ``ts``.

        The record's version and timestamp stay as they are: others judge a
        holder stale by them, and the sweeper rolls back by them.
        """
        try:
            call(
                self.p.client,
                "update_item",
                TableName=self.p.tx_table,
                Key=self.p.header_key(self.id),
                UpdateExpression="SET #wt = :owner",
                # wait mark: only a pending transaction can be blocked.
                ConditionExpression="#st = :p",
                ExpressionAttributeNames={"#wt": s.TX_WAITING, "#st": s.TX_STATE},
                ExpressionAttributeValues={":owner": {"S": owner}, ":p": {"S": s.STATE_PENDING}},
            )
            self._marked = True
        except ConditionFailed:
            header = self.p.read_header(self.id)
            if header is None:
                raise self._gone() from None
            self._raise_if_decided(header)

    def _waited_too_long(self, owner: str, req: Request) -> TransactionConflictError:
        return TransactionConflictError(
            f"item stayed locked by older transaction {owner}",
            tx_id=self.id,
            table=req.table,
            key=req.key,
        )

    def _break(self, owner: str, version: int | None) -> None:
        """decide + complete another transaction: roll it back (or finish it if it committed)."""
        decided = self.p.decide(owner, s.STATE_ROLLED_BACK, expect_version=version)
        if decided is not None and decided.state != s.STATE_PENDING:
            self.p.finish(decided)

    # -- commit / rollback / delete --------------------------------------------

    def _adopt(self, header: Header) -> None:
        """Load a TX record written by another coordinator (resume)."""
        self._created = True
        self._state = header.state
        self._version = header.version
        self._header_bytes = header.raw_size
        self._finished = header.finished
        entries = list(header.entries.values())
        for entry, params in zip(
            entries, self.p.parallel(lambda e: self.p.load_params(self.id, e), entries), strict=True
        ):
            req = build(entry.op, params, self.manager.key_names(entry.table))  # type: ignore[arg-type]
            self._requests[entry.rid] = _Local(request=req, nonce=entry.nonce)
            if entry.spilled:
                self._spilled.add(entry.rid)

    def _catch_up(self, local: _Local) -> None:
        """catch up: make sure a request recorded by someone else is locked and applied."""
        req = local.request
        item = self.p.read_item(req.table, req.key)
        if item is not None and item.get(s.ATTR_LOCK, {}).get("S") == new_lock_value(
            self.id, local.nonce
        ):
            self._adopt_own_lock(local, item)
            return
        # take over: a fresh nonce, so a late lock by the original coordinator is stray.
        new = new_nonce()
        spilled = req.rid in self._spilled
        if spilled:
            # Body rows are keyed by nonce: the new one's is in place before the record names it.
            self._spill([Entry(req.rid, req.op, req.table, req.key, new, dict(req.params))])
        try:
            resp = call(
                self.p.client,
                "update_item",
                TableName=self.p.tx_table,
                Key=self.p.header_key(self.id),
                UpdateExpression="SET #rq.#rid.#n = :new, #v = #v + :one",
                ConditionExpression="#st = :p AND #rq.#rid.#n = :old",
                ExpressionAttributeNames={
                    "#rq": s.TX_REQUESTS,
                    "#rid": req.rid,
                    "#n": "n",
                    "#v": s.TX_VERSION,
                    "#st": s.TX_STATE,
                },
                ExpressionAttributeValues={
                    ":new": {"S": new},
                    ":old": {"S": local.nonce},
                    ":one": {"N": "1"},
                    ":p": {"S": s.STATE_PENDING},
                },
                ReturnValues="UPDATED_NEW",
            )
            # As for an add: a version past this write's own step counts requests
            # another coordinator added meanwhile, so the decision must see them first.
            version = int(resp["Attributes"][s.TX_VERSION]["N"])
            if version == self._version + 1:
                self._version = version
        except ConditionFailed:
            header = self.p.read_header(self.id)
            if header is None:
                raise self._gone() from None
            self._raise_if_decided(header)
            entry = header.entries.get(req.rid)
            if entry is None or entry.nonce != new:
                if spilled:  # another coordinator's nonce won: our new row is unnamed
                    self._drop_spills([Entry(req.rid, req.op, req.table, req.key, new)], {})
                self._version = header.version
                local.nonce = entry.nonce if entry else local.nonce
                return self._catch_up(local)
            self._version = header.version
        if spilled:  # the record names the new nonce's row now: the old one is unnamed
            self._drop_spills([Entry(req.rid, req.op, req.table, req.key, local.nonce)], {})
        local.nonce = new
        self._lock_and_apply(local)

    def commit(self) -> None:
        """commit + complete: decide the transaction committed, then unlock every item.

        Raises
        ------
        TransactionRolledBackError
            If another coordinator rolled it back first.
        """
        if self._state == s.STATE_COMMITTED:
            self._complete()
            return
        self._check_pending()
        if not self._created:
            self._state = s.STATE_COMMITTED
            self._finished = True
            return
        for _ in range(16):
            pending = [loc for loc in self._requests.values() if not loc.confirmed]
            try:
                self.p.parallel(self._catch_up, pending)
            except TransactionCommittedError:
                return  # another coordinator committed (and completed) it
            except (ConditionalCheckFailedError, InvalidRequestError, TransactionConflictError):
                self._abort()
                raise
            header = self.p.decide(self.id, s.STATE_COMMITTED, expect_version=self._version)
            if header is None:
                raise self._gone()
            if header.state == s.STATE_COMMITTED:
                self._state = s.STATE_COMMITTED
                self._complete(header)
                return
            if header.state == s.STATE_ROLLED_BACK:
                self._settle_decided(header)
                raise TransactionRolledBackError(
                    "transaction was rolled back by another coordinator", tx_id=self.id
                )
            # Still pending at another version: someone added requests; catch them up.
            self._version = header.version
            for entry in header.entries.values():
                mine = self._requests.get(entry.rid)
                if mine is None or mine.nonce != entry.nonce or mine.request.op != entry.op:
                    params = self.p.load_params(self.id, entry)
                    req = build(entry.op, params, self.manager.key_names(entry.table))  # type: ignore[arg-type]
                    self._requests[entry.rid] = _Local(request=req, nonce=entry.nonce)
                    if entry.spilled:
                        self._spilled.add(entry.rid)  # its row goes with the record
        raise TransactionError(
            "commit did not settle after repeated concurrent changes", tx_id=self.id
        )

    def _known(self) -> dict[str, Item]:
        """This coordinator's view of each confirmed item, to settle it without a read."""
        known: dict[str, Item] = {}
        for rid, loc in self._requests.items():
            if not loc.confirmed:
                continue
            req = loc.request
            item: Item = {**req.key, s.ATTR_LOCK: {"S": new_lock_value(self.id, loc.nonce)}}
            if loc.transient:
                item[s.ATTR_TRANSIENT] = {"BOOL": True}
            if loc.applied:
                item[s.ATTR_APPLIED] = {"BOOL": True}
                if loc.external_image:
                    item[s.ATTR_IMAGE_EXTERNAL] = {"BOOL": True}
                elif loc.pre is not None:
                    item[s.ATTR_IMAGE] = {"M": loc.pre}
            known[rid] = item
        return known

    def _header_from_local(self, state: str) -> Header:
        entries = {
            rid: Entry(rid, loc.request.op, loc.request.table, loc.request.key, loc.nonce)
            for rid, loc in self._requests.items()
        }
        return Header(self.id, state, self._version, 0, False, entries)

    def _complete(self, header: Header | None = None) -> None:
        """complete + clean with this coordinator's knowledge; strays if others finished first."""
        if self._finished:
            return
        if header is not None and header.finished:
            self._release_own_locks()
            self._finished = True
            return
        header = header or self._header_from_local(self._state)
        if not header.entries:
            header.entries = self._header_from_local(self._state).entries
        external = any(loc.external_image for loc in self._requests.values())
        all_known = all(loc.confirmed for loc in self._requests.values())
        self.p.finish(header, self._known(), external_images=external or not all_known)
        self._finished = True

    def rollback(self) -> None:
        """Roll back: restore every item to its state before the transaction and unlock it."""
        if self._state == s.STATE_ROLLED_BACK:
            self._complete()
            return
        if self._state == s.STATE_COMMITTED:
            raise TransactionCommittedError(
                "cannot roll back a committed transaction", tx_id=self.id
            )
        if not self._created:
            self._state = s.STATE_ROLLED_BACK
            self._finished = True
            return
        header = self.p.decide(self.id, s.STATE_ROLLED_BACK)
        if header is None:
            raise self._gone()
        self._state = header.state
        if header.state == s.STATE_COMMITTED:
            self._complete(header)
            raise TransactionCommittedError("transaction was committed first", tx_id=self.id)
        self._complete(header)

    def _abort(self) -> None:
        """Roll back after a failed request, keeping the original error for the caller."""
        try:
            self.rollback()
        except TransactionCommittedError:
            raise
        except Exception:  # the original error matters more; the sweeper finishes the rest
            logger.exception("rollback of %s after a failed request did not complete", self.id)

    def delete(self) -> None:
        """delete: remove the finished TX record (the caller has noted the outcome)."""
        if not self._created:
            return
        if self._state == s.STATE_PENDING:
            raise TransactionError("commit or roll back before deleting", tx_id=self.id)
        if self._finished:
            local = self._header_from_local(self._state)
            for rid in self._spilled:
                local.entries[rid].spilled = True
            local.finished = True
            self.p.delete_record(self.id, local)
            return
        header = self.p.read_header(self.id)
        if header is None:
            return
        if not header.finished:
            self.p.finish(header, self._known())
        header.finished = True
        self.p.delete_record(self.id, header)


class _Waiter:
    """Backoff and staleness judgement for one contended lock, on the monotonic clock."""

    #: Seconds a decided holder gets to release its items before a waiter finishes it.
    DECIDED_GRACE = 0.25

    def __init__(self, manager: TransactionManager) -> None:
        self.m = manager
        self.start = manager.monotonic()
        self.delay = 0.01
        self.seen: tuple[str, int] | None = None
        self.seen_at = self.start
        self.decided = False  # the holder in ``seen`` was decided when last read
        self.decided_at = self.start

    def holder_is_stale(self, owner: str, version: int, *, decided: bool = False) -> bool:
        now = self.m.monotonic()
        if decided and not (self.decided and self.seen is not None and self.seen[0] == owner):
            self.decided_at = now
        self.decided = decided
        if self.seen != (owner, version):
            self.seen, self.seen_at = (owner, version), now
            return False
        return now - self.seen_at >= self.m.stale_after

    def watching(self, owner: str) -> bool:
        """Waiting on ``owner``, and nothing a new read of its record could change yet."""
        if self.seen is None or self.seen[0] != owner:
            return False
        now = self.m.monotonic()
        if self.decided and now - self.decided_at >= self.grace():
            return False
        return now - self.seen_at < self.m.stale_after

    def grace(self) -> float:
        return min(self.DECIDED_GRACE, self.m.lock_wait)

    def grace_over(self) -> bool:
        return self.decided and self.m.monotonic() - self.decided_at >= self.grace()

    def expired(self) -> bool:
        return self.m.monotonic() - self.start >= self.m.lock_wait

    def impatient(self) -> bool:
        """An older transaction has waited long enough for younger holders of this item."""
        return self.m.monotonic() - self.start >= self.m.wound_patience

    def pause(self) -> None:
        self.m.sleep(self.delay * (0.5 + self.m.rng.random()))
        self.delay = min(self.delay * 2, 0.5)


def _used(mapping: dict[str, Any], *expressions: str) -> dict[str, Any]:
    """Only the placeholders an expression uses (DynamoDB rejects unused ones)."""
    text = " ".join(expressions)
    tokens = set(re.findall(r"[#:][A-Za-z0-9_]+", text))
    return {k: v for k, v in mapping.items() if k in tokens}


def _expr_params(params: dict[str, Any]) -> dict[str, Any]:
    cond = str(params.get("ConditionExpression") or "")
    out: dict[str, Any] = {}
    names = _used(params.get("ExpressionAttributeNames") or {}, cond)
    values = _used(params.get("ExpressionAttributeValues") or {}, cond)
    if names:
        out["ExpressionAttributeNames"] = names
    if values:
        out["ExpressionAttributeValues"] = values
    return out


def _probe_value(value: dict[str, Any]) -> dict[str, Any]:
    ((kind, _),) = value.items()
    token = uuid.uuid4()
    if kind == "N":
        return {"N": str(token.int % 10**30 + 10**30)}
    if kind == "B":
        return {"B": b"ddbtx-probe-" + token.bytes}
    return {"S": f"ddbtx-probe-{token.hex}"}


def _return_values(local: _Local, item: Item) -> dict[str, Any]:
    """ReturnValues for a write whose response was lost, rebuilt from the item."""
    rv = local.request.return_values
    if rv in ("ALL_OLD", "UPDATED_OLD"):
        return _attributes(local.pre)
    if rv in ("ALL_NEW", "UPDATED_NEW"):
        return _attributes(strip(item))
    return {}
