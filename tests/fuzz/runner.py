"""One case, natively on table T1 and through ddbtx on its twin T2: what a user sees of each.

The twins are the oracle's (:class:`oracle.runner.Twins`), and so are the normal forms
(:func:`oracle.runner.normal`: numbers canonical, sets as sets, binary as bytes) and the
protocol's leftovers (:func:`oracle.runner.leftovers`). Only the case's one item is
reset between cases: the tables are made once per emulator.
"""

from __future__ import annotations

import traceback
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from botocore.exceptions import ClientError

from ddbtx import aio
from helpers import leftover, scan
from oracle.runner import KEYS, Twins, leftovers, normal, reset, stored
from oracle.shapes import Item

from .strategies import Case


@dataclass(frozen=True)
class Observed:
    """What one side did with a case: its answer, and what it left behind."""

    #: ``Error.Code`` of a ClientError (every DynamoDB-level ddbtx error is one), else the
    #: class name of what was raised (ddbtx's own errors, or anything unexpected)
    code: str | None
    #: ``Error.Message`` (a ClientError), else ``str()`` of what was raised
    message: str | None
    #: The error's ``Item`` (ReturnValuesOnConditionCheckFailure=ALL_OLD)
    old: Any
    #: The returned ``Attributes``; none and empty ones alike (dynalite returns ``{}``)
    attributes: Any
    #: The item the table holds afterwards, protocol attributes included
    item: Any
    #: Protocol attributes (``_tx:``) left on the item
    protocol: tuple[str, ...]
    #: Left behind: TX records, spilled rows, images, and any other item of the table
    leftovers: tuple[str, ...]
    #: Where what was raised (not a ClientError) came from: the package of the innermost
    #: frame (``moto``: the emulator failed inside, in process). Not compared.
    origin: str | None = field(default=None, compare=False)


#: The fields compared, in order of importance.
FIELDS = ("code", "message", "old", "attributes", "item", "protocol", "leftovers")


def _answer(response: Item) -> Any:
    return normal(response.get("Attributes") or None)


def _failure(exc: Exception) -> tuple[str, str, Any]:
    """Code, message and ``Item`` of what a user caught."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        item = exc.response.get("Item")
        return str(error.get("Code")), str(error.get("Message")), normal(item) if item else None
    return type(exc).__name__, str(exc), None


def _origin(exc: Exception) -> str | None:
    """The package that raised ``exc`` (not a ClientError): its innermost frame's."""
    if isinstance(exc, ClientError):
        return None
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return None
    parts = PurePath(frames[-1].filename).parts
    if "site-packages" in parts:
        return parts[parts.index("site-packages") + 1]
    return "ddbtx" if "ddbtx" in parts else parts[-1]


def _observe(
    twins: Twins, table: str, case: Case, response: Item | None, exc: Exception | None
) -> Observed:
    item = stored(twins, table, case)
    protocol = tuple(leftover(item))
    code, message, old = _failure(exc) if exc is not None else (None, None, None)
    return Observed(
        code=code,
        message=message,
        old=old,
        attributes=_answer(response) if response is not None else None,
        item=normal(item),
        protocol=protocol,
        leftovers=_left_by_ddbtx(twins, table, case) if table == twins.ours[case.schema] else (),
        origin=_origin(exc) if exc is not None else None,
    )


def _left_by_ddbtx(twins: Twins, table: str, case: Case) -> tuple[str, ...]:
    """The protocol's rows, and any item of the twin but the case's (a probe's, say)."""
    key = KEYS[case.schema].stored
    strays = [
        f"item {normal({k: row[k] for k in key})}"
        for row in scan(twins.client, table)
        if normal({k: row.get(k) for k in key}) != normal(key)
    ]
    return tuple(leftovers(twins) + strays)


def native(twins: Twins, case: Case) -> Observed:
    """The case sent to T1 with the plain boto3 client: the reference."""
    table = twins.native[case.schema]
    reset(twins, table, case)
    response: Item | None = None
    try:
        response = getattr(twins.client, f"{case.op}_item")(**case.request(table))
    except Exception as exc:  # any failure is what the user sees: compared, not raised
        return _observe(twins, table, case, None, exc)
    return _observe(twins, table, case, response, None)


async def _in_aio_transaction(tm: aio.TransactionManager, op: str, params: Item) -> Item:
    async with tm.transaction() as tx:
        result: Item = await getattr(tx, f"{op}_item")(**params)
    return result


def through_ddbtx(twins: Twins, case: Case) -> Observed:
    """The case sent to T2 inside a one-request transaction (sync, or ``ddbtx.aio``)."""
    table = twins.ours[case.schema]
    reset(twins, table, case)
    params = case.request(table)
    response: Item | None = None
    try:
        if case.aio:
            coroutine: Coroutine[Any, Any, Item] = _in_aio_transaction(
                twins.aio_tm, case.op, params
            )
            response = twins.run(coroutine)
        else:
            with twins.tm.transaction() as tx:
                response = getattr(tx, f"{case.op}_item")(**params)
    except Exception as exc:  # ddbtx's errors, and anything else it let through
        return _observe(twins, table, case, None, exc)
    return _observe(twins, table, case, response, None)


@dataclass(frozen=True)
class Difference:
    """One field where ddbtx's observation differs from the native one."""

    field: str
    native: Any
    ours: Any

    def __str__(self) -> str:
        return f"{self.field}: native {self.native!r:.300}, ddbtx {self.ours!r:.300}"


def differences(theirs: Observed, ours: Observed) -> list[Difference]:
    """Every field that differs (none: ddbtx did what DynamoDB did)."""
    return [
        Difference(name, getattr(theirs, name), getattr(ours, name))
        for name in FIELDS
        if getattr(theirs, name) != getattr(ours, name)
    ]
