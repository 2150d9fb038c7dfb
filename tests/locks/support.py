"""Test machinery for the lock tests: virtual time shared by threads, a hook that
holds one DynamoDB call of one client until the test lets it go, and one that
holds back one call's answer (applied and answered, handed over only later)."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class VirtualTime:
    """A monotonic clock that moves only when every participant thread sleeps.

    Participants are threads that use :meth:`sleep`; while any of them is doing
    something else (a DynamoDB request, say) time stands still, and when all
    are asleep time jumps to the earliest wake-up. So requests take no virtual
    time, a lease of 10 s costs no real time, and the order of events is
    decided by virtual time alone. A participant that must wait on something
    real (joining a thread) does so inside :meth:`idle`.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._cond = threading.Condition()
        self._running = 0
        self._sleepers: list[tuple[float, int]] = []
        self._woken: set[int] = set()
        self._seq = itertools.count()
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()

    def now(self) -> float:
        with self._cond:
            return self._now

    def join(self) -> None:
        with self._cond:
            self._running += 1

    def leave(self) -> None:
        with self._cond:
            self._running -= 1
            self._advance()

    @contextmanager
    def idle(self) -> Iterator[None]:
        """Let time run while this participant waits on something real."""
        self.leave()
        try:
            yield
        finally:
            self.join()

    def sleep(self, seconds: float) -> None:
        with self._cond:
            if self._running <= 0:
                raise RuntimeError("VirtualTime.sleep() outside a participant thread")
            ticket = next(self._seq)
            heapq.heappush(self._sleepers, (self._now + max(0.0, seconds), ticket))
            self._running -= 1
            self._advance()
            while ticket not in self._woken:
                self._cond.wait()
            self._woken.discard(ticket)

    def _advance(self) -> None:
        if self._running > 0 or not self._sleepers:
            return
        self._now = max(self._now, self._sleepers[0][0])
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, ticket = heapq.heappop(self._sleepers)
            self._woken.add(ticket)
            self._running += 1  # counted as running before it wakes, so time cannot skip it
        self._cond.notify_all()

    def spawn(self, target: Callable[..., Any], *args: Any) -> threading.Thread:
        """Run ``target`` in a participant thread (counted from before it starts)."""
        self.join()

        def body() -> None:
            try:
                target(*args)
            finally:
                self.leave()

        thread = threading.Thread(target=body, daemon=True)
        self._threads.append(thread)
        thread.start()
        return thread

    def every(self, period: float, action: Callable[[], object]) -> threading.Event:
        """Run ``action`` every ``period`` virtual seconds until the returned event is set."""
        stop = threading.Event()

        def loop() -> None:
            while True:
                self.sleep(period)
                if stop.is_set() or self._stopping.is_set():
                    return
                action()

        self.spawn(loop)
        return stop

    def close(self) -> None:
        """Stop timers and let every participant thread finish (called by the fixture)."""
        self._stopping.set()
        with self.idle():
            for thread in self._threads:
                thread.join(timeout=30)


class Stall:
    """Hold ``client``'s next ``operation`` call (before it is sent) until :meth:`go`.

    The held thread counts as idle for ``vt``, so virtual time runs meanwhile.
    ``go(fail)`` makes the held call raise ``fail`` instead of proceeding.
    """

    def __init__(self, client: Any, operation: str, vt: VirtualTime | None = None) -> None:
        self.reached = threading.Event()
        self._go = threading.Event()
        self._fail: BaseException | None = None
        self._armed = True
        self._vt = vt
        self._client = client
        self._event = f"before-call.dynamodb.{operation}"
        client.meta.events.register(self._event, self._hold)

    def _hold(self, **_: Any) -> None:
        if not self._armed:
            return
        self._armed = False
        self.reached.set()
        if self._vt is None:
            self._go.wait(timeout=60)
        else:
            with self._vt.idle():
                self._go.wait(timeout=60)
        if self._fail is not None:
            raise self._fail

    def go(self, fail: BaseException | None = None) -> None:
        self._fail = fail
        self._client.meta.events.unregister(self._event, self._hold)
        self._go.set()


