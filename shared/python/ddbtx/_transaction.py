"""One transaction as its coordinator drives it: requests, commit, roll back.

:class:`Transaction` is created by :class:`~ddbtx.transaction.TransactionManager`
(``begin``, ``resume``, ``transaction``, ``run``) and re-exported by
:mod:`ddbtx.transaction`. The request flow is plan, add, lock (+apply); the end
is decide, then complete (the step table is at the top of :mod:`ddbtx._protocol`).
"""

from __future__ import annotations

import logging
import typing
from collections.abc import Callable, Iterator
from typing import Any

from . import schema as s
from ._contention import Contender, Patience
from ._effects import Step, gather
from ._exactly import Replay, join, same_request
from ._items import Item, is_locked_by, write_marker
from ._protocol import Protocol, user_view
from ._record import Header, new_lock_value, new_nonce
from ._requests import KeyTypes, Op, Request, build
from ._responses import wrap
from ._steps import ItemSteps
from ._view import COMMIT_ROUNDS, AddRefused, Decided, Local, RecordView
from .errors import (
    ConditionalCheckFailedError,
    DuplicateRequestError,
    InvalidRequestError,
    TransactionCommittedError,
    TransactionConflictError,
    TransactionError,
    TransactionIdReusedError,
    TransactionOutcomeUnknownError,
    TransactionRolledBackError,
)
from .reads import HasReads, locked_batch_get, locked_read
from .resource import Table

logger = logging.getLogger(__name__)

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


