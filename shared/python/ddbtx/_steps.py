"""Item steps of one transaction: lock, save image, apply, mark deleted, catch up.

Every write here is conditioned on the item (named conditions below), and
every failed condition is settled by reading the item, and where the item
alone cannot tell, the TX record.

Each is a step (:mod:`ddbtx._effects`): it yields its requests, and its waits on
another transaction's lock (:mod:`ddbtx._contention`) as pauses; a driver sends them.
The coordinator runs one with ``Protocol.run``, several at once in a ``gather``.
"""

from __future__ import annotations

import re
import typing
import uuid
from typing import Any

from botocore.exceptions import BotoCoreError

from . import schema as s
from ._contention import Contender, Contending
from ._effects import Step, request, was_resent
from ._items import MAX_ITEM_BYTES, Item, flag, item_size, lock_owner, strip
from ._record import Header, new_lock_value, new_nonce
from ._requests import PROTOCOL_OVERHEAD, Request, merge_set, too_large, with_user_condition
from ._responses import attributes, return_values, wrap
from ._rewrite import Rewrites
from ._view import Local, rejected
from .errors import (
    ConditionalCheckFailedError,
    ConditionFailed,
    DynamoDBError,
    InvalidRequestError,
    TransactionRolledBackError,
    ValidationFailed,
)

#: lock: the item exists and nobody holds it (the request's own condition is ANDed in).
LOCK_EXISTING = "attribute_exists(#ddbtxk) AND attribute_not_exists(#ddbtxl)"
#: lock (insert): the item is absent, so one created and committed meanwhile is never ours.
LOCK_INSERT = "attribute_not_exists(#ddbtxk)"
#: verdict: a no-op write that succeeds only while the item exists, is free, and the
#: request's own condition is false; it tells a false condition from a lock race.
VERDICT = "attribute_exists(#ddbtxk) AND attribute_not_exists(#ddbtxl) AND NOT ({condition})"
#: apply: only under this request's lock, and only once.
APPLY = "#ddbtxl = :ddbtxl AND attribute_not_exists(#ddbtxp)"
#: mark deleted: only under this request's lock.
HELD_BY_REQUEST = "#ddbtxl = :ddbtxl"

#: Images larger than this live in the images table instead of the item.
INLINE_IMAGE_LIMIT = 64 * 1024


class Coordinator(Contending, typing.Protocol):
    """What the item steps use of their transaction (:class:`ddbtx.Transaction`), beyond
    what its contention uses."""

    @property
    def contender(self) -> Contender: ...
    def pending_header(self) -> Step[Header]: ...
    def own(self, local: Local) -> Step[dict[str, Any]]: ...


