"""Faults the harness adds to :class:`ddbtx.chaos.Chaos`: a pause, through the same event hooks.

A paused coordinator is modelled exactly: just before its ``at``-th DynamoDB
call, the world moves on without it (``action`` runs: time passes, a sweeper
and other coordinators work), then the call is sent as if nothing happened.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ddbtx.chaos import FAULT_KINDS, Chaos, Crash

#: Every fault a schedule can inject: the core's four, plus a pause past the rollback age.
KINDS: tuple[str, ...] = (*FAULT_KINDS, "pause")


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
        self._chaos = None
        self._dead = stay_dead and kind in ("before", "after")
        if kind != "pause":
            self._chaos = Chaos(client)
            self._chaos.arm(kind, at)  # type: ignore[arg-type]
        if self._dead:
            client.meta.events.register("before-call.dynamodb", self._after_death)

    def _after_death(self, **_: Any) -> None:
        if self._chaos is not None and self._chaos.fired:
            raise Crash("the coordinator crashed earlier: it sends nothing more")

    @property
    def fired(self) -> bool:
        hook = self._pause or self._chaos
        return bool(hook and hook.fired)

    def close(self) -> None:
        if self._pause is not None:
            self._pause.close()
        if self._chaos is not None:
            self._chaos.close()
        if self._dead:
            self.client.meta.events.unregister("before-call.dynamodb", self._after_death)
