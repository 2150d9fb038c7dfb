"""The sync driver: runs a protocol step (:mod:`ddbtx._base.effects`) on a boto3 client."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from .effects import Call, Gather, Run, Sleep, Step, first_failure, raised_through

T = TypeVar("T")
#: How a gather's steps run: ``parallel(run_one, steps)``, results (or exceptions) in order.
Parallel = Callable[[Callable[[Step[Any]], Any], list[Step[Any]]], list[Any]]


def one_by_one(run_one: Callable[[Step[Any]], Any], steps: list[Step[Any]]) -> list[Any]:
    """Run a gather's steps in turn (no pool): each to its end, whatever the others did."""
    outcomes: list[Any] = []
    for step in steps:
        try:
            outcomes.append(run_one(step))
        except Exception as exc:  # every step runs; the first failure is raised after
            outcomes.append(exc)
    return outcomes


def perform(client: Any, sleep: Callable[[float], Any], effect: Call | Sleep) -> Any:
    """Send a :class:`Call` through ``client``, or sleep: the answer (or its awaitable)."""
    if isinstance(effect, Call):
        return getattr(client, effect.operation)(**effect.params)
    return sleep(effect.seconds)


def drive(
    step: Step[T],
    client: Any,
    sleep: Callable[[float], None] = time.sleep,
    parallel: Parallel = one_by_one,
) -> T:
    """Run ``step`` to its end on ``client`` (boto3); gathers through ``parallel``."""
    with raised_through(client):
        for effect in (run := Run(step)):
            with run.outcome() as out:
                if isinstance(effect, Gather):
                    run_one = partial(drive, client=client, sleep=sleep, parallel=parallel)
                    out.value = parallel(run_one, list(effect.steps))
                    first_failure(out.value)
                else:
                    out.value = perform(client, sleep, effect)
        return run.result