class ItemSteps:
    """The per-item steps of one transaction (any of its coordinators)."""

    def __init__(self, tx: Coordinator) -> None:
        self.tx = tx
        self.p = tx.p
        self.rewrites = Rewrites(self)

    # -- lock (+apply) ----------------------------------------------------------------

    def lock_and_apply(self, local: Local) -> Step[dict[str, Any]]:
        """lock (+apply): take the item's lock with this request's nonce and make the write."""
        req = local.request
        if local.locked:  # upgrade of our own read lock, or the retry of an interrupted write
            return (yield from self._apply_locked(local))
        # Other requests usually find their item; a put creates one, or replaces
        # one, as the last put on that table did. A wrong guess costs one failed
        # conditional write; after a missed insert the item most likely exists.
        path = self.p.put_paths.get(req.table, "insert") if req.op == "put" else "existing"
        guessing = True
        contender = self.tx.contender.for_item(req)
        polling = False  # waiting on a holder: read the item, write only once it is free
        while True:
            if not polling:
                self.tx.record.touched[req.rid] = req
                try:
                    result = yield from (
                        self.lock_existing(local) if path == "existing" else self.lock_insert(local)
                    )
                    if req.op == "put":
                        self.p.put_paths[req.table] = path
                    return result
                except ConditionFailed as exc:
                    local.maybe_landed |= was_resent(exc)
                    if guessing and path == "insert":
                        guessing, path = False, "existing"
                        continue
                    guessing = False
                except ValidationFailed as exc:
                    raise self.rejected_write(req, exc) from exc
                except (DynamoDBError, BotoCoreError):
                    local.maybe_landed = True  # no answer: it may have been applied
                    raise
            item = yield from self.p.read_item(req.table, req.key)
            owner = lock_owner(item)
            if item is None or owner is None:
                observed = "insert" if item is None else "existing"
                # The write failed on a free item: either the request's own condition
                # is false, or a holder released the item between the write and the
                # read. Only a verdict on the item as it is now tells them apart.
                if observed == path and req.condition and not polling:
                    yield from self.check_condition_now(local, absent=item is None)
                path, polling = observed, False
                continue
            polling = False
            if owner == self.tx.id:
                current = yield from self._settle_own_lock(local, item)
                if current is not None:
                    return (yield from self.adopt_own_lock(current, item))
                continue
            polling = yield from contender.contend(owner)

    def _settle_own_lock(self, local: Local, item: Item) -> Step[Local | None]:
        """Our transaction's lock is on the item: is it the one the record names?

        Returns the request to adopt the lock for (the record's nonce may be a
        take-over's, not ours), or None after undoing a stray lock (a nonce the
        record does not name): the caller then tries again.
        """
        lock = item[s.ATTR_LOCK]["S"]
        if lock == new_lock_value(self.tx.id, local.nonce):
            return local
        header = yield from self.tx.pending_header()
        yield from self.tx.record.follow(header)
        recorded = header.entries.get(local.request.rid)
        if recorded is not None and lock == new_lock_value(self.tx.id, recorded.nonce):
            return self.tx.record.current(local)
        req = local.request
        yield from self.p.undo(self.tx.id, req.table, req.key, item, only=lock)
        return None

    def lock_names(self, local: Local) -> tuple[dict[str, str], dict[str, Any]]:
        req = local.request
        names = dict(req.params.get("ExpressionAttributeNames") or {})
        values = dict(req.params.get("ExpressionAttributeValues") or {})
        names.update({"#ddbtxl": s.ATTR_LOCK, "#ddbtxk": next(iter(req.key))})
        values[":ddbtxl"] = {"S": new_lock_value(self.tx.id, local.nonce)}
        return names, values

    def lock_existing(self, local: Local) -> Step[dict[str, Any]]:
        """lock: an existing, unlocked item; the user's condition is checked in the same write."""
        req = local.request
        names, values = self.lock_names(local)
        sets = "#ddbtxl = :ddbtxl"
        if req.op == "delete":
            names["#ddbtxd"] = s.ATTR_DELETED
            values[":ddbtxt"] = {"BOOL": True}
            sets += ", #ddbtxd = :ddbtxt"
        condition = with_user_condition(req, LOCK_EXISTING)
        resent: list[bool] = []
        resp = yield from self.update(
            req, f"SET {sets}", condition, names, values, ReturnValues="ALL_OLD", resent=resent
        )
        local.pre = strip(resp.get("Attributes"))
        local.transient = False
        local.locked = True
        if any(resent) or local.maybe_landed:
            # An earlier attempt of this lock may have landed, been adopted by another
            # coordinator, decided and completed: this lock is then a late one on the
            # completed item, and applying would write a second time. Only a pending
            # record proves it is not (completion follows the decision); a decided one
            # settles this lock as the record says (a late lock is undone: no image).
            yield from self.tx.pending_header()
        if req.op in ("put", "update"):
            return (yield from self.apply(local, check_condition=False))
        local.confirmed = True
        if req.op == "get":
            return wrap(local.pre)
        return attributes(local.pre) if req.return_values == "ALL_OLD" else {}

    def lock_insert(self, local: Local) -> Step[dict[str, Any]]:
        """lock (+apply): the item does not exist; insert it locked, with the write if any."""
        req = local.request
        names, values = self.lock_names(local)
        true = {"BOOL": True}
        condition = with_user_condition(req, LOCK_INSERT)
        local.pre, local.transient = None, True
        protocol = {s.ATTR_LOCK: values[":ddbtxl"], s.ATTR_TRANSIENT: true}
        if req.op == "update":
            names.update({"#ddbtxn": s.ATTR_TRANSIENT, "#ddbtxp": s.ATTR_APPLIED})
            values[":ddbtxt"] = true
            rv = req.return_values
            resp = yield from self.user_update(
                req,
                "#ddbtxl = :ddbtxl, #ddbtxn = :ddbtxt, #ddbtxp = :ddbtxt",
                names,
                values,
                condition,
                rv if rv in ("ALL_NEW", "UPDATED_NEW") else "NONE",
            )
            local.applied = local.locked = local.confirmed = True
            return attributes(strip(resp.get("Attributes")))
        if req.op == "put":
            item = {**req.params["Item"], **protocol, s.ATTR_APPLIED: true}
            local.applied = True
        else:
            item = {**req.key, **protocol}
            if req.op == "delete":
                item[s.ATTR_DELETED] = true
        yield from self.guarded_put(req, item, condition, names, values)
        local.locked = local.confirmed = True
        return {}

    def adopt_own_lock(self, local: Local, item: Item) -> Step[dict[str, Any]]:
        """The record's lock for this request is on the item (a retried write landed, or a
        resume): apply the write if it is not yet, with its condition evaluated again."""
        if local.seq > 1:
            return (yield from self.rewrites.apply(local, item))
        local.locked = True
        local.transient = flag(item, s.ATTR_TRANSIENT)
        local.applied = flag(item, s.ATTR_APPLIED)
        # Its image in the images table must be deleted at completion, whoever saved it.
        local.external_image = flag(item, s.ATTR_IMAGE_EXTERNAL)
        op = local.request.op
        if local.applied:
            image = yield from self.p.image_of(self.tx.id, local.request.rid, item)
            local.pre = None if local.transient else strip(image)
            local.confirmed = True
            return return_values(local, item)
        local.pre = None if local.transient else strip(item)
        if op in ("put", "update"):
            return (yield from self.apply(local, check_condition=True))
        if op == "delete" and not flag(item, s.ATTR_DELETED):
            return (yield from self.mark_deleted(local))
        local.confirmed = True
        return wrap(local.pre or {}) if op == "get" else {}

    def _apply_locked(self, local: Local) -> Step[dict[str, Any]]:
        """A write on an item this transaction already read-locked (upgrade) or wrote."""
        req = local.request
        if local.seq > 1:
            return (yield from self.rewrites.apply(local))
        if req.op == "get":
            return (yield from self.tx.own(local))
        if req.op == "delete":
            return (yield from self.mark_deleted(local))
        return (yield from self.apply(local, check_condition=True))

    # -- conditions on the item's logical state -------------------------------------------

    def check_condition_now(self, local: Local, *, absent: bool) -> Step[None]:
        """Raise :class:`ConditionalCheckFailedError` if the request's condition is false now.

        Returns when it holds, or when the item is locked again (the caller retries).
        """
        req = local.request
        if absent:
            yield from self.check_on_absent(local)
            return
        names, values = self.lock_names(local)
        names["#ddbtxv"] = s.ATTR_VERDICT
        condition = VERDICT.format(condition=req.condition)
        try:
            yield from self.update(req, "REMOVE #ddbtxv", condition, names, values)
        except ConditionFailed:
            return
        raise self.condition_false(req)

    def check_on_absent(self, local: Local) -> Step[None]:
        """Evaluate the user's condition as DynamoDB would on an absent item."""
        req = local.request
        probe = {name: _probe_value(value) for name, value in req.key.items()}
        try:
            # A conditional delete of a key that cannot exist writes nothing.
            yield from request(
                "delete_item",
                TableName=req.table,
                Key=probe,
                ConditionExpression=req.condition,
                **_expr_params(req.params),
            )
        except ConditionFailed as exc:
            raise self.condition_false(req) from exc
        except ValidationFailed as exc:
            raise rejected(self.tx.id, [req], exc) from exc

    def rejected_write(self, req: Request, exc: ValidationFailed) -> InvalidRequestError:
        """DynamoDB refused a write; an item too large for its lock is said so exactly."""
        if "size" in str(exc).lower():
            return InvalidRequestError(too_large(), tx_id=self.tx.id, table=req.table, key=req.key)
        return rejected(self.tx.id, [req], exc)

    def condition_false(self, req: Request) -> ConditionalCheckFailedError:
        return ConditionalCheckFailedError(
            "the request's condition is false", tx_id=self.tx.id, table=req.table, key=req.key
        )

    # -- save image + apply -----------------------------------------------------------------

    def mark_deleted(self, local: Local) -> Step[dict[str, Any]]:
        """apply (delete): mark a locked item for deletion at commit, if its condition holds.

        The item may have been locked by a read that checked no condition, so
        the delete's own condition is evaluated here: on the item itself in
        the same write, or on the absent item when the lock inserted it.
        """
        req = local.request
        if req.condition and local.transient:
            yield from self.check_on_absent(local)
        names, values = self.lock_names(local)
        names["#ddbtxd"] = s.ATTR_DELETED
        values[":ddbtxt"] = {"BOOL": True}
        condition = HELD_BY_REQUEST
        if not local.transient:
            condition = with_user_condition(req, condition)
        try:
            yield from self.update(req, "SET #ddbtxd = :ddbtxt", condition, names, values)
        except ValidationFailed as exc:
            raise self.rejected_write(req, exc) from exc
        except ConditionFailed as exc:
            item = yield from self.p.read_item(req.table, req.key)
            lock = (item or {}).get(s.ATTR_LOCK, {}).get("S")
            if lock != new_lock_value(self.tx.id, local.nonce):
                return (yield from self.lost_lock(local))
            if not flag(item, s.ATTR_DELETED):
                raise self.condition_false(req) from exc
        local.confirmed = True
        return attributes(local.pre) if req.return_values == "ALL_OLD" else {}

    def apply(self, local: Local, *, check_condition: bool) -> Step[dict[str, Any]]:
        """save image + apply: the write, with the pre-write image, under our lock."""
        req = local.request
        if check_condition and req.condition and local.transient:
            yield from self.check_on_absent(local)
        names = dict(req.params.get("ExpressionAttributeNames") or {})
        values = dict(req.params.get("ExpressionAttributeValues") or {})
        names.update({"#ddbtxl": s.ATTR_LOCK, "#ddbtxp": s.ATTR_APPLIED})
        values.update(
            {":ddbtxl": {"S": new_lock_value(self.tx.id, local.nonce)}, ":ddbtxt": {"BOOL": True}}
        )
        condition = APPLY
        if check_condition and not local.transient:
            condition = with_user_condition(req, condition)
        try:
            image_attrs = yield from self.image_attrs(local, values)
            if req.op == "put":
                return (yield from self._apply_put(local, image_attrs, condition, names, values))
            return (yield from self._apply_update(local, image_attrs, condition, names, values))
        except ValidationFailed as exc:
            raise InvalidRequestError(
                f"DynamoDB rejected the write: {exc}",
                tx_id=self.tx.id,
                table=req.table,
                key=req.key,
            ) from exc
        except ConditionFailed as exc:
            return (yield from self._settle_apply(local, values[":ddbtxl"]["S"], exc))

    def image_attrs(self, local: Local, values: dict[str, Any]) -> Step[dict[str, Any]]:
        """save image: in the item while both copies fit, else in the images table."""
        image = local.pre
        if image is None:
            return {}
        incoming = item_size(local.request.params.get("Item") or {}) + item_size(values)
        if item_size(image) > INLINE_IMAGE_LIMIT or (
            item_size(image) * 2 + incoming + PROTOCOL_OVERHEAD > MAX_ITEM_BYTES
        ):
            yield from self.save_image(local, image)
            return {s.ATTR_IMAGE_EXTERNAL: {"BOOL": True}}
        return {s.ATTR_IMAGE: {"M": image}}

    def _apply_put(
        self,
        local: Local,
        image_attrs: dict[str, Any],
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
    ) -> Step[dict[str, Any]]:
        req = local.request
        item = {
            **req.params["Item"],
            s.ATTR_LOCK: values[":ddbtxl"],
            s.ATTR_APPLIED: {"BOOL": True},
            **image_attrs,
        }
        if local.transient:
            item[s.ATTR_TRANSIENT] = {"BOOL": True}
        yield from self.guarded_put(req, item, condition, names, values)
        local.applied = local.confirmed = True
        return attributes(local.pre) if req.return_values == "ALL_OLD" else {}

    def _apply_update(
        self,
        local: Local,
        image_attrs: dict[str, Any],
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
    ) -> Step[dict[str, Any]]:
        req = local.request
        rv = req.return_values
        sets = "#ddbtxp = :ddbtxt"
        for i, (attr, value) in enumerate(image_attrs.items()):
            names[f"#ddbtxi{i}"] = attr
            values[f":ddbtxi{i}"] = value
            sets += f", #ddbtxi{i} = :ddbtxi{i}"
        resp = yield from self.user_update(
            req, sets, names, values, condition, "NONE" if rv == "ALL_OLD" else rv
        )
        local.applied = local.confirmed = True
        if rv == "ALL_OLD":
            return attributes(local.pre)
        return attributes(strip(resp.get("Attributes")))

    def _settle_apply(self, local: Local, lock: str, exc: ConditionFailed) -> Step[dict[str, Any]]:
        """The apply's condition failed: our write (response lost), a false condition, or
        the lock is gone."""
        req = local.request
        item = yield from self.p.read_item(req.table, req.key)
        held = (item or {}).get(s.ATTR_LOCK, {}).get("S") == lock
        if held and flag(item, s.ATTR_APPLIED):
            local.applied = local.confirmed = True  # our own write, its response lost
            assert item is not None
            return return_values(local, item)
        if held:
            raise self.condition_false(req) from exc
        return (yield from self.lost_lock(local))

    def guarded_put(
        self,
        req: Request,
        item: Item,
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
    ) -> Step[None]:
        """Put a whole item under ``condition``, passing only the placeholders it uses."""
        used_values = _used(values, condition)
        passed: dict[str, Any] = {"ExpressionAttributeValues": used_values} if used_values else {}
        yield from request(
            "put_item",
            TableName=req.table,
            Item=item,
            ConditionExpression=condition,
            ExpressionAttributeNames=_used(names, condition),
            **passed,
        )

    def user_update(
        self,
        req: Request,
        protocol_sets: str,
        names: dict[str, str],
        values: dict[str, Any],
        condition: str,
        return_values: str,
    ) -> Step[dict[str, Any]]:
        """The user's UpdateExpression with protocol assignments joined to its SET clause."""
        update = merge_set(req.params.get("UpdateExpression") or "", protocol_sets)
        return (
            yield from self.update(
                req, update, condition, names, values, ReturnValues=return_values
            )
        )

    def update(
        self,
        req: Request,
        update: str,
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
        **extra: Any,
    ) -> Step[dict[str, Any]]:
        """One conditional UpdateItem of the request's item, passing only the placeholders
        its expressions use (DynamoDB rejects unused ones)."""
        used_values = _used(values, update, condition)
        passed: dict[str, Any] = {"ExpressionAttributeValues": used_values} if used_values else {}
        response: dict[str, Any] = yield from request(
            "update_item",
            TableName=req.table,
            Key=req.key,
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeNames=_used(names, update, condition),
            **passed,
            **extra,
        )
        return response

    def save_image(self, local: Local, image: Item) -> Step[None]:
        """save image: one too large to ride inside the item goes to the images table
        (over several rows near 400 KB, all written before the item names them)."""
        rows = self.p.image_rows(self.tx.id, local.request.rid, image)
        if len(rows) == 1:
            yield from request("put_item", TableName=self.p.images_table, Item=rows[0])
        else:
            puts = [{"PutRequest": {"Item": r}} for r in rows]
            yield from self.p.write_batches(self.p.images_table, puts)
        local.external_image = True

    def lost_lock(self, local: Local) -> Step[dict[str, Any]]:
        """This request's lock is not on the item: taken over elsewhere, or rolled back.

        A take-over by another coordinator of this transaction is followed
        (the request goes on under the recorded nonce); otherwise the
        transaction was rolled back.
        """
        header = yield from self.tx.pending_header()
        req = local.request
        recorded = header.entries.get(req.rid)
        if recorded is not None and recorded.nonce != local.nonce:
            yield from self.tx.record.follow(header)
            return (yield from self.lock_and_apply(self.tx.record.current(local)))
        raise TransactionRolledBackError(
            "the item's lock was taken from this transaction",
            tx_id=self.tx.id,
            table=req.table,
            key=req.key,
        )

    # -- catch up -----------------------------------------------------------------------

    def catch_up(self, local: Local) -> Step[None]:
        """catch up: make sure a request recorded by someone else is locked and applied.

        If the item carries the recorded lock, it is adopted; otherwise the
        request is taken over under a fresh nonce first, so that a late lock by
        the coordinator that added it is stray. A take-over lost to another
        coordinator leaves the request unconfirmed under the winner's nonce:
        the commit catches it up again before deciding.
        """
        req = local.request
        item = yield from self.p.read_item(req.table, req.key)
        if (item or {}).get(s.ATTR_LOCK, {}).get("S") == new_lock_value(self.tx.id, local.nonce):
            assert item is not None
            yield from self.adopt_own_lock(local, item)
            return
        if local.seq > 1:
            # A later write needs the earlier ones on the item: never redone from scratch.
            yield from self.lost_lock(local)
        taken, won = yield from self.tx.record.take_over(local, new_nonce())
        if won:
            yield from self.lock_and_apply(taken)


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
