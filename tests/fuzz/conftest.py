"""The oracle's twin tables, one set per emulator, shared by every fuzz case.

dynalite's process exits on some conditions (its bugs, ``deviations.PATH_IN_LIST_OR_BOUND``);
the fuzzer steers clear of those it knows, and runs on a dynalite process of its own, so
that one it does not know yet ends this module's dynalite alone, never the emulator the
rest of the session's tests share.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from botocore.exceptions import BotoCoreError

from ddbtx.local import LocalDynamo
from drivers import EventLoopThread
from oracle.conftest import open_twins
from oracle.runner import Twins


@pytest.fixture(scope="module")
def twins(
    request: pytest.FixtureRequest,
    emulators: dict[str, LocalDynamo],
    event_loop_thread: EventLoopThread,
) -> Iterator[Twins]:
    """The twin tables on moto (in-process), or on a dynalite of this module's own."""
    if request.param != "dynalite":
        yield from open_twins(request.param, emulators.get(request.param), event_loop_thread)
        return
    with LocalDynamo("dynalite") as own:
        opened = open_twins("dynalite", own, event_loop_thread)
        yield next(opened)
        # Dropping the tables fails where the process exited: it goes with them anyway.
        with contextlib.suppress(BotoCoreError, StopIteration):
            next(opened)
