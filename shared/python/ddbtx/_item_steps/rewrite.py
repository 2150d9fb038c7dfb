"""apply, for a transaction's second and later writes to one item, under the same lock
(docs/protocol.md: the write's number in ``_tx:ap``, an update after a delete clears first)."""

from __future__ import annotations

from typing import Any

from .. import schema as s
from .._base.effects import Step
from .._base.items import Item, fence_of, fenced, flag, held, strip, write_marker
from .._base.requests import with_user_condition
from .._stores.record import new_lock_value
from ..errors import ConditionFailed, ValidationFailed
from .responses import attributes, rebuilt
from .view import Local
from .writes import UnderLock, image_sets

#: rewrite: under this request's lock, and only over exactly what the earlier writes left
#: (``{prior}`` is one of the two below), so it is applied once, and never over a
#: state this coordinator did not see.
REWRITE = "#ddbtxl = :ddbtxl AND {prior}"
#: ...the earlier writes left no ``_tx:ap`` (the first write was a delete),
NO_MARKER = "attribute_not_exists(#ddbtxp)"
#: ...or exactly the ``_tx:ap`` the write before this one set.
SAME_MARKER = "#ddbtxp = :ddbtxm"


def _cleared(seq: int) -> dict[str, Any]:
    return {"S": f"{seq}-"}


