"""What both transaction managers (sync and asyncio) are made of."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypedDict, TypeVar

from .. import schema as s
from .._base.effects import Step
from .._base.requests import KeySchemas, KeyTypes, Op
from .._item_steps.contention import Contention
from .._stores.completion import Completion, new_tx_id
from ..errors import (
    TransactionCommittedError,
    TransactionConflictError,
    TransactionIdReusedError,
    TransactionRolledBackError,
)
from .manager_steps import Opener
from .reads import Reads
from .steps import CoordinatorSteps

logger = logging.getLogger(__name__)

Tx = TypeVar("Tx", bound=CoordinatorSteps)


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


class Settings(TypedDict, total=False):
    """:class:`ManagerCore`'s keyword parameters but ``sleep`` (whose type is the driver's)."""

    clock: Callable[[], float]
    monotonic: Callable[[], float]
    lock_wait: float
    stale_after: float
    wound_patience: float
    contention: Contention
    max_workers: int | None
    completed_ttl: timedelta
    key_schemas: Mapping[str, Sequence[str] | KeyTypes] | None
    rng: random.Random | None


class ManagerCore(Generic[Tx]):
    """A manager's settings and parts (parameters: :class:`~ddbtx.TransactionManager`)."""

    protocol: Completion
    reads: Reads
    #: Whether ``max_workers`` threads share the client's pool (aiohttp's queue instead).
    sized_pool = True

    def __init__(
        self,
        client: Any,
        transactions_table: str,
        images_table: str,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        lock_wait: float = 10.0,
        stale_after: float = 30.0,
        wound_patience: float = 0.5,
        contention: Contention = Contention.WOUND_WAIT,
        max_workers: int | None = None,
        completed_ttl: timedelta = timedelta(days=1),
        key_schemas: Mapping[str, Sequence[str] | KeyTypes] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        max_workers = self.fit_workers(client, max_workers)
        if lock_wait < 0 or stale_after <= 0 or wound_patience < 0 or max_workers < 1:
            raise ValueError(
                "lock_wait >= 0, stale_after > 0, wound_patience >= 0 and max_workers >= 1 "
                "are required"
            )
        self.client = client
        self.transactions_table = transactions_table
        self.images_table = images_table
        self.clock = clock
        self.monotonic = monotonic
        self.lock_wait = lock_wait
        self.stale_after = stale_after
        self.wound_patience = wound_patience
        self.contention = Contention(contention)
        self.rng = rng or random.Random()
        self.schemas = KeySchemas(key_schemas)
        self.protocol = self.p = Completion(
            client,
            transactions_table,
            images_table,
            clock=clock,
            max_workers=max_workers,
            completed_ttl_seconds=int(completed_ttl.total_seconds()),
            sleep=sleep,
        )
        self.reads = Reads(self)
        self.opener = Opener(self.protocol, self.schemas, self.make)

    def fit_workers(self, client: Any, asked: int | None) -> int:
        """How many item steps run at once: ``asked``, or as many as the client keeps HTTP
        connections (at most 32), so a default client (10 connections) needs no tuning."""
        try:
            pool = client.meta.config.max_pool_connections
        except Exception:  # not a botocore client (e.g. a test double): nothing to size
            pool = None
        if not self.sized_pool or not isinstance(pool, int):
            return MAX_WORKERS if asked is None else asked
        if asked is None:
            logger.debug(
                "max_workers %d: the client keeps %d HTTP connections (botocore Config("
                "max_pool_connections=%d) allows up to %d)",
                min(pool, MAX_WORKERS),
                pool,
                MAX_WORKERS,
                MAX_WORKERS,
            )
            return min(pool, MAX_WORKERS)
        if pool < asked:
            # Steps beyond the pool open and drop a connection each: slower, and noisy in logs.
            logger.warning(
                "the client keeps %d HTTP connections but max_workers is %d; create it with "
                "botocore Config(max_pool_connections=%d)",
                pool,
                asked,
                asked,
            )
        return asked

    def make(self, tx_id: str, transaction_id: str | None = None) -> Tx:
        """A coordinator of transaction ``tx_id`` (nothing is sent)."""
        raise NotImplementedError

    def new_id(self, priority: str | None) -> str:
        return new_tx_id(lambda: int(self.clock() * 1e9), priority=priority)

    def new_transaction(self, priority: str | None = None) -> Tx:
        return self.make(self.new_id(priority))


def deletes(delete: bool | None, transaction_id: str | None) -> bool:
    """Whether a ``transaction()`` block deletes its record: only when asked, since a kept
    record fences late copies of the record's own writes (docs/protocol.md, "Fault model")
    and ``completed_ttl`` or the sweeper remove it later without a request of the block's."""
    if delete is None:
        return False
    if delete and transaction_id is not None:
        raise ValueError("delete=True would forget the transaction_id as soon as it commits")
    return delete


def closing(tx: CoordinatorSteps, failure: BaseException | None, delete: bool) -> Step[None]:
    """End a ``transaction()`` block: commit, or roll back after ``failure``; delete if asked."""
    if failure is None:
        yield from tx.end.commit()
        if delete:
            yield from tx.end.delete()
        return
    try:
        # A reuse found at a request wrote nothing: the transaction is another work's.
        if tx.state == s.STATE_PENDING and not isinstance(failure, TransactionIdReusedError):
            yield from tx.end.rollback()
        if delete:
            yield from tx.end.delete()
    except Exception:  # the caller's exception matters more; the sweeper completes it
        logger.exception("rollback of %s on exception did not complete", tx.id)


#: The most item steps a manager runs at once unless told otherwise.
MAX_WORKERS = 32

#: The errors ``run`` looks at: contention (retried) and a commit by another attempt.
RETRIED = (TransactionCommittedError, TransactionRolledBackError, TransactionConflictError)


class Attempts:
    """The attempts of ``run`` (a retry is as old as the first attempt)."""

    def __init__(self, attempts: int, transaction_id: str | None) -> None:
        if attempts < 1:
            raise ValueError("attempts >= 1 is required")
        self.left = attempts
        self.transaction_id = transaction_id
        self.priority: str | None = None
        self.tx: CoordinatorSteps | None = None

    def options(self) -> dict[str, Any]:
        self.left -= 1
        self.tx = None
        return {"priority": self.priority, "transaction_id": self.transaction_id}

    def began(self, tx: CoordinatorSteps) -> AlreadyCommitted | None:
        """The attempt's transaction is open: ``run``'s result if already committed, or None."""
        self.tx = tx
        self.priority = self.priority or tx.id
        if tx.already_committed:
            return AlreadyCommitted(tx.transaction_id or "", tx.id)
        return None

    def failed(self, exc: Exception) -> AlreadyCommitted | None:
        """``run``'s result (another attempt with the id committed), None to retry, or raise."""
        tx = self.tx
        if isinstance(exc, TransactionCommittedError):
            if tx is None or self.transaction_id is None or exc.tx_id != tx.id:
                raise exc
            return AlreadyCommitted(self.transaction_id, tx.id)
        if not self.left:
            raise exc
        return None


#: Attempts of a request in a transaction of its own (``run``'s default).
OWN_ATTEMPTS = 10


def own_transaction(
    new: Callable[[str | None], CoordinatorSteps], op: Op, params: dict[str, Any]
) -> Step[dict[str, Any]]:
    """One request in a transaction of its own, retried as ``run`` retries work."""
    tries = Attempts(OWN_ATTEMPTS, None)
    while True:
        tx = new(tries.options()["priority"])
        tries.began(tx)
        try:
            try:
                result = yield from tx.request(op, params)
            except BaseException as exc:  # a cancelled task's too, as a block's
                yield from closing(tx, exc, False)
                raise
            yield from closing(tx, None, False)
            return result
        except RETRIED as exc:
            tries.failed(exc)  # raises it after the last attempt
