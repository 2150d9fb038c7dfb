"""What the lease and FIFO locks share: the held-lock handle, heartbeats, the waiter's watch."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self, TypeVar, cast

from .._base.drive import drive
from .._base.effects import Step
from ..errors import ConditionFailed, LockLostError
from . import _rows as rows
from ._pace import Pace

logger = logging.getLogger(__name__)

Clock = Callable[[], float]
Sleep = Callable[[float], None]
State = Literal["held", "released", "lost", "abandoned"]
T = TypeVar("T")


class HeldLockSteps:
    """A granted lease or FIFO lock's state and steps, for both drivers (see :class:`HeldLock`)."""

    #: ``(ConditionExpression, UpdateExpression)`` of a heartbeat and of the release.
    _renew_write: ClassVar[tuple[str, str]]
    _release_write: ClassVar[tuple[str, str]]
    #: The driver's lock (each driver annotates ``_io`` with its type, for mypy): one write
    #: of a lock at a time, so a heartbeat never overtakes the release.
    _io_type: ClassVar[Any]

    def __init__(
        self,
        lock_client: LockClientSteps,
        *,
        hold: str,
        row_key: rows.Item,
        resource: str,
        fencing_token: int,
        confirmed_at: float,
        namespace: str | None = None,
        data: bytes | None = None,
    ) -> None:
        self.resource = resource
        self.owner = lock_client.owner
        self.namespace = namespace
        self.fencing_token = fencing_token
        self.data = data
        self.lease_duration = lock_client.lease_duration
        self._lc = lock_client
        self._hold = hold
        self._key = row_key
        self._clock = lock_client._clock
        self._confirmed = confirmed_at
        self._state: State = "held"
        self._keeper: Keeper | None = None
        self._on_lost: Callable[[HeldLockSteps], None] | None = None
        self._on_danger: Callable[[HeldLockSteps], None] | None = None
        self._danger = lock_client.danger_fraction
        self._warned = False
        self._io = self._io_type()
        # Values and placeholders of this grant's writes beyond the shared ones.
        self._extra_values: dict[str, object] = {}
        self._extra_names: dict[str, str] = {}

    def __repr__(self) -> str:
        where = self.resource if self.namespace is None else f"{self.resource}/{self.namespace}"
        return f"<{type(self).__name__} {where} token={self.fencing_token} {self._state}>"

    def _write(
        self,
        texts: tuple[str, str],
        values: dict[str, object],
        names: dict[str, str] | None = None,
        **params: Any,
    ) -> Step[rows.Item]:
        """One conditional write of this grant's row; the row after it, if ``params`` ask."""
        values = {":hold": self._hold, **self._extra_values, **values}
        names = {**self._extra_names, **(names or {})}
        return rows.update_row(self._lc.table, self._key, *texts, values, names, **params)

    def _renew(self, **params: Any) -> Step[rows.Item]:
        expires = self._lc._wall() + self.lease_duration
        return self._write(self._renew_write, {":rvn": rows.new_id(), ":exp": expires}, **params)

    def _end(self) -> Step[None]:
        yield from self._write(self._release_write, {})

    def _renewed(self) -> Step[bool]:
        """Renew the lease; ``False`` if the lock was taken over."""
        sent = self._clock()
        try:
            yield from self._renew()
        except ConditionFailed:
            return False
        self._confirmed = sent
        self._warned = False
        return True

    def _confirm(self, heartbeat_period: float) -> Step[bool]:
        """Renew a grant learned late if its lease could end first; ``False``: taken over."""
        if heartbeat_period < self.remaining() or (yield from self._renewed()):
            return True
        logger.info("%r was taken over before it was noticed", self)
        return False

    def _renewal(self) -> Step[bool | None]:
        """A heartbeat's write, under the I/O guard: renewed, taken over, or ``None`` not held."""
        if self._state != "held":
            return None
        renewed = yield from self._renewed()
        if not renewed:
            self._state = "lost"
        return renewed

    def _after_renewal(self, renewed: bool | None) -> bool:
        """Act on :meth:`_renewal`'s answer outside the I/O guard (``on_lost`` may release)."""
        if renewed:
            return True
        if renewed is False:
            self._forget()
            logger.warning("lost %r: taken over after its lease ran out", self)
            self._notify("on_lost", self._on_lost)
        return False

    def _release(self) -> Step[bool]:
        """The release's write, under the I/O guard."""
        if self._state != "held":
            return False
        started = self._clock()
        self._forget()
        try:
            yield from self._end()
        except ConditionFailed as exc:
            # A retried release that fails met our own applied first attempt, or a takeover,
            # which needs our lease to run out first: sent within it, the release came first.
            if not (rows.was_retried(exc) and started - self._confirmed < self.lease_duration):
                self._state = "lost"
                return False
        except BaseException:
            # Unknown outcome: no more heartbeats, so the row lapses after a lease.
            self._state = "abandoned"
            raise
        self._state = "released"
        return True

    @property
    def lost(self) -> bool:
        """A heartbeat or the release found the lock taken over."""
        return self._state == "lost"

    @property
    def released(self) -> bool:
        return self._state == "released"

    def is_held(self) -> bool:
        """Whether this holder may still act: held, and its lease not yet over."""
        return self._state == "held" and self.remaining() > 0

    def remaining(self) -> float:
        """Seconds of lease left since the last successful heartbeat (negative once over)."""
        return self._confirmed + self.lease_duration - self._clock()

    @property
    def in_danger(self) -> bool:
        """Still held, but less than ``danger_fraction`` of the lease is left."""
        return self._state == "held" and self.remaining() < self._danger * self.lease_duration

    def _raise_if_lost(self, exc: BaseException | None) -> None:
        """On leaving ``with``: a lock taken over raises, or is noted on the exception."""
        if self._state != "lost":
            return
        message = f"lock on {self.resource!r} (token {self.fencing_token}) was taken over"
        if exc is None:
            raise LockLostError(message)
        exc.add_note(f"ddbtx.locks: {message} while this exception was raised")

    def _attach(
        self,
        keeper: Keeper,
        on_lost: Callable[[HeldLockSteps], None] | None,
        on_danger: Callable[[HeldLockSteps], None] | None = None,
    ) -> None:
        self._keeper = keeper
        self._on_lost = on_lost
        self._on_danger = on_danger
        keeper.add(self, self._beat)

    def _forget(self) -> None:
        if self._keeper is not None:
            self._keeper.discard(self)

    def _notify(self, name: str, callback: Callable[[HeldLockSteps], None] | None) -> None:
        if callback is None:
            return
        try:
            callback(self)
        except Exception:  # a failing callback must not stop other heartbeats
            logger.exception("%s callback failed for %r", name, self)

    def _beat(self) -> Any:
        """One heartbeat, its failure logged (a call, or under asyncio a coroutine)."""
        raise NotImplementedError

    def _beat_failed(self) -> None:
        """A heartbeat's request failed: warn, and call ``on_danger`` once while in danger."""
        logger.warning("heartbeat failed for %r", self, exc_info=True)
        if self._warned or not self.in_danger:
            return
        self._warned = True
        logger.warning("%r in danger: %.3fs of its lease left", self, self.remaining())
        self._notify("on_danger", self._on_danger)


