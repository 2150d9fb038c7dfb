"""The asyncio driver: runs a protocol step (:mod:`ddbtx._base.effects`) on aiobotocore."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .._base.drive import perform
from .._base.effects import Gather, Run, Step, first_failure, raised_through

T = TypeVar("T")


async def drive(
    step: Step[T], client: Any, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
) -> T:
    """Run ``step`` to its end on ``client`` (an aiobotocore DynamoDB client)."""
    with raised_through(client):
        for effect in (run := Run(step)):
            with run.outcome() as out:
                if isinstance(effect, Gather):  # all end before the first failure is thrown
                    out.value = await asyncio.gather(
                        *(drive(sub, client, sleep) for sub in effect.steps),
                        return_exceptions=True,
                    )
                    first_failure(out.value)
                else:
                    out.value = await perform(client, sleep, effect)
        return run.result
