"""One transaction as its coordinator drives it, as steps (either driver's transaction)."""

from __future__ import annotations

import typing
from typing import Any, TypeVar

from .. import schema as s
from .._base.effects import Meter, Step, gather, metered
from .._base.items import Item, is_locked_by, write_marker
from .._base.requests import (
    KeySchemas,
    NativeRefusal,
    Op,
    Request,
    build,
    check_enum,
    check_shape,
)
from .._item_steps.add import Adding
from .._item_steps.contention import Patience
from .._item_steps.lock import ItemSteps
from .._item_steps.responses import wrap
from .._item_steps.view import AddRefused, Decided, Local, RecordView
from .._item_steps.writes import ask_as_sent
from .._stores.completion import Completion, user_view
from .._stores.record import Header, new_lock_value, new_nonce
from ..errors import (
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
from .ending import Ending
from .exactly import Replay, join, same_request
from .reads import HasReads

T = TypeVar("T")

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
    """What a transaction uses of its manager (sync or asyncio)."""

    @property
    def protocol(self) -> Completion: ...
    @property
    def schemas(self) -> KeySchemas: ...


class CoordinatorSteps:
    """One coordinator of one transaction (the TX record says what the transaction holds)."""

    def __init__(self, manager: Manager, tx_id: str, *, transaction_id: str | None = None) -> None:
        self.manager = manager
        self.id = tx_id
        self.p = manager.protocol
        self.record = RecordView(tx_id, self.p.records, write_batches=self.p.write_batches)
        self.steps = ItemSteps(self)
        self.end = Ending(self)
        self.record.caller_id = transaction_id
        #: An earlier attempt with this ``transaction_id`` committed: take no requests.
        self.already_committed = False
        #: Set while a pending transaction resumed by its caller's id runs its work again.
        self.replay: Replay | None = None

    @property
    def transaction_id(self) -> str | None:
        """The caller's exactly-once id (``transaction_id=``), or None."""
        return self.record.caller_id

    @property
    def state(self) -> str:
        """``"P"`` pending, ``"C"`` committed, ``"R"`` rolled back (see :mod:`ddbtx.schema`)."""
        return self.record.state

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(id={self.id!r}, state={self.state!r}, "
            f"requests={len(self.record.requests)})"
        )

    def request(self, op: Op, params: dict[str, Any]) -> Step[dict[str, Any]]:
        """One request (boto3's parameters): its answer once its item is locked and written.

        With ``ReturnConsumedCapacity`` the answer's ``ConsumedCapacity`` counts every
        request the transaction sent for it (its TX record's, images' and item's), under the
        request's table: what the call cost.
        """
        check_shape(self.p.client, op, params)
        check_enum(params, "ReturnConsumedCapacity", ("INDEXES", "NONE", "TOTAL"))
        mode = params.get("ReturnConsumedCapacity", "NONE")
        params = {k: v for k, v in params.items() if k != "ReturnConsumedCapacity"}
        if mode == "NONE":
            return (yield from self._request(op, params))
        meter = Meter(mode)
        answer = yield from metered(self._request(op, params), meter)
        table = str(params.get("TableName"))
        consumed: dict[str, Any] = {"TableName": table, "CapacityUnits": meter.total()}
        if mode == "INDEXES":  # the request's own table's share, as DynamoDB breaks it down
            consumed["Table"] = {"CapacityUnits": meter.units.get(table, 0.0)}
        return {**answer, "ConsumedCapacity": consumed}

    def _request(self, op: Op, params: dict[str, Any]) -> Step[dict[str, Any]]:
        self.check_pending()
        req = yield from self.build(op, params)
        if self.replay is not None:
            replayed = yield from self.replay.request(req)
            if replayed is not None:
                return replayed
        known = self.record.requests.get(req.rid)
        if op == "get" and known is not None and known.confirmed:
            return (yield from self.own(known))
        (local,) = yield from self.add([self.plan(req)])
        return (yield from self.guarded(self.steps.lock_and_apply(local)))

    def write_many(self, requests: list[dict[str, Any]]) -> Step[list[dict[str, Any]]]:
        """Several writes (``TransactItems``' shape): one add, then every lock at once."""
        self.check_pending()
        batch = parse_batch(requests)
        reqs = []
        for op, params in batch:
            reqs.append((yield from self.build(op, params)))
        if len({r.rid for r in reqs}) != len(reqs):
            raise DuplicateRequestError("an item appears twice in the batch", tx_id=self.id)
        if self.replay is not None and self.replay.pending():
            # One by one, the recorded ones first: each is matched before anything is written.
            order = sorted(range(len(reqs)), key=lambda i: reqs[i].rid not in self.record.requests)
            answers: dict[int, dict[str, Any]] = {}
            for i in order:
                answers[i] = yield from self.request(*batch[i])
            return [answers[i] for i in range(len(reqs))]
        locals_ = yield from self.add([self.plan(r) for r in reqs])
        return (yield from self.guarded(gather(self.steps.lock_and_apply(loc) for loc in locals_)))

    def read_many(self, table: str, keys: list[Item]) -> Step[list[Item | None]]:
        """Read-lock every key of ``table`` (one add, then every lock at once); each value."""
        self.check_pending()
        requests = []
        for key in keys:
            requests.append((yield from self.build("get", {"TableName": table, "Key": key})))
        values: dict[str, Item | None] = {}
        if self.replay is not None:
            # Resumed by its transaction_id: matched one at a time, as write_many does.
            for req in sorted(requests, key=lambda r: r.rid not in self.record.requests):
                values[req.rid] = (yield from self.request("get", dict(req.params))).get("Item")
            return [values[req.rid] for req in requests]
        fresh = []
        for req in {r.rid: r for r in requests}.values():
            known = self.record.requests.get(req.rid)
            if known is not None and known.confirmed:
                values[req.rid] = (yield from self.own(known)).get("Item")
            else:
                fresh.append(self.plan(req))
        if fresh:
            # Another attempt with the same transaction_id may have added them.
            fresh = yield from self.add(fresh)
            results = yield from self.guarded(gather(self.steps.lock_and_apply(c) for c in fresh))
            for local, result in zip(fresh, results, strict=True):
                values[local.request.rid] = result.get("Item")
        return [values[req.rid] for req in requests]

    def check_pending(self) -> None:
        """Raise unless the transaction may take requests."""
        self.check_known()
        if self.record.state == s.STATE_COMMITTED:
            raise TransactionCommittedError("transaction is already committed", tx_id=self.id)
        if self.record.state == s.STATE_ROLLED_BACK:
            raise TransactionRolledBackError("transaction was rolled back", tx_id=self.id)

    def build(self, op: Op, params: dict[str, Any]) -> Step[Request]:
        """A validated request, its errors naming this transaction."""
        table = params.get("TableName") if isinstance(params, dict) else None
        try:
            key_types = (
                (yield from self.manager.schemas.types(table))
                if isinstance(table, str) and table
                else {}
            )
            return build(op, params, key_types)
        except NativeRefusal as exc:
            # DynamoDB's answer names the error it finds first (the request may have more).
            asked = yield from ask_as_sent(exc.op, exc.probe, exc.probe_key)
            said = asked.response["Error"]["Message"] if asked is not None else None
            raise InvalidRequestError(
                f"DynamoDB rejected the request: {asked}" if asked is not None else exc.detail,
                operation=op,
                dynamodb_message=said or exc.response["Error"]["Message"],
                tx_id=self.id,
                table=exc.table,
            ) from exc
        except InvalidRequestError as exc:
            raise InvalidRequestError(
                exc.detail,
                operation=op,
                dynamodb_message=exc.response["Error"]["Message"],
                tx_id=self.id,
                table=exc.table,
                key=exc.key,
            ) from exc

    def plan(self, req: Request) -> Local:
        """Local state for a request: fresh, the retry of an interrupted one, or an upgrade."""
        known = self.record.unrecorded.get(req.rid) or self.record.requests.get(req.rid)
        if known is None:
            return Local(request=req, nonce=new_nonce())
        if not known.confirmed:
            # An interrupted call (or an earlier attempt's): the same request resumes it.
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
        """A write to an item this transaction holds: its read lock's upgrade, or a rewrite."""
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
            fence=known.fence,
        )

    def add(self, locals_: list[Local]) -> Step[list[Local]]:
        """add: record the requests; those to lock (maybe another attempt's equal ones)."""
        fresh = [loc for loc in locals_ if loc is not self.record.requests.get(loc.request.rid)]
        if not fresh:
            return locals_
        try:
            yield from Adding(self.record).add(fresh)
        except AddRefused as refused:
            return (yield from self._refused(locals_, refused))
        except Decided as decided:
            raise (yield from self.decided(decided.header)) from None
        return locals_

    def _refused(self, locals_: list[Local], refused: AddRefused) -> Step[list[Local]]:
        """An add refused: join another attempt's equal requests, or roll back and raise."""
        joins = self.transaction_id is not None and type(refused.error) is DuplicateRequestError
        try:
            joined = (yield from join(self, locals_)) if joins else None
        except TransactionIdReusedError:
            if refused.partial:
                yield from self.abort()
            raise
        if joined is not None:
            return joined
        error = refused.error
        if type(error) is InvalidRequestError:
            # The record took the requests' values; DynamoDB's words are for the requests.
            error = (yield from self.as_dynamodb_says(locals_)) or error
        if refused.partial:
            yield from self.abort()
        raise error from refused

    def as_dynamodb_says(self, locals_: list[Local]) -> Step[InvalidRequestError | None]:
        """DynamoDB's refusal of the first of the writes it refuses when asked as sent."""
        for local in locals_:
            req = local.request
            if req.op == "get":
                continue
            asked = yield from ask_as_sent(req.op, *req.on_probe_key())
            if asked is not None:
                return InvalidRequestError(
                    f"DynamoDB rejected the request: {asked}",
                    operation=req.op,
                    dynamodb_message=asked.response["Error"]["Message"],
                    tx_id=self.id,
                    table=req.table,
                    key=req.key,
                )
        return None

    def guarded(self, step: Step[T]) -> Step[T]:
        """Run lock/apply steps; errors that doom the transaction roll it back first."""
        try:
            return (yield from step)
        except Decided as decided:
            raise (yield from self.decided(decided.header)) from None
        except (
            ConditionalCheckFailedError,
            InvalidRequestError,
            TransactionConflictError,
            TransactionRolledBackError,
        ):
            yield from self.abort()
            raise

    def catch_up(self, pending: list[Local]) -> Step[None]:
        """Lock and apply recorded requests this coordinator has not seen applied."""
        yield from self.guarded(gather(self.steps.catch_up(loc) for loc in pending))

    def abort(self) -> Step[None]:
        """Roll back after a failed request, keeping the original error for the caller."""
        yield from self.end.abort()

    def own(self, local: Local) -> Step[dict[str, Any]]:
        """Read-your-writes for an item this transaction already holds."""
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

    def pending_header(self) -> Step[Header]:
        """The record as it is now, if still pending; otherwise complete it and raise."""
        header = yield from self.p.records.read_header(self.id)
        if header is None or header.state != s.STATE_PENDING:
            raise (yield from self.decided(header))
        return header

    def decided(self, header: Header | None) -> Step[TransactionError]:
        """Another party decided this transaction: help complete it; the error to raise."""
        if header is None:
            return (yield from self.gone())
        yield from self.record.follow(header)
        self.record.state = header.state
        if header.completed:
            yield from self.undo_late_locks()
        else:
            yield from self.p.complete(header, self.known())
        self.record.completed = True
        if header.state == s.STATE_COMMITTED:
            return TransactionCommittedError("transaction was committed", tx_id=self.id)
        return TransactionRolledBackError(
            "transaction was rolled back by another coordinator",
            tx_id=self.id,
            other_tx_id=header.decided_by,
        )

    def undo_late_locks(self) -> Step[None]:
        """Once the record is completed or gone, a lock of ours is a late stray: undone."""
        touched = list(self.record.touched.values())
        yield from gather(self.p.undo(self.id, req.table, req.key, None) for req in touched)

    def gone(self) -> Step[TransactionRolledBackError | TransactionOutcomeUnknownError]:
        """The record was deleted: rolled back, unless our commit decision went unanswered."""
        yield from self.undo_late_locks()
        self.record.completed = True
        if self.record.commit_unanswered:
            return self.outcome_unknown()
        self.record.state = s.STATE_ROLLED_BACK
        return TransactionRolledBackError(
            "the TX record is gone: a janitor rolled the transaction back and deleted it",
            tx_id=self.id,
        )

    def check_known(self) -> None:
        if self.record.completed and self.record.commit_unanswered:
            raise self.outcome_unknown()

    def outcome_unknown(self) -> TransactionOutcomeUnknownError:
        return TransactionOutcomeUnknownError(
            "the TX record is gone after a commit decision whose answer was lost: "
            "it committed, or was rolled back first; the items show which",
            tx_id=self.id,
        )

    def known(self) -> dict[str, Item]:
        """This coordinator's view of each confirmed item, to complete it without a read."""
        known: dict[str, Item] = {}
        for rid, loc in list(self.record.requests.items()):
            if not loc.confirmed:
                continue
            req = loc.request
            item: Item = {**req.key, s.ATTR_LOCK: {"S": new_lock_value(self.id, loc.nonce)}}
            if loc.fence is not None:
                item[s.ATTR_FENCE] = {"N": loc.fence}
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
