"""Fault injection on a real boto3 client through botocore's events: kill a coordinator
between any two DynamoDB calls.

* ``before``: the process dies just before call *k* is sent: nothing applied.
* ``after``: call *k* is applied but the process dies before seeing the response.
* ``lost``: call *k* is applied, its response is lost, and botocore retries it.
* ``throttle``: every attempt of call *k* is throttled, so botocore's retries run out.

Examples
--------
>>> chaos = Chaos(client)                      # doctest: +SKIP
>>> chaos.arm("after", at=3)                   # the 4th DynamoDB call dies after applying
>>> try:
...     tx.commit()
... except Crash:
...     pass                                   # another coordinator takes over from here
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Literal

from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import ReadTimeoutError
from botocore.httpsession import URLLib3Session

FaultKind = Literal["before", "after", "lost", "throttle"]
FAULT_KINDS: tuple[FaultKind, ...] = ("before", "after", "lost", "throttle")


class Crash(BaseException):
    """The simulated death of a coordinator: a ``BaseException``, which no ``except Exception``
    swallows."""


class _RawBody:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body

    async def read(self) -> bytes:  # aiobotocore reads a body by awaiting this
        return self._body


class Chaos:
    """Count a client's DynamoDB calls and inject one fault at a chosen call index."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls: list[str] = []
        self.kind: FaultKind | None = None
        self.at = -1
        self.fired = False
        self._lock = threading.Lock()
        # Context variables: calls interleaved on one event loop keep their own index.
        self._call: ContextVar[int] = ContextVar("chaos_call", default=-1)
        self._attempt: ContextVar[int] = ContextVar("chaos_attempt", default=0)
        self._response: Callable[..., AWSResponse] = AWSResponse
        if any(c.__module__.startswith("aiobotocore") for c in type(client).__mro__):
            # An aiobotocore client awaits a response's body: an injected one is made so.
            from aiobotocore.awsrequest import AioAWSResponse  # type: ignore[import-untyped]

            self._response = AioAWSResponse
        self._session = URLLib3Session()
        events = client.meta.events
        events.register("before-call.dynamodb", self._before_call)
        events.register("before-send.dynamodb", self._before_send)
        events.register("after-call.dynamodb", self._after_call)

    def arm(self, kind: FaultKind, at: int) -> None:
        """Inject ``kind`` at the ``at``-th call (0-based) counted from now."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"kind must be one of {FAULT_KINDS}, not {kind!r}")
        with self._lock:
            self.kind, self.at, self.fired = kind, len(self.calls) + at, False

    def disarm(self) -> None:
        with self._lock:
            self.kind = None

    def close(self) -> None:
        events = self.client.meta.events
        events.unregister("before-call.dynamodb", self._before_call)
        events.unregister("before-send.dynamodb", self._before_send)
        events.unregister("after-call.dynamodb", self._after_call)

    def _targeted(self) -> bool:
        return self.kind is not None and self._call.get() == self.at

    def _before_call(self, model: Any, **_: Any) -> None:
        with self._lock:
            self._call.set(len(self.calls))
            self._attempt.set(0)
            self.calls.append(model.name)
            if self._targeted() and self.kind == "before":
                self.fired = True
                raise Crash(f"crash before call {self.at} ({model.name})")

    def _before_send(self, request: Any, **_: Any) -> AWSResponse | None:
        if not self._targeted():
            return None
        attempt = self._attempt.get()
        self._attempt.set(attempt + 1)
        if self.kind == "lost" and attempt == 0:
            self._session.send(request)  # applied by DynamoDB...
            self.fired = True
            raise ReadTimeoutError(endpoint_url=request.url)  # ...but the answer never arrives
        if self.kind == "throttle":
            self.fired = True
            body = json.dumps(
                {
                    "__type": "com.amazonaws.dynamodb.v20120810#"
                    "ProvisionedThroughputExceededException",
                    "message": "injected throttle",
                }
            ).encode()
            headers = HTTPHeaders.from_dict({"content-type": "application/x-amz-json-1.0"})
            return self._response(request.url, 400, headers, _RawBody(body))
        return None

    def _after_call(self, model: Any, **_: Any) -> None:
        if self._targeted() and self.kind == "after":
            self.fired = True
            raise Crash(f"crash after call {self.at} ({model.name})")