class HeldLock(HeldLockSteps):
    """A granted lease or FIFO lock, renewed by heartbeats until :meth:`release`; ``with``
    releases it on exit, raising :class:`LockLostError` if it was taken over meanwhile.

    Attributes
    ----------
    resource, owner : str
        What is locked, and by whom.
    namespace : str or None
        The FIFO namespace (``None`` for lease locks).
    fencing_token : int
        Strictly increasing per resource (and namespace), never reset: pass it
        to the writes the lock protects, which refuse smaller ones.
    data : bytes or None
        The data stored with a lease lock.

    Examples
    --------
    >>> with lc.acquire("Moe", wait=30.0) as lock:       # doctest: +SKIP
    ...     for batch in work:
    ...         if not lock.is_held():                   # lease ran out: stop writing
    ...             break
    ...         write(batch, fence=lock.fencing_token)
    """

    _io_type = threading.Lock
    _io: threading.Lock

    def heartbeat(self) -> bool:
        """Renew the lease now: ``False`` if released or taken over (a failed request raises)."""
        with self._io:
            renewed = drive(self._renewal(), self._lc.client)
        return self._after_renewal(renewed)

    def release(self) -> bool:
        """Release the lock: ``False`` if it was already released or taken over."""
        with self._io:
            return drive(self._release(), self._lc.client)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if self._state == "held":
            self.release()
        self._raise_if_lost(exc)

    def _beat(self) -> None:
        try:
            self.heartbeat()
        except Exception:
            self._beat_failed()


class Keeper:
    """What renews a client's held locks every period: a thread, or under asyncio a task."""

    def __init__(self, period: float, name: str) -> None:
        self._period = period
        self._name = name
        self._locks: dict[HeldLockSteps, Callable[[], Any]] = {}
        self._mutex = threading.Lock()

    @property
    def closed(self) -> bool:
        raise NotImplementedError

    def add(self, lock: HeldLockSteps, beat: Callable[[], Any]) -> None:
        """Renew ``lock`` every period by calling ``beat`` (awaiting it, under asyncio)."""
        raise NotImplementedError

    def discard(self, lock: HeldLockSteps) -> None:
        with self._mutex:
            self._locks.pop(lock, None)

    def held(self) -> list[HeldLockSteps]:
        with self._mutex:
            return list(self._locks)

    def close(self) -> None:
        raise NotImplementedError


class Heartbeats(Keeper):
    """One daemon thread per lock client, renewing its locks; it ends while nothing is held."""

    def __init__(self, period: float, name: str) -> None:
        super().__init__(period, name)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def add(self, lock: HeldLockSteps, beat: Callable[[], Any]) -> None:
        with self._mutex:
            self._locks[lock] = beat
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def close(self) -> None:
        """Stop the thread now (waiting only for a heartbeat already in flight)."""
        self._stop.set()
        with self._mutex:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            with self._mutex:
                batch = list(self._locks.values())
                if not batch:
                    self._thread = None
                    return
            for beat in batch:
                if self._stop.is_set():
                    break
                beat()
        with self._mutex:
            self._thread = None


