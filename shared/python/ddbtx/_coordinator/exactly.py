"""Exactly-once transactions keyed by the caller's id (docs/transactions.md, "Exactly-once
ids"): checking the id, replaying a pending transaction's requests, joining an attempt."""

from __future__ import annotations

import typing
from typing import Any

from .. import errors
from .._base.effects import Step
from .._base.items import comparable, strip
from .._base.requests import Request
from .._item_steps.responses import return_values, wrap
from .._item_steps.view import COMMIT_ROUNDS, Local, RecordView
from .._stores.completion import Completion
from .._stores.record import Header

#: Longest caller's id, in UTF-8 bytes: with the alias prefix it stays far within
#: DynamoDB's 2,048-byte partition key, and the record that repeats it stays small.
MAX_TRANSACTION_ID_BYTES = 1024


def check_transaction_id(value: object) -> str:
    """The caller's id, or :class:`InvalidTransactionIdError` naming what is wrong."""
    if not isinstance(value, str):
        raise errors.InvalidTransactionIdError(
            f"transaction_id must be a str, not {type(value).__name__}"
        )
    if not value:
        raise errors.InvalidTransactionIdError("transaction_id must not be empty")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise errors.InvalidTransactionIdError(
            "transaction_id must be valid Unicode text (it has a lone surrogate)"
        ) from exc
    if size > MAX_TRANSACTION_ID_BYTES:
        raise errors.InvalidTransactionIdError(
            f"transaction_id is {size} bytes in UTF-8; at most {MAX_TRANSACTION_ID_BYTES} "
            "are allowed"
        )
    return value


class Resumed(typing.Protocol):
    """What a replay and a join use of their coordinator."""

    @property
    def id(self) -> str: ...
    @property
    def transaction_id(self) -> str | None: ...
    @property
    def p(self) -> Completion: ...
    @property
    def record(self) -> RecordView: ...
    def own(self, local: Local) -> Step[dict[str, Any]]: ...
    def pending_header(self) -> Step[Header]: ...
    def catch_up(self, pending: list[Local]) -> Step[None]: ...
    def abort(self) -> Step[None]: ...


def _canonical_params(req: Request) -> dict[str, Any]:
    return {
        name: {k: comparable(v) for k, v in value.items()}
        if name in ("Item", "Key", "ExpressionAttributeValues")
        else value
        for name, value in req.params.items()
        # a read under a lock is consistent either way
        if not (req.op == "get" and name == "ConsistentRead")
    }


def same_request(a: Request, b: Request) -> bool:
    """Whether two requests are the same, values compared as DynamoDB compares them."""
    return a.op == b.op and a.rid == b.rid and _canonical_params(a) == _canonical_params(b)


class Replay:
    """A pending transaction resumed by its caller's id: its requests matched with the record's."""

    def __init__(self, tx: Resumed) -> None:
        self.tx = tx
        #: Items whose recorded request this run made again, or made first.
        self.issued: set[str] = set()
        #: Writes this run made to an item before the one its record keeps.
        self.writes: dict[str, int] = {}
        self.added = False  # this run recorded a request of its own

    def pending(self) -> list[str]:
        """Recorded requests this run has not made again yet."""
        return [rid for rid in list(self.tx.record.requests) if rid not in self.issued]

    def request(self, req: Request) -> Step[dict[str, Any] | None]:
        """Match ``req``: its answer when it was made before, None to go the usual way."""
        tx = self.tx
        if req.rid in self.issued:
            return None  # a later request on an item this run already has: as usual
        recorded = tx.record.requests.get(req.rid)
        if recorded is None:
            missing = self.pending()
            if missing:
                raise self._reused(
                    req,
                    f"a request on an item the transaction never recorded, while {len(missing)} "
                    "recorded request(s) have not been made again",
                )
            self.issued.add(req.rid)
            self.added = True
            return None
        earlier = self.writes.get(req.rid, 0)
        if req.op == "get" and recorded.request.op != "get":
            if earlier:
                raise (
                    yield from self._start_over(req, "a read between writes of an earlier attempt")
                )
            return (yield from self._read_before_write(recorded))
        if req.op != "get" and earlier + 1 < recorded.seq:
            if req.return_values != "NONE":
                what = "the values around a write of an earlier attempt"
                raise (yield from self._start_over(req, what))
            self.writes[req.rid] = earlier + 1
            return {}
        if same_request(recorded.request, req):
            self.issued.add(req.rid)
            return (yield from self._answer(recorded)) if recorded.confirmed else None
        raise self._reused(req, "the request differs from the one recorded on this item")

    def _answer(self, local: Local) -> Step[dict[str, Any]]:
        req = local.request
        if req.op == "get" or req.return_values in ("ALL_NEW", "UPDATED_NEW"):
            item = (yield from self.tx.own(local)).get("Item", {})
            return wrap(item) if req.op == "get" else return_values(local, item)
        return return_values(local, {})

    def _read_before_write(self, local: Local) -> Step[dict[str, Any]]:
        """A read of an item the earlier attempt then wrote: the item before the transaction."""
        tx = self.tx
        for _ in range(COMMIT_ROUNDS):
            if local.confirmed:
                break
            yield from tx.catch_up([local])
            local = tx.record.current(local)
        else:
            raise errors.TransactionError("a recorded request kept moving", tx_id=tx.id)
        if local.transient:
            return {}
        if local.pre is None:  # a later write learnt its earlier ones from the item: read it
            req = local.request
            item = (yield from tx.p.read_item(req.table, req.key)) or {}
            image = yield from tx.p.image_of(tx.id, req.rid, item)
            local.pre = strip(image if image is not None else item)
        return wrap(local.pre)

    def check_complete(self) -> Step[None]:
        """Before a commit: every recorded request was made again by this run."""
        missing = self.pending()
        if not missing:
            return
        if self.added:
            yield from self.tx.abort()  # our own requests must not commit with another work's
        raise errors.TransactionIdReusedError(
            f"commit before {len(missing)} recorded request(s) were made again: the "
            "transaction_id carries other work",
            tx_id=self.tx.id,
        )

    def _start_over(self, req: Request, what: str) -> Step[errors.TransactionRolledBackError]:
        """A request whose answer the record does not keep: roll back (the work starts over)."""
        yield from self.tx.abort()
        return errors.TransactionRolledBackError(
            f"resumed by its transaction_id, the transaction cannot answer {what} to this "
            "item; it was rolled back so that the work runs again from the start",
            tx_id=self.tx.id,
            table=req.table,
            key=req.key,
        )

    def _reused(self, req: Request, why: str) -> errors.TransactionIdReusedError:
        return errors.TransactionIdReusedError(
            f"transaction_id {self.tx.transaction_id!r:.80} is pending with other work: {why}",
            tx_id=self.tx.id,
            table=req.table,
            key=req.key,
        )


def join(tx: Resumed, locals_: list[Local]) -> Step[list[Local] | None]:
    """Two attempts of one id at once: the other's equal requests, or None (other items)."""
    header = yield from tx.pending_header()
    yield from tx.record.follow(header)
    out: list[Local] = []
    for local in locals_:
        mine = tx.record.requests.get(local.request.rid)
        if mine is None:
            return None
        if mine is not local and not same_request(mine.request, local.request):
            raise errors.TransactionIdReusedError(
                "another attempt with this transaction_id recorded a different request on "
                "this item",
                tx_id=tx.id,
                table=local.request.table,
                key=local.request.key,
            )
        out.append(mine)
    return out
