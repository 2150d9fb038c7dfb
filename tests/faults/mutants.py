"""Workload 5: deliberately broken protocol variants the checkers must catch.

Each mutant patches one protocol step of ``ddbtx`` for the duration of one run
(the patch is undone afterwards), then runs the probe workload most likely to
expose it. A mutant the probe does not catch means the harness has no teeth
for that defect, and fails the run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from unittest import mock

import ddbtx._item_steps.writes as writes_module
from ddbtx import schema as s
from ddbtx._base.effects import Step, request
from ddbtx._base.items import FENCED, UNFENCED
from ddbtx._item_steps.apply import APPLY, Applies
from ddbtx._stores.completion import Completion, Entry, Header
from ddbtx.errors import ConditionFailed

from .bank import run_bank
from .env import Env
from .report import Report
from .single import run_single

#: The apply step's condition: the write lands only under this request's lock, once.
APPLY_CONDITION = APPLY


def _prune(params: dict[str, Any]) -> dict[str, Any]:
    """Drop placeholders no expression uses any more (DynamoDB rejects unused ones)."""
    text = " ".join(
        str(params.get(k) or "")
        for k in ("UpdateExpression", "ConditionExpression", "ProjectionExpression")
    )
    used = set(re.findall(r"[#:][A-Za-z0-9_]+", text))
    for field in ("ExpressionAttributeNames", "ExpressionAttributeValues"):
        if field in params:
            kept = {k: v for k, v in params[field].items() if k in used}
            if kept:
                params[field] = kept
            else:
                del params[field]
    return params


@contextmanager
def skip_image_save() -> Iterator[None]:
    """save image: the write is applied with no pre-write image (in-item or external)."""
    original = Applies.apply

    def apply(self: Applies, local: Any, *, check_condition: bool) -> Step[dict[str, Any]]:
        kept, local.pre = local.pre, None
        try:
            return (yield from original(self, local, check_condition=check_condition))
        finally:
            local.pre = kept

    with mock.patch.object(Applies, "apply", apply):
        yield


def _patched_request(
    rewrite: Callable[[str, dict[str, Any]], dict[str, Any] | None],
) -> Callable[..., Step[Any]]:
    """A ``request`` for the module that sends the item steps' writes
    (:mod:`ddbtx._item_steps.writes`) whose requests ``rewrite`` may alter or answer."""

    def patched(operation: str, *, resent: list[bool] | None = None, **params: Any) -> Step[Any]:
        answer = rewrite(operation, params)
        if answer is not None:
            return answer
        return (yield from request(operation, resent=resent, **params))

    return patched


def _without_fence(condition: str) -> str:
    """``condition`` without its fence clause (``items.fenced``'s), if it has one."""
    for fence in (FENCED, UNFENCED):
        condition = condition.replace(" AND " + fence.format(name="#ddbtxf", value=":ddbtxf"), "")
    return condition


@contextmanager
def drop_owner_condition() -> Iterator[None]:
    """apply: the write no longer requires this request's lock on the item (nor the fence
    the lock left: either alone would still refuse the write under another's lock)."""

    def rewrite(operation: str, params: dict[str, Any]) -> None:
        condition = str(params.get("ConditionExpression") or "")
        if APPLY_CONDITION in condition:
            condition = condition.replace(APPLY_CONDITION, "attribute_not_exists(#ddbtxp)")
            params["ConditionExpression"] = _without_fence(condition)
            _prune(params)

    with mock.patch.object(writes_module, "request", _patched_request(rewrite)):
        yield


@contextmanager
def drop_fence() -> Iterator[None]:
    """apply, complete: writes under a lock no longer name the fence the lock left, only
    the lock (as before issue 34), so a late copy of a lock makes old writes under it pass."""

    def rewrite(operation: str, params: dict[str, Any]) -> None:
        condition = str(params.get("ConditionExpression") or "")
        if _without_fence(condition) != condition:
            params["ConditionExpression"] = _without_fence(condition)
            _prune(params)

    with mock.patch.object(writes_module, "request", _patched_request(rewrite)):
        yield


@contextmanager
def blind_retry() -> Iterator[None]:
    """lock/apply: a failed condition is taken for our own retried write, without reading."""

    def patched(operation: str, *, resent: list[bool] | None = None, **params: Any) -> Step[Any]:
        try:
            return (yield from request(operation, resent=resent, **params))
        except ConditionFailed:
            if "ddbtxl" in str(params.get("ConditionExpression") or "") or (
                operation == "put_item" and s.ATTR_LOCK in params.get("Item", {})
            ):
                return {}
            raise

    with mock.patch.object(writes_module, "request", patched):
        yield


@contextmanager
def delete_record_first() -> Iterator[None]:
    """complete + clean: the TX record is deleted before the items are unlocked."""
    original = Completion.complete

    def complete(self: Completion, header: Header, *args: Any, **kwargs: Any) -> Step[int]:
        if not header.completed:
            yield from request(
                "delete_item",
                TableName=self.records.table,
                Key=self.records.header_key(header.tx_id),
            )
        return (yield from original(self, header, *args, **kwargs))

    with mock.patch.object(Completion, "complete", complete):
        yield


@contextmanager
def restore_after_commit() -> Iterator[None]:
    """complete: a committed transaction's items get their saved images back."""

    def complete_item(
        self: Completion, header: Header, entry: Entry, known: dict[str, Any] | None = None
    ) -> Step[None]:
        yield from self.undo(header.tx_id, entry.table, entry.key, None)

    with mock.patch.object(Completion, "complete_item", complete_item):
        yield


@dataclass(frozen=True)
class Mutant:
    name: str
    patch: Callable[[], Any]
    probe: Callable[[Env, Report], None]
    workload: str = "single"  #: the ``--only`` workload that replays the probe's findings
    #: Whether the explorer (one transaction and its rescuers) can show it: a mutant that
    #: only shows once a later transaction changed the items cannot be.
    one_transaction: bool = True


def _single(shape: tuple[str, ...], kinds: tuple[str, ...]) -> Callable[[Env, Report], None]:
    def probe(env: Env, report: Report) -> None:
        run_single(env, report, shape_filter=[shape], kinds=kinds, skew=False, stop_after=1)

    return probe


def _bank(env: Env, report: Report) -> None:
    run_bank(env, report, rounds=12, crash_rate=0.0, pause_rate=0.0)


MUTANTS = (
    Mutant("skip-image-save", skip_image_save, _single(("update",), ("before",))),
    Mutant("drop-owner-condition", drop_owner_condition, _single(("update",), ("pause",))),
    # Late copies of a lock and the write under it re-apply the same write unless another
    # transaction changed the item in between: only the harness's copy schedules have one.
    Mutant("drop-fence", drop_fence, _single(("update",), ("copy",)), one_transaction=False),
    Mutant("blind-retry", blind_retry, _bank, "bank"),
    Mutant("delete-record-first", delete_record_first, _single(("update", "update"), ("before",))),
    Mutant("restore-after-commit", restore_after_commit, _single(("update",), ("lost",))),
)


def by_name(name: str) -> Mutant:
    for mutant in MUTANTS:
        if mutant.name == name:
            return mutant
    raise ValueError(f"mutant must be one of {[m.name for m in MUTANTS]}, not {name!r}")


def caught(env: Env, mutant: Mutant, seed: int) -> Report:
    """Run the mutant's probe with the mutant in place; the report's anomalies are its catches."""
    report = Report(mutant.workload, env.kind, seed, replay_args=("--mutant", mutant.name))
    with mutant.patch():
        mutant.probe(env, report)
    return report


def run_mutants(env: Env, report: Report, names: list[str] | None = None) -> None:
    for mutant in MUTANTS:
        if names and mutant.name not in names:
            continue
        found = caught(env, mutant, report.seed)
        report.counts["mutants"] += 1
        report.counts["transactions"] += found.counts["transactions"]
        if found.anomalies:
            report.counts["mutants_caught"] += 1
        else:
            report.anomaly(f"mutant {mutant.name} escaped every checker", "--mutant", mutant.name)
