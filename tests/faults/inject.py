"""Faults the harness adds to :class:`ddbtx.chaos.Chaos`, through the same event hooks: a
pause, and a late copy.

A paused coordinator is modelled exactly: just before its ``at``-th DynamoDB
call, the world moves on without it (``action`` runs: time passes, a sweeper
and other coordinators work), then the call is sent as if nothing happened.

A late copy is the ``at``-th call and the one after it as the coordinator sent
them (operation and parameters), remembered so that the schedule can send them
again, verbatim, long after: once the transaction is finished and another has
changed its items. Two calls in a row, because one late copy of any write was
survived before the fence; a lock and the write under it, sent late in order,
were not (issue 34).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

from ddbtx.chaos import FAULT_KINDS, Chaos, Crash

#: Every fault a schedule can inject: the core's four, a pause past the rollback age, and a
#: late copy of a call.
KINDS: tuple[str, ...] = (*FAULT_KINDS, "pause", "copy")


class Pause:
    """Run ``action`` in place of the coordinator just before its ``at``-th call."""

    def __init__(self, client: Any, at: int, action: Callable[[], None]) -> None:
        self.client = client
        self.at = at
        self.action = action
        self.calls = 0
        self.fired = False
        self._lock = threading.Lock()
        client.meta.events.register("before-call.dynamodb", self._before_call)

    def _before_call(self, **_: Any) -> None:
        with self._lock:
            index, self.calls = self.calls, self.calls + 1
        if index == self.at:
            self.fired = True
            self.action()

    def close(self) -> None:
        self.client.meta.events.unregister("before-call.dynamodb", self._before_call)


#: How many calls in a row, from the ``at``-th, a late copy remembers.
COPIED_CALLS = 2


class LateCopy:
    """The ``at``-th call of ``client`` and the next, remembered as sent (both go through
    untouched).

    Calls are counted where botocore is handed a call's parameters, once per call (not per
    retry); a call's index is its place in the order the calls were handed over.
    """

    def __init__(self, client: Any, at: int) -> None:
        self.client = client
        self.at = at
        self.calls = 0
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        client.meta.events.register("provide-client-params.dynamodb", self._remember)

    def _remember(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        with self._lock:
            index, self.calls = self.calls, self.calls + 1
            if self.at <= index < self.at + COPIED_CALLS:
                self.sent.append((model.name, copy.deepcopy(params)))

    @property
    def fired(self) -> bool:
        return bool(self.sent)

    def close(self) -> None:
        self.client.meta.events.unregister("provide-client-params.dynamodb", self._remember)


class Fault:
    """One armed fault of any kind on one client; ``close`` removes its hooks."""

    def __init__(
        self,
        client: Any,
        kind: str,
        at: int,
        pause: Callable[[], None],
        *,
        stay_dead: bool = False,
    ) -> None:
        """``stay_dead``: once crashed, every later call of the client crashes too, as a
        dead process sends nothing more (not even the rollback a ``with`` block tries)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        self.kind = kind
        self.client = client
        self._pause = Pause(client, at, pause) if kind == "pause" else None
        self.copy = LateCopy(client, at) if kind == "copy" else None
        self._chaos = None
        self._dead = stay_dead and kind in ("before", "after")
        if kind not in ("pause", "copy"):
            self._chaos = Chaos(client)
            self._chaos.arm(kind, at)  # type: ignore[arg-type]
        if self._dead:
            client.meta.events.register("before-call.dynamodb", self._after_death)

    def _after_death(self, **_: Any) -> None:
        if self._chaos is not None and self._chaos.fired:
            raise Crash("the coordinator crashed earlier: it sends nothing more")

    @property
    def fired(self) -> bool:
        hook = self._pause or self.copy or self._chaos
        return bool(hook and hook.fired)

    def close(self) -> None:
        if self._pause is not None:
            self._pause.close()
        if self.copy is not None:
            self.copy.close()
        if self._chaos is not None:
            self._chaos.close()
        if self._dead:
            self.client.meta.events.unregister("before-call.dynamodb", self._after_death)
