"""The sync driver: runs a protocol step (:mod:`ddbtx._effects`) on a boto3 client.

It only carries requests and answers; every decision is the step's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from ._effects import Call, Effect, Run, Step

T = TypeVar("T")


def perform(client: Any, sleep: Callable[[float], Any], effect: Effect) -> Any:
    """Send ``effect`` through ``client``, or sleep: the answer, or for an asyncio
    client and sleep, the awaitable of it (so both drivers perform effects alike)."""
    if isinstance(effect, Call):
        return getattr(client, effect.operation)(**effect.params)
    return sleep(effect.seconds)


def drive(step: Step[T], client: Any, sleep: Callable[[float], None] = time.sleep) -> T:
    """Run ``step`` to its end on ``client`` (a boto3 DynamoDB client); its result.

    Examples
    --------
    >>> from ddbtx._effects import request
    >>> drive(request("describe_table", TableName="Accounts"), client)  # doctest: +SKIP
    {'Table': {...}}
    """
    for effect in (run := Run(step)):
        with run.outcome() as out:
            out.value = perform(client, sleep, effect)
    return run.result
