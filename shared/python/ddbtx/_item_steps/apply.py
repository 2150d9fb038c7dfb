"""save image + apply, and mark deleted: a transaction's first write to a locked item."""

from __future__ import annotations

from typing import Any

from .. import schema as s
from .._base.effects import Step
from .._base.items import fenced, flag, held, strip
from .._base.requests import with_user_condition
from ..errors import ConditionFailed, ValidationFailed
from .responses import attributes, return_values
from .view import Local
from .writes import UnderLock, image_sets

#: apply: only under this request's lock, and only once.
APPLY = "#ddbtxl = :ddbtxl AND attribute_not_exists(#ddbtxp)"
#: mark deleted: only under this request's lock.
HELD_BY_REQUEST = "#ddbtxl = :ddbtxl"


class Applies(UnderLock):
    """apply and mark deleted for first writes to items of one transaction."""

    def mark_deleted(self, local: Local) -> Step[dict[str, Any]]:
        """apply (delete): mark the item for deletion at commit, checking its condition."""
        req = local.request
        if req.condition and local.transient:
            yield from self.writes.check_on_absent(local)
        names, values = self.writes.lock_names(local)
        names["#ddbtxd"] = s.ATTR_DELETED
        values[":ddbtxt"] = {"BOOL": True}
        condition = fenced(HELD_BY_REQUEST, local.fence, names, values)
        if not local.transient:
            condition = with_user_condition(req, condition)
        try:
            yield from self.writes.update(req, "SET #ddbtxd = :ddbtxt", condition, names, values)
        except ValidationFailed as exc:
            raise (yield from self.writes.refusal(req, exc, sized=True)) from exc
        except ConditionFailed as exc:
            item = yield from self.p.read_item(req.table, req.key)
            if not held(item, values[":ddbtxl"]["S"], local.fence):
                return (yield from self.steps.lost_lock(local))
            if not flag(item, s.ATTR_DELETED):
                raise (yield from self.writes.condition_false(req, item)) from exc
        local.confirmed = True
        return attributes(local.pre) if req.return_values == "ALL_OLD" else {}

    def apply(self, local: Local, *, check_condition: bool) -> Step[dict[str, Any]]:
        """save image + apply: the write, with the pre-write image, under our lock."""
        req = local.request
        if check_condition and req.condition and local.transient:
            yield from self.writes.check_on_absent(local)
        names, values = self.writes.lock_names(local)
        names["#ddbtxp"] = s.ATTR_APPLIED
        values[":ddbtxt"] = {"BOOL": True}
        condition = fenced(APPLY, local.fence, names, values)
        if check_condition and not local.transient:
            condition = with_user_condition(req, condition)
        try:
            return (yield from self._write(local, condition, names, values))
        except ValidationFailed as exc:
            raise (yield from self.writes.refusal(req, exc)) from exc
        except ConditionFailed as exc:
            return (yield from self._settle_apply(local, values[":ddbtxl"]["S"], exc))

    def _write(
        self, local: Local, condition: str, names: dict[str, str], values: dict[str, Any]
    ) -> Step[dict[str, Any]]:
        """save image, then the put or the update, with the protocol's attributes."""
        req = local.request
        rv = req.return_values
        image_attrs = yield from self.writes.image_attrs(local, values)
        if req.op == "put":
            item = {
                **req.params["Item"],
                s.ATTR_LOCK: values[":ddbtxl"],
                s.ATTR_APPLIED: {"BOOL": True},
                **image_attrs,
            }
            if local.fence is not None:  # a put replaces the item: the fence stays on it
                item[s.ATTR_FENCE] = {"N": local.fence}
            if local.transient:
                item[s.ATTR_TRANSIENT] = {"BOOL": True}
            yield from self.writes.guarded_put(req, item, condition, names, values)
            after = {}
        else:
            sets = "#ddbtxp = :ddbtxt" + image_sets(image_attrs, names, values)
            resp = yield from self.writes.user_update(
                req, sets, names, values, condition, "NONE" if rv == "ALL_OLD" else rv
            )
            after = attributes(strip(resp.get("Attributes")))
        local.applied = local.confirmed = True
        return attributes(local.pre) if rv == "ALL_OLD" else after

    def _settle_apply(self, local: Local, lock: str, exc: ConditionFailed) -> Step[dict[str, Any]]:
        """The apply's condition failed: our write (lost answer), false, or the lock gone."""
        req = local.request
        item = yield from self.p.read_item(req.table, req.key)
        if held(item, lock, local.fence) and flag(item, s.ATTR_APPLIED):
            local.applied = local.confirmed = True  # our own write, its response lost
            assert item is not None
            return return_values(local, item)
        if held(item, lock, local.fence):
            raise (yield from self.writes.condition_false(req, item)) from exc
        return (yield from self.steps.lost_lock(local))
