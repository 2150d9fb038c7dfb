"""Item steps of one transaction: lock (+apply), adopt our own lock, lost lock, catch up."""

from __future__ import annotations

import typing
from typing import Any

from botocore.exceptions import BotoCoreError

from .. import schema as s
from .._base.effects import Step, was_resent
from .._base.items import (
    Item,
    fence_of,
    flag,
    lock_owner,
    moved_fence,
    new_fence_start,
    strip,
)
from .._base.requests import with_user_condition
from .._stores.record import Header, new_lock_value, new_nonce
from ..errors import ConditionFailed, DynamoDBError, TransactionRolledBackError, ValidationFailed
from .apply import Applies
from .contention import Contending, ItemContention
from .responses import attributes, return_values, wrap
from .rewrite import Rewrites
from .view import Local
from .writes import ItemWrites

#: lock: the item exists and nobody holds it (the request's own condition is ANDed in).
LOCK_EXISTING = "attribute_exists(#ddbtxk) AND attribute_not_exists(#ddbtxl)"
#: lock (insert): the item is absent, so one created and committed meanwhile is never ours.
LOCK_INSERT = "attribute_not_exists(#ddbtxk)"


class Coordinator(Contending, typing.Protocol):
    def pending_header(self) -> Step[Header]: ...
    def own(self, local: Local) -> Step[dict[str, Any]]: ...


