"""The hooks on one participant's boto3 client: the gate, and one fault at one of its calls.

Everything goes through botocore's event system (as :mod:`ddbtx.chaos` and
:mod:`ddbtx.instrumentation` do), so no protocol code is touched:

``before-call``
    counts the participant's API calls (retries apart); a dead one's calls crash.
``before-send`` (registered first, ahead of moto's in-process responder)
    every HTTP attempt waits at the gate; then the fault fires if this is its call.
``needs-retry`` (first)
    the attempt whose answer the fault lost is retried at once (no wall-clock backoff).
``after-call``
    ``after``: the call was applied, the participant dies before seeing the answer.

``stall``: the participant stops before its call *k* (say, the lock of an item it
has just recorded) while the others run; the first other participant about to mark
the record completed (its items settled) dies right there instead, and the stalled
one goes on: its late call lands after another coordinator completed the items but
before the record is marked completed, so the completion that follows (the final
sweep, or a rescuer) meets what it did. With no such call it goes on after
:data:`STALL_STEPS` steps of the others, or once it is the only one left.

A client keeps its hooks for its whole life; :meth:`Door.open` points them at
one schedule's gate and fault, :meth:`Door.close` makes them pass-through.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ReadTimeoutError

from ddbtx import schema as s
from ddbtx.chaos import Crash

from .gate import Gate

#: Fault kinds, in the issue's words: crash before, crash after (applied, answer lost),
#: answer lost and the SDK retries, pause past the sweeper's rollback age; and a stall
#: until another participant completed the items (see the module docstring).
FAULT_KINDS = ("before", "after", "lost", "pause", "stall")
#: Others' steps a stalled participant waits at most.
STALL_STEPS = 400


@dataclass(frozen=True)
class Fault:
    owner: str  #: participant it hits
    kind: str
    at: int  #: its API call index (0-based)

    def spec(self) -> str:
        return f"{self.owner}:{self.kind}@{self.at}"

    @classmethod
    def parse(cls, text: str) -> Fault:
        owner, rest = text.split(":")
        kind, at = rest.split("@")
        if kind not in FAULT_KINDS:
            raise ValueError(f"fault kind must be one of {FAULT_KINDS}, not {kind!r}")
        return cls(owner, kind, int(at))


class Door:
    """Gate and fault hooks on one client (see the module docstring)."""

    def __init__(self, client: Any, send: Callable[[Any], None]) -> None:
        self.client = client
        self._send = send  #: delivers a request to the backend, answer discarded
        self.gate: Gate | None = None
        self.owner = ""
        self.fault: Fault | None = None
        self.fired = False
        self.calls = 0
        self.on_pause: Callable[[], None] = lambda: None
        self.roles: dict[str, str] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        events = client.meta.events
        events.register("before-parameter-build.dynamodb", self._label)
        events.register("before-call.dynamodb", self._before_call)
        events.register_first("before-send.dynamodb", self._before_send)
        events.register_first("needs-retry.dynamodb", self._needs_retry)
        events.register("after-call.dynamodb", self._after_call)

    def open(
        self,
        gate: Gate,
        owner: str,
        fault: Fault | None,
        roles: dict[str, str],
        on_pause: Callable[[], None],
    ) -> None:
        self.gate, self.owner, self.roles, self.on_pause = gate, owner, roles, on_pause
        self.fault = fault if fault is not None and fault.owner == owner else None
        self.fired, self.calls = False, 0

    def close(self) -> None:
        self.gate, self.fault = None, None

    # -- hooks -----------------------------------------------------------------------

    def _label(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        table = str(params.get("TableName") or "")
        role = self.roles.get(table, "")
        text = f"{model.name} {role}".strip()
        if role == "data":
            key = params.get("Key") or params.get("Item") or {}
            pk = key.get("pk", {}).get("S")
            if pk:
                text += f" {pk}"
        elif (
            role == "tx"
            and s.TX_FINISHED in (params.get("ExpressionAttributeNames") or {}).values()
        ):
            text += " complete"  # marks the record completed
        self._local.label = text

    def _targeted(self) -> bool:
        fault = self.fault
        return fault is not None and getattr(self._local, "index", -1) == fault.at

    def _before_call(self, model: Any, **_: Any) -> None:
        if self.gate is None:
            return
        with self._lock:
            self._local.index, self.calls = self.calls, self.calls + 1
        self._local.attempt = 0
        self._local.lost = False
        if self.owner in self.gate.dead:
            raise Crash(f"{self.owner} is dead")

    def _before_send(self, request: Any, **_: Any) -> None:
        gate = self.gate
        if gate is None:
            return
        targeted = self._targeted()
        attempt = self._local.attempt
        self._local.attempt = attempt + 1
        kind = self.fault.kind if targeted and self.fault else None
        if kind == "pause" and attempt == 0:
            self.fired = True
            self.on_pause()  # time passes and the others run before this call goes out
        if kind == "stall" and attempt == 0:
            self.fired = True
            gate.stall(self.owner, STALL_STEPS)  # the others run until one completes
        label = getattr(self._local, "label", "?") + (f" retry{attempt}" if attempt else "")
        gate.step(self.owner, label)
        if label.endswith(" complete") and gate.wake_stalled(self.owner):
            # Items settled, record not yet marked: the completer dies, the stalled one
            # goes on, and the record is completed again later.
            gate.kill(self.owner)
            raise Crash(f"{self.owner}: crash before marking the record completed")
        if kind == "before":
            self.fired = True
            gate.kill(self.owner)
            raise Crash(f"{self.owner}: crash before call {self._local.index}")
        if kind == "lost" and attempt == 0:
            self.fired = True
            self._send(request)  # applied by DynamoDB...
            self._local.lost = True
            raise ReadTimeoutError(endpoint_url=request.url)  # ...but the answer never came

    def _needs_retry(self, **_: Any) -> float | None:
        if self.gate is not None and getattr(self._local, "lost", False):
            self._local.lost = False
            return 0.0  # retry the lost attempt at once: the gate orders it, not a timer
        return None

    def _after_call(self, **_: Any) -> None:
        if self.gate is not None and self._targeted() and self.fault and self.fault.kind == "after":
            self.fired = True
            self.gate.kill(self.owner)
            raise Crash(f"{self.owner}: crash after call {self._local.index}")