class Manager(Patience, HasReads, typing.Protocol):
    """What a transaction uses of its :class:`~ddbtx.TransactionManager`."""

    @property
    def protocol(self) -> Protocol: ...
    def key_types(self, table: str) -> KeyTypes: ...


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

    def __init__(self, manager: Manager, tx_id: str, *, transaction_id: str | None = None) -> None:
        self.manager = manager
        self.id = tx_id
        self.p = manager.protocol
        self.record = RecordView(tx_id, self.p.records, write_batches=self.p.write_batches)
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
        returned (phantoms) are not locked. docs/transactions.md: "Reads of many items".

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

    def lock_for_read(self, table: str, keys: list[Item]) -> list[Item | None]:
        """Read-lock every key of ``table`` (one add, then every lock at once); each item's
        value under the lock, None where there is no item. Items this transaction already
        holds read as it sees them (its own writes included). The reads of many items in a
        transaction (:meth:`query`, :meth:`scan`, :meth:`batch_get_item`) are made of it."""
        self._check_pending()
        requests = [self._build("get", {"TableName": table, "Key": key}) for key in keys]
        values: dict[str, Item | None] = {}
        if self.replay is not None:
            # Resumed by its transaction_id: each read is matched with the recorded ones (those
            # first, as Transaction.write_all does), one at a time.
            for req in sorted(requests, key=lambda r: r.rid not in self.record.requests):
                values[req.rid] = self._request("get", dict(req.params)).get("Item")
            return [values[req.rid] for req in requests]
        fresh = []
        for req in {r.rid: r for r in requests}.values():
            known = self.record.requests.get(req.rid)
            if known is not None and known.confirmed:
                values[req.rid] = self.read_own(known).get("Item")
            else:
                fresh.append(self._plan(req))
        if fresh:
            # Another attempt with the same transaction_id may have added them.
            fresh = self._add(fresh)
            results = self._guarded(
                lambda: self.p.run(gather(self.steps.lock_and_apply(loc) for loc in fresh))
            )
            for local, result in zip(fresh, results, strict=True):
                values[local.request.rid] = result.get("Item")
        return [values[req.rid] for req in requests]

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
            lambda: self.p.run(gather(self.steps.lock_and_apply(loc) for loc in locals_))
        )
        return results

    # -- request flow: plan, add, lock (+apply) ------------------------------------------

    def _check_pending(self) -> None:
        self._check_known()
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
                exc.detail, tx_id=self.id, table=exc.table, key=exc.key
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
                    "another coordinator of this transaction wrote this item; a resumed "
                    "coordinator cannot yet write over another's write to one item (the same "
                    "request again takes it over; or write it from the coordinator that wrote "
                    "it first, or commit)"
                    if known.elsewhere
                    else "an interrupted request on this item is pending: retry it unchanged, "
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
        result: dict[str, Any] = self._guarded(lambda: self.p.run(self.steps.lock_and_apply(local)))
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
            self.p.run(self.record.add(fresh))
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
        except Decided as decided:
            self._raise_decided(decided.header)
        return locals_

    def _join(self, locals_: list[Local], refused: AddRefused) -> list[Local] | None:
        if self.transaction_id is None or type(refused.error) is not DuplicateRequestError:
            return None
        return join(self, locals_)

    def _guarded(self, step: Callable[[], Any]) -> Any:
        """Run lock/apply steps; errors that doom the transaction roll it back first."""
        try:
            return step()
        except Decided as decided:
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
        return self.p.run(self.own(local))

    def own(self, local: Local) -> Step[dict[str, Any]]:
        """The step of :meth:`read_own`."""
        req = local.request
        if req.op == "delete":
            return {}
        item = yield from self.p.read_item(req.table, req.key)
        if item is None or not is_locked_by(item, self.id):
            header = yield from self.pending_header()
            raise TransactionRolledBackError(
                "lost the lock on an item",
                tx_id=self.id,
                table=req.table,
                key=req.key,
                other_tx_id=header.decided_by,
            )
        return wrap(user_view(item))

    # -- settling from the record ---------------------------------------------------------

    def read_pending_header(self) -> Header:
        """The record as it is now, if still pending; otherwise complete it and raise."""
        return self.p.run(self.pending_header())

    def pending_header(self) -> Step[Header]:
        """The step of :meth:`read_pending_header`."""
        header = yield from self.p.records.read_header(self.id)
        if header is None or header.state != s.STATE_PENDING:
            yield from self.decided(header)
        assert header is not None
        return header

    def _raise_decided(self, header: Header | None) -> None:
        """The blocking form of :meth:`decided`."""
        self.p.run(self.decided(header))

    def decided(self, header: Header | None) -> Step[None]:
        """Another coordinator decided (or a janitor deleted) this transaction: help it
        complete, leave nothing of ours, and tell the caller who won (a step that raises)."""
        if header is None:
            raise (yield from self.gone())
        yield from self.record.follow(header)
        self.record.state = header.state
        if header.completed:
            yield from self.undo_late_locks()
        else:
            yield from self.p.complete(header, self._known())
        self.record.completed = True
        if header.state == s.STATE_COMMITTED:
            raise TransactionCommittedError("transaction was committed", tx_id=self.id)
        raise TransactionRolledBackError(
            "transaction was rolled back by another coordinator",
            tx_id=self.id,
            other_tx_id=header.decided_by,
        )

    def undo_late_locks(self) -> Step[None]:
        """Once a record is completed or gone, any lock of ours on an item was taken late
        (this coordinator was paused): a stray, undone."""
        touched = list(self.record.touched.values())
        yield from gather(self.p.undo(self.id, req.table, req.key, None) for req in touched)

    def _gone(self) -> TransactionRolledBackError | TransactionOutcomeUnknownError:
        """The blocking form of :meth:`gone`."""
        return self.p.run(self.gone())

    def gone(self) -> Step[TransactionRolledBackError | TransactionOutcomeUnknownError]:
        """The record was deleted: only janitors delete a record nobody completed here,
        and they never commit a pending one, so to this caller it was rolled back, unless
        this coordinator sent a commit decision whose fate it never learned (a step whose
        result is the error to raise)."""
        yield from self.undo_late_locks()
        self.record.completed = True
        if self.record.commit_unanswered:
            return self._outcome_unknown()
        self.record.state = s.STATE_ROLLED_BACK
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
            self.record.completed = True
            return
        if self.replay is not None:
            self.replay.check_complete()
        for _ in range(COMMIT_ROUNDS):
            pending = self.record.unconfirmed()
            if pending:
                try:
                    self.catch_up(pending)
                except TransactionCommittedError:
                    return  # another coordinator committed (and completed) it
                continue
            header = self.p.run(self.record.decide(s.STATE_COMMITTED))
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
        resent: list[bool] = []
        if not self.p.run(
            self.p.records.create_completed(
                self.id, self.transaction_id, s.STATE_COMMITTED, resent=resent
            )
        ):
            header = self.p.run(self.p.records.read_header(self.id))
            # Refused after a resend and gone: maybe our own committed record, deleted.
            self.record.commit_unanswered |= header is None and any(resent)
            if header is None or header.state == s.STATE_ROLLED_BACK:
                self._raise_decided(header)  # fenced by a retry with the same id: rolled back
            if header is None or header.state != s.STATE_COMMITTED:  # only this object creates it
                raise TransactionError("the record appeared pending", tx_id=self.id)
        self.record.state = s.STATE_COMMITTED
        self.record.created = self.record.completed = True

    def catch_up(self, pending: list[Local]) -> None:
        """Lock and apply recorded requests this coordinator has not seen applied."""
        self._guarded(lambda: self.p.run(gather(self.steps.catch_up(loc) for loc in pending)))

    def _known(self) -> dict[str, Item]:
        """This coordinator's view of each confirmed item, to complete it without a read."""
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
        if self.record.completed:
            return
        if header is not None and header.completed:
            self.p.run(self.undo_late_locks())
            self.record.completed = True
            return
        if header is None:
            header = Header(self.id, self.record.state, self.record.version, 0, False)
        header.entries = header.entries or self.record.entries()
        locals_ = list(self.record.requests.values())
        external = any(loc.external_image for loc in locals_)
        all_known = all(loc.confirmed for loc in locals_)
        self.p.run(
            self.p.complete(header, self._known(), external_images=external or not all_known)
        )
        self.record.completed = True

    def rollback(self) -> None:
        """Roll back: restore every item to its state before the transaction and unlock it."""
        if self.record.state == s.STATE_ROLLED_BACK:
            self._complete()
            return
        if self.record.state == s.STATE_COMMITTED:
            raise TransactionCommittedError(
                "cannot roll back a committed transaction", tx_id=self.id
            )
        self._check_known()
        if not self.record.created:
            self.record.state = s.STATE_ROLLED_BACK
            self.record.completed = True
            return
        header = self.p.run(self.record.decide(s.STATE_ROLLED_BACK))
        if header is None:
            gone = self._gone()
            if isinstance(gone, TransactionOutcomeUnknownError):
                raise gone
            return  # a janitor rolled it back and deleted it: as asked
        self.record.state = header.state
        self._complete(header)
        if header.state == s.STATE_COMMITTED:
            raise TransactionCommittedError("transaction was committed first", tx_id=self.id)

    def _check_known(self) -> None:
        """A transaction whose record vanished behind a lost commit answer stays unknown."""
        if self.record.completed and self.record.commit_unanswered:
            raise self._outcome_unknown()

    def _outcome_unknown(self) -> TransactionOutcomeUnknownError:
        return TransactionOutcomeUnknownError(
            "the TX record is gone after a commit decision whose answer was lost: "
            "it committed, or was rolled back first; the items show which",
            tx_id=self.id,
        )

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
        if self.record.completed:
            header = Header(self.id, self.record.state, self.record.version, 0, True)
            header.entries = self.record.entries()
            header.caller_id = self.transaction_id
            self.p.run(self.p.delete_record(header))
            return
        current = self.p.run(self.p.records.read_header(self.id))
        if current is None:
            return
        if not current.completed:
            self.p.run(self.p.complete(current, self._known()))
        current.completed = True
        self.p.run(self.p.delete_record(current))