class ItemSteps:
    """The per-item steps of one transaction (any of its coordinators)."""

    def __init__(self, tx: Coordinator) -> None:
        self.tx = tx
        self.p = tx.p
        self.writes = ItemWrites(tx, tx.p)
        self.applies = Applies(self)
        self.rewrites = Rewrites(self)

    def lock_and_apply(self, local: Local) -> Step[dict[str, Any]]:
        """lock (+apply): take the item's lock with this request's nonce and make the write."""
        req = local.request
        if local.locked:  # upgrade of our own read lock, or the retry of an interrupted write
            return (yield from self._apply_locked(local))
        # A put guesses insert or replace as the last put on its table did (a wrong guess
        # costs one failed write); other requests usually find their item.
        path = self.p.put_paths.get(req.table, "insert") if req.op == "put" else "existing"
        guessing = True
        contender = ItemContention(self.tx, req)
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
                    raise (yield from self.writes.refusal(req, exc, sized=True)) from exc
                except (DynamoDBError, BotoCoreError):
                    local.maybe_landed = True  # no answer: it may have been applied
                    raise
            item = yield from self.p.read_item(req.table, req.key)
            owner = lock_owner(item)
            if item is None or owner is None:
                observed = "insert" if item is None else "existing"
                # Failed on a free item: the request's condition is false, or a holder released
                # the item in between. Only a verdict on the item as it is now tells which.
                if observed == path and req.condition and not polling:
                    yield from self.writes.check_condition_now(local, absent=item is None)
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
        """Our lock is on the item: the request to adopt it for, or None after undoing a stray."""
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

    def lock_existing(self, local: Local) -> Step[dict[str, Any]]:
        """lock: an existing, unlocked item; the user's condition is checked in the same write."""
        req = local.request
        names, values = self.writes.lock_names(local)
        # The fence moves on with every lock, so a late copy of an old lock never puts
        # back the value the writes under that lock are conditioned on.
        start = new_fence_start()
        names["#ddbtxf"] = s.ATTR_FENCE
        values.update({":ddbtxz": {"N": start}, ":ddbtxo": {"N": "1"}})
        sets = "#ddbtxl = :ddbtxl, #ddbtxf = if_not_exists(#ddbtxf, :ddbtxz) + :ddbtxo"
        if req.op == "delete":
            names["#ddbtxd"] = s.ATTR_DELETED
            values[":ddbtxt"] = {"BOOL": True}
            sets += ", #ddbtxd = :ddbtxt"
        condition = with_user_condition(req, LOCK_EXISTING)
        resent: list[bool] = []
        resp = yield from self.writes.update(
            req, f"SET {sets}", condition, names, values, ReturnValues="ALL_OLD", resent=resent
        )
        local.pre = strip(resp.get("Attributes"))
        local.fence = moved_fence(fence_of(resp.get("Attributes")), start)
        local.transient = False
        local.locked = True
        if any(resent) or local.maybe_landed:
            yield from self.prove_lock()
        if req.op in ("put", "update"):
            return (yield from self.applies.apply(local, check_condition=False))
        local.confirmed = True
        if req.op == "get":
            return wrap(local.pre)
        return attributes(local.pre) if req.return_values == "ALL_OLD" else {}

    def prove_lock(self) -> Step[None]:
        """prove lock: a lock may be a second one under its nonce (an earlier attempt of
        ours landed, its answer lost), landing after the item was completed; a write under it
        would then be made twice. Only a record still pending proves it is not (a decided
        one is completed, and raises)."""
        yield from self.tx.pending_header()

    def lock_insert(self, local: Local) -> Step[dict[str, Any]]:
        """lock (+apply): the item does not exist; insert it locked, with the write if any."""
        req = local.request
        names, values = self.writes.lock_names(local)
        true = {"BOOL": True}
        condition = with_user_condition(req, LOCK_INSERT)
        local.pre, local.transient = None, True
        # A new item's fence starts anywhere: not at a value an old lock of a deleted
        # item with this key left (a copy of that lock would meet it again).
        local.fence = new_fence_start()
        fence = {"N": local.fence}
        protocol = {s.ATTR_LOCK: values[":ddbtxl"], s.ATTR_TRANSIENT: true, s.ATTR_FENCE: fence}
        if req.op == "update":
            names.update(
                {"#ddbtxn": s.ATTR_TRANSIENT, "#ddbtxp": s.ATTR_APPLIED, "#ddbtxf": s.ATTR_FENCE}
            )
            values.update({":ddbtxt": true, ":ddbtxf": fence})
            sets = "#ddbtxl = :ddbtxl, #ddbtxn = :ddbtxt, #ddbtxp = :ddbtxt, #ddbtxf = :ddbtxf"
            rv = req.return_values if req.return_values in ("ALL_NEW", "UPDATED_NEW") else "NONE"
            resp = yield from self.writes.user_update(req, sets, names, values, condition, rv)
            local.applied = local.locked = local.confirmed = True
            return attributes(strip(resp.get("Attributes")))
        if req.op == "put":
            item = {**req.params["Item"], **protocol, s.ATTR_APPLIED: true}
            local.applied = True
        else:
            item = {**req.key, **protocol}
            if req.op == "delete":
                item[s.ATTR_DELETED] = true
        yield from self.writes.guarded_put(req, item, condition, names, values)
        local.locked = local.confirmed = True
        return {}

    def adopt_own_lock(self, local: Local, item: Item) -> Step[dict[str, Any]]:
        """The record's lock for this request is on the item: apply the write if not yet."""
        if local.seq > 1:
            return (yield from self.rewrites.apply(local, item))
        local.locked = True
        local.fence = fence_of(item)
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
        marking = op == "delete" and not flag(item, s.ATTR_DELETED)
        if op in ("put", "update") or marking:
            # A lock we did not take ourselves just now: it too may be a late second one.
            yield from self.prove_lock()
        if op in ("put", "update"):
            return (yield from self.applies.apply(local, check_condition=True))
        if marking:
            return (yield from self.applies.mark_deleted(local))
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
            return (yield from self.applies.mark_deleted(local))
        return (yield from self.applies.apply(local, check_condition=True))

    def lost_lock(self, local: Local) -> Step[dict[str, Any]]:
        """This request's lock is not on the item: rejoin a take-over, or it was rolled back."""
        header = yield from self.tx.pending_header()
        req = local.request
        recorded = header.entries.get(req.rid)
        if recorded is not None and recorded.nonce != local.nonce:
            yield from self.tx.record.follow(header)
            return (yield from self.rejoin(self.tx.record.current(local)))
        raise TransactionRolledBackError(
            "the item's lock was taken from this transaction",
            tx_id=self.tx.id,
            table=req.table,
            key=req.key,
        )

    def rejoin(self, local: Local) -> Step[dict[str, Any]]:
        """rejoin: another coordinator took the request over. Its lock is adopted where it
        is on the item; a free item is taken over again, under a nonce only we lock with:
        our lock under the recorded one could land after that coordinator completed the
        item, and the write would be made twice."""
        req = local.request
        while True:
            item = yield from self.p.read_item(req.table, req.key)
            if (item or {}).get(s.ATTR_LOCK, {}).get("S") == new_lock_value(
                self.tx.id, local.nonce
            ):
                assert item is not None
                return (yield from self.adopt_own_lock(local, item))
            local, won = yield from self.tx.record.take_over(local, new_nonce())
            if won:
                return (yield from self.lock_and_apply(local))

    def catch_up(self, local: Local) -> Step[None]:
        """catch up: a request recorded elsewhere, locked and applied. Without the recorded
        lock on the item, it is taken over first, so a late lock by its adder is stray."""
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
