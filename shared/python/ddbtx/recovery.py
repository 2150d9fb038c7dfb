"""Operator actions on one transaction or item (inspect, recover, break a lock): safe to
repeat, each returns JSON data."""

from __future__ import annotations

import logging
from typing import Any, Final

from . import schema as s
from ._base.effects import Step
from ._base.items import Item, applied, as_json, is_locked_by, lock_owner
from ._base.parts import from_json
from ._coordinator.exactly import check_transaction_id
from ._stores.completion import Header, SweepOutcome
from .manager import TransactionManager

logger = logging.getLogger(__name__)

STATE_NAMES: Final = {
    s.STATE_PENDING: "pending",
    s.STATE_COMMITTED: "committed",
    s.STATE_ROLLED_BACK: "rolled_back",
}


def key_to_json(key: Item) -> dict[str, Any]:
    """A DynamoDB key as JSON: binary values become base64 text."""
    return {name: as_json(value) for name, value in key.items()}


def key_from_json(key: dict[str, Any]) -> Item:
    """The inverse of :func:`key_to_json`."""
    return {name: from_json(value) for name, value in key.items()}


def _find(tm: TransactionManager, tx_id: str) -> Step[tuple[str, Header | None]]:
    """The internal id and header of the record ``tx_id`` names (internal, else caller's id)."""
    check_transaction_id(tx_id)
    records = tm.protocol.records
    header = yield from records.read_header(tx_id)
    if header is not None:
        return tx_id, header
    named = yield from tm.protocol.aliases.read(tx_id)
    if named is None:
        return tx_id, None
    return named, (yield from records.read_header(named))


def not_found(tm: TransactionManager, tx_id: str) -> str:
    """Why no record may be found for ``tx_id``: the one answer the CLI and the recovery
    function give for an unknown id, with the table and Region that were asked."""
    region = getattr(getattr(tm.client, "meta", None), "region_name", None) or "no Region"
    return (
        f"no transaction {tx_id!r} in {tm.transactions_table} ({region}): it may have "
        "completed and been deleted (a transaction() block deletes its record on exit; the "
        "sweeper deletes a kept one after delete_after), or belong to another transactions "
        "table or Region, or never have begun"
    )


def inspect(tm: TransactionManager, tx_id: str) -> dict[str, Any]:
    """A transaction's state, items and the locks it still holds (``tx_id``: either id).

    Raises
    ------
    InvalidTransactionIdError
        ``tx_id`` is neither (empty, over 1,024 UTF-8 bytes, not valid Unicode).

    Examples
    --------
    >>> inspect(tm, "0187f3c2a1b4c5d6-0a1b2c3d4e5f")["locks_held"]  # doctest: +SKIP
    0
    >>> inspect(tm, "order-42")["transaction_id"]  # the caller's id  # doctest: +SKIP
    '0187f3c2a1b4c5d6-0a1b2c3d4e5f'
    """
    return tm.protocol.run(inspect_step(tm, tx_id))


def inspect_step(tm: TransactionManager, tx_id: str) -> Step[dict[str, Any]]:
    """The step of :func:`inspect`, for any driver."""
    tx_id, header = yield from _find(tm, tx_id)
    if header is None:
        reason = not_found(tm, tx_id)
        return {
            "transaction_id": tx_id, "found": False, "items": [], "locks_held": 0,
            "reason": reason,
        }  # fmt: skip
    items = []
    for entry in header.entries.values():
        item = yield from tm.protocol.read_item(entry.table, entry.key)
        held = is_locked_by(item, tx_id)
        items.append(
            {
                "table": entry.table,
                "key": key_to_json(entry.key),
                "operation": entry.op,
                "exists": item is not None,
                "locked": held,
                # Another transaction's lock on the item, for the operator's next step.
                "locked_by": lock_owner(item),
                "write_applied": held and applied(item),
            }
        )
    return {
        "transaction_id": tx_id,
        "found": True,
        "caller_id": header.caller_id,
        "state": STATE_NAMES.get(header.state, header.state),
        "completed": header.completed,
        "version": header.version,
        "updated_ms": header.updated_ms,
        "age_seconds": round((tm.protocol.now_ms() - header.updated_ms) / 1000, 3),
        # Wound-wait: blocked on an older transaction's lock / the one that rolled it back.
        "waiting": header.waiting,
        "decided_by": header.decided_by,
        "items": items,
        "locks_held": sum(1 for i in items if i["locked"]),
    }


def recover(tm: TransactionManager, tx_id: str) -> dict[str, Any]:
    """Drive one transaction to completion: forward if committed, back if pending (any age).

    Examples
    --------
    >>> recover(tm, tx_id)["outcome"]  # doctest: +SKIP
    'rolled_back'
    """
    return tm.protocol.run(recover_step(tm, tx_id))


def recover_step(tm: TransactionManager, tx_id: str) -> Step[dict[str, Any]]:
    """The step of :func:`recover`, for any driver."""
    tx_id, before = yield from _find(tm, tx_id)
    if before is None:
        reason = not_found(tm, tx_id)
        return {
            "transaction_id": tx_id, "outcome": "missing", "state_before": None,
            "reason": reason,
        }  # fmt: skip
    outcome = "already_completed" if before.completed else (yield from _resolve(tm, before))
    logger.info("recover %s: %s", tx_id, outcome)
    return {
        "transaction_id": tx_id,
        "outcome": outcome,
        "state_before": STATE_NAMES.get(before.state, before.state),
        "after": (yield from inspect_step(tm, tx_id)),
    }


def _resolve(tm: TransactionManager, header: Header) -> Step[str]:
    """Roll back and complete, conditioned on the version read (changed since: read again)."""
    for _ in range(5):
        outcome = yield from tm.protocol.resolve(
            header.tx_id, header, expect_version=header.version
        )
        if outcome is not SweepOutcome.ACTIVE:
            return str(outcome.value)
        current = yield from tm.protocol.records.read_header(header.tx_id)
        if current is None:
            return str(SweepOutcome.MISSING.value)
        header = current
    return str(SweepOutcome.ACTIVE.value)


def break_lock(tm: TransactionManager, table: str, key: Item) -> dict[str, Any]:
    """Release one item's lock whose transaction record is gone or completed (else refused).

    Examples
    --------
    >>> break_lock(tm, "Accounts", {"pk": {"S": "alice"}})["outcome"]  # doctest: +SKIP
    'released'
    """
    return tm.protocol.run(break_lock_step(tm, table, key))


def break_lock_step(tm: TransactionManager, table: str, key: Item) -> Step[dict[str, Any]]:
    """The step of :func:`break_lock`, for any driver."""
    yield from tm.schemas.types(table)  # an unknown table fails here, naming it
    item = yield from tm.protocol.read_item(table, key)
    owner = lock_owner(item)
    result: dict[str, Any] = {"table": table, "key": key_to_json(key), "transaction_id": owner}
    if item is None or owner is None:
        return {**result, "outcome": "not_locked"}
    header = yield from tm.protocol.records.read_header(owner)
    if header is not None and not header.completed:
        return {
            **result,
            "outcome": "refused",
            "reason": f"transaction {owner} is {STATE_NAMES.get(header.state, header.state)} "
            "and not completed: recover it instead",
        }
    # The lock is stray: undo restores the item's image under the lock's own condition.
    yield from tm.protocol.undo(owner, table, key, item)
    logger.info("broke lock of %s on %s %s", owner, table, key)
    return {**result, "outcome": "released", "record": "completed" if header else "missing"}