class Rewrites(UnderLock):
    """apply for writes 2, 3, ... to one item of one transaction."""

    def apply(self, local: Local, item: Item | None = None) -> Step[dict[str, Any]]:
        """Apply ``local`` (seq >= 2); ``item``: as just read (else our own knowledge)."""
        req = local.request
        if item is not None or local.prior is None:
            if item is None:
                item = yield from self.p.read_item(req.table, req.key)
            if (yield from self._from_item(local, item)):
                local.applied = local.confirmed = True
                rv = req.return_values
                after = strip(item) if not flag(item, s.ATTR_DELETED) else {}
                return attributes(after) if rv in ("ALL_NEW", "UPDATED_NEW") else {}
        assert local.prior is not None
        marker, absent, _ = local.prior
        before = yield from self._before(local, absent or marker == _cleared(local.seq))
        try:
            result = yield from self._write(local)
        except ValidationFailed as exc:
            raise (yield from self.writes.refusal(req, exc, sized=True)) from exc
        except ConditionFailed as exc:
            return (yield from self._settle(local, before, exc))
        local.applied = local.confirmed = True
        return attributes(before) if req.return_values == "ALL_OLD" else result

    def _from_item(self, local: Local, item: Item | None) -> Step[bool]:
        """Learn from the item what the earlier writes left; True if this write is there."""
        lock = new_lock_value(self.tx.id, local.nonce)
        known = local.fence if local.locked and local.fence is not None else fence_of(item)
        if not held(item, lock, known):
            # raises: a later write's lock is never re-taken (nor a late copy of it adopted)
            yield from self.steps.lost_lock(local)
        assert item is not None
        local.locked = True
        local.fence = known
        local.transient = flag(item, s.ATTR_TRANSIENT)
        local.external_image = flag(item, s.ATTR_IMAGE_EXTERNAL)
        marker = item.get(s.ATTR_APPLIED)
        absent = flag(item, s.ATTR_DELETED)
        imaged = s.ATTR_IMAGE in item or local.external_image
        if s.ATTR_IMAGE in item:
            local.pre = strip(item[s.ATTR_IMAGE]["M"])
        elif not local.transient and not imaged:
            local.pre = strip(item)  # only deletes so far: the item is as it was before
        local.prior = (marker, absent, imaged)
        return marker == write_marker(local.seq, local.request.op)

    def _before(self, local: Local, absent: bool) -> Step[Item | None]:
        """The item before this write, when old values are wanted (a lost answer has none)."""
        if local.request.return_values not in ("ALL_OLD", "UPDATED_OLD"):
            return None
        if absent:
            return {}
        return strip((yield from self.p.read_item(local.request.table, local.request.key)))

    def _names(self, local: Local) -> tuple[dict[str, str], dict[str, Any], str]:
        """Placeholders of the user's request and ours, and the REWRITE guard."""
        assert local.prior is not None
        marker = local.prior[0]
        names, values = self.writes.lock_names(local)
        names.update({"#ddbtxp": s.ATTR_APPLIED, "#ddbtxd": s.ATTR_DELETED})
        values.update({":ddbtxs": {"N": str(local.seq)}, ":ddbtxt": {"BOOL": True}})
        if marker is None:
            guard = REWRITE.format(prior=NO_MARKER)
        else:
            values[":ddbtxm"] = marker
            guard = REWRITE.format(prior=SAME_MARKER)
        return names, values, fenced(guard, local.fence, names, values)

    def _image(self, local: Local, values: dict[str, Any]) -> Step[dict[str, Any]]:
        if local.transient:
            return {}
        if local.external_image:
            return {s.ATTR_IMAGE_EXTERNAL: {"BOOL": True}}
        return (yield from self.writes.image_attrs(local, values))

    def _write(self, local: Local) -> Step[dict[str, Any]]:
        req = local.request
        assert local.prior is not None
        marker, absent, imaged = local.prior
        cleared = marker == _cleared(local.seq)
        if (absent or cleared) and req.condition:
            yield from self.writes.check_on_absent(local)
        names, values, guard = self._names(local)
        condition = guard if absent or cleared else with_user_condition(req, guard)
        rv = req.return_values
        protocol: Item = {s.ATTR_LOCK: values[":ddbtxl"], s.ATTR_APPLIED: values[":ddbtxs"]}
        if local.fence is not None:  # a put replaces the item: the fence stays on it
            protocol[s.ATTR_FENCE] = {"N": local.fence}
        if local.transient:
            protocol[s.ATTR_TRANSIENT] = {"BOOL": True}
        if req.op == "put":  # (ALL_OLD: the caller returns what it read before)
            item = {**req.params["Item"], **protocol, **(yield from self._image(local, values))}
            yield from self.writes.guarded_put(req, item, condition, names, values)
            return {}
        if req.op == "delete":
            sets = "#ddbtxd = :ddbtxt, #ddbtxp = :ddbtxs"
            if not imaged and not local.transient:  # only deletes so far: save the image
                image = yield from self.writes.image_attrs(local, values)
                sets += image_sets(image, names, values)
            yield from self.writes.update(req, f"SET {sets}", condition, names, values)
            return {}
        if absent and not cleared:
            # update of an absent item: clear it to its key first, as DynamoDB would see it
            clear = {**req.key, **protocol, **(yield from self._image(local, values))}
            clear[s.ATTR_APPLIED] = _cleared(local.seq)
            yield from self.writes.guarded_put(req, clear, condition, names, values)
            local.prior = (_cleared(local.seq), absent, True)
            names, values, condition = self._names(local)
        sets = "#ddbtxp = :ddbtxs"
        if absent or cleared or rv == "ALL_OLD":
            rv = rv if rv in ("ALL_NEW", "UPDATED_NEW") else "NONE"
        resp = yield from self.writes.user_update(req, sets, names, values, condition, rv)
        return attributes(strip(resp.get("Attributes")))

    def _settle(
        self, local: Local, before: Item | None, exc: ConditionFailed
    ) -> Step[dict[str, Any]]:
        """The write's condition failed: our write (lost answer), false, or the lock gone."""
        req = local.request
        item = yield from self.p.read_item(req.table, req.key)
        seen = local.prior
        assert seen is not None
        absent = seen[1] or seen[0] == _cleared(local.seq)
        if (yield from self._from_item(local, item)):
            local.applied = local.confirmed = True
            assert item is not None
            after = {} if flag(item, s.ATTR_DELETED) else strip(item)
            return rebuilt(req, before, after)
        if absent and local.prior != seen:
            # our clear landed, its answer lost: go on from it
            return (yield from self.apply(local, item))
        # What this transaction sees: its own earlier write, or nothing after its delete.
        sees = None if item is None or flag(item, s.ATTR_DELETED) else item
        raise (yield from self.writes.condition_false(req, sees)) from exc