class HoldBack:
    """Hold back the answer of ``client``'s first ``operation`` call whose answer
    ``matches``: DynamoDB has applied and answered the call, but the caller is
    handed that answer only at :meth:`go`, after the others have acted on what
    happened since. The held thread counts as idle for ``vt``, so virtual time,
    and every lease watched meanwhile, runs on: a response delayed past a lease.
    """

    def __init__(
        self,
        client: Any,
        operation: str,
        vt: VirtualTime,
        matches: Callable[[dict[str, Any]], bool] = lambda answer: True,
    ) -> None:
        self.reached = threading.Event()
        self.answer: dict[str, Any] | None = None
        self._go = threading.Event()
        self._armed = True
        self._vt = vt
        self._matches = matches
        self._client = client
        self._event = f"after-call.dynamodb.{operation}"
        client.meta.events.register(self._event, self._hold)

    def _hold(self, parsed: dict[str, Any], **_: Any) -> None:
        if not self._armed or not self._matches(parsed):
            return
        self._armed = False
        self.answer = parsed
        self.reached.set()
        with self._vt.idle():
            self._go.wait(timeout=60)

    def go(self) -> None:
        """Hand the answer over now."""
        self._client.meta.events.unregister(self._event, self._hold)
        self._go.set()


class LoseOnce:
    """Lose the response of ``client``'s first ``operation`` call that ``matches`` its
    parameters: the request is applied, its answer never arrives, and botocore
    sends it again (the ``lost`` fault of :mod:`ddbtx.chaos`, aimed by content
    rather than by call index). ``between`` runs after the first attempt applied
    and before the retry."""

    def __init__(
        self,
        client: Any,
        operation: str,
        matches: Callable[[dict[str, Any]], bool],
        between: Callable[[], object] | None = None,
    ) -> None:
        self.fired = False
        self._client = client
        self._matches = matches
        self._between = between
        self._armed = False
        self._params = f"provide-client-params.dynamodb.{operation}"
        self._send = f"before-send.dynamodb.{operation}"
        client.meta.events.register(self._params, self._look)
        client.meta.events.register(self._send, self._lose)

    def _look(self, params: dict[str, Any], **_: Any) -> None:
        if not self.fired and self._matches(params):
            self._armed = True

    def _lose(self, request: Any, **_: Any) -> None:
        from botocore.exceptions import ReadTimeoutError
        from botocore.httpsession import URLLib3Session

        if not self._armed:
            return
        self._armed = False
        self.fired = True
        URLLib3Session().send(request)  # applied by DynamoDB...
        if self._between is not None:
            self._between()
        raise ReadTimeoutError(endpoint_url=request.url)  # ...but the answer never arrives


class Log:
    """Grants as the waiters of one resource saw them: (owner, token, virtual time)."""

    def __init__(self, vt: VirtualTime, resource: str) -> None:
        self.vt = vt
        self.resource = resource
        self.grants: list[tuple[str, int, float]] = []
        self.data: list[bytes | None] = []  # each grant's data (lease locks)
        self.errors: list[BaseException] = []
        self.released: list[tuple[str, float]] = []  #: (owner, virtual time) of each release
        self._lock = threading.Lock()

    def waiter(
        self,
        lock_client: Any,
        hold_for: float = 1.0,
        until: threading.Event | None = None,
        **options: Any,
    ) -> Callable[[], None]:
        """A participant's body: acquire, log the grant, hold a while, release.

        ``until``: hold until the test sets it instead (busy meanwhile: virtual time
        stands still), then release; the release's time is logged in ``released``.
        """

        def body() -> None:
            try:
                with lock_client.acquire(self.resource, **options) as lock:
                    with self._lock:
                        self.grants.append((lock_client.owner, lock.fencing_token, self.vt.now()))
                        self.data.append(lock.data)
                    if until is None:
                        self.vt.sleep(hold_for)
                    else:
                        until.wait(timeout=60)
                    with self._lock:
                        self.released.append((lock_client.owner, self.vt.now()))
            except BaseException as exc:  # asserted on by the test
                self.errors.append(exc)

        return body

    @property
    def owners(self) -> list[str]:
        return [owner for owner, _, _ in self.grants]


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll ``condition`` in real time (a guard against hangs, not a timing assertion)."""
    give_up = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > give_up:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.005)