@dataclass(frozen=True)
class Watch:
    """``rvn`` of the row ahead, first read at ``since``: unchanged a ``lease`` later, dead."""

    target: tuple[str, int]
    rvn: str
    lease: float
    since: float

    def remaining(self, now: float) -> float:
        return self.since + self.lease - now


def observe(
    previous: Watch | None, target: tuple[str, int], rvn: str, lease: float, now: float
) -> Watch:
    """Keep watching ``previous`` if nothing changed, else start a fresh watch at ``now``."""
    if previous is not None and previous.target == target and previous.rvn == rvn:
        return previous
    return Watch(target, rvn, lease, now)


class LockClientSteps:
    """What lease and FIFO lock clients share, for both drivers (see :class:`LockClient`)."""

    _default_lease = 10.0
    _default_heartbeat = 3.0
    _kind = "lock"
    _keeper: type[Keeper]  # the driver's

    def __init__(
        self,
        client: Any,
        table: str,
        *,
        owner: str,
        lease_duration: float | None = None,
        heartbeat_period: float | None = None,
        min_poll: float | None = None,
        max_poll: float | None = None,
        on_lost: Callable[[Any], None] | None = None,
        on_danger: Callable[[Any], None] | None = None,
        danger_fraction: float = 0.5,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        sleep: Callable[[float], Any] | None = None,
    ) -> None:
        self.owner = rows.check_owner(owner)
        self.lease_duration, self.heartbeat_period = rows.check_lease(
            self._default_lease if lease_duration is None else lease_duration,
            self._default_heartbeat if heartbeat_period is None else heartbeat_period,
        )
        self._polls = rows.check_polls(min_poll, max_poll, self.heartbeat_period)
        self.danger_fraction = rows.check_fraction(danger_fraction, "danger_fraction")
        for name, callback in (("on_lost", on_lost), ("on_danger", on_danger)):
            if callback is not None and not callable(callback):
                raise ValueError(f"{name} must be callable, not {type(callback).__name__}")
        self.client = client
        self.table = table
        self._on_lost = on_lost
        self._on_danger = on_danger
        self._clock = clock
        self._wall = wall_clock
        self._sleep = sleep
        self._heartbeats = self._keeper(
            self.heartbeat_period, f"ddbtx-{self._kind}-heartbeat-{self.owner}"
        )
        self._paces: dict[tuple[str, str], Pace] = {}  # how fast each lock changes hands
        self._paces_guard = threading.Lock()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run: no more heartbeats, and no more acquires."""
        return self._heartbeats.closed

    def _check_open(self) -> None:
        if self._heartbeats.closed:
            raise RuntimeError(f"this {type(self).__name__} is closed")

    def _pace(self, resource: str, row: str) -> Pace:
        with self._paces_guard:
            return self._paces.setdefault((resource, row), Pace())

    def _keep(self, lock: HeldLockSteps) -> None:
        lock._attach(self._heartbeats, self._on_lost, self._on_danger)


class LockClient(LockClientSteps):
    """What :class:`LeaseLockClient` and :class:`FifoLock` share.

    Parameters
    ----------
    client
        A boto3 DynamoDB client.
    table : str
        A table made by :func:`~ddbtx.locks.create_lock_table`.
    owner : str
        Who holds the locks (shown to operators).
    lease_duration : float
        Seconds others wait after the last heartbeat they saw before judging a holder dead.
    heartbeat_period : float
        Seconds between heartbeats; shorter than the lease.
    min_poll, max_poll : float, optional
        A waiter's poll delay doubles from ``min_poll`` (10 ms) up to ``max_poll`` (1 s).
    on_lost : callable, optional
        Called from the heartbeat thread with a lock a heartbeat found taken over.
    on_danger : callable, optional
        Called once with a lock whose heartbeat failed while less than
        ``danger_fraction`` of its lease is left: stop working under it.
    danger_fraction : float, optional
        Between 0 and 1 exclusive (default 0.5).
    clock, wall_clock, sleep : callable, optional
        Monotonic seconds (lease judging), epoch seconds (TTLs, display), the waiter's sleep.

    Attributes
    ----------
    client, table, owner, lease_duration, heartbeat_period
        As given (the durations checked and defaulted).

    Locks are not reentrant. One client may serve many threads.
    """

    _keeper = Heartbeats

    def _run(self, step: Step[T]) -> T:
        return drive(step, self.client, self._sleep or time.sleep)

    def held(self) -> list[HeldLock]:
        """The locks this client holds and heartbeats."""
        return [cast(HeldLock, lock) for lock in self._heartbeats.held()]

    def close(self) -> None:
        """Stop heartbeating at once, then release every lock still held."""
        self._heartbeats.close()
        for lock in self.held():
            try:
                lock.release()
            except Exception:  # keep releasing the others; the failed one lapses
                logger.warning("could not release %r on close", lock, exc_info=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
