"""The conditional-write mutex on a boto3 client (its steps: :mod:`._mutex_core`)."""

from __future__ import annotations

from .._base.drive import drive
from ._mutex_core import MUTEX_ACQUIRE, MUTEX_RELEASE, MutexSteps

__all__ = ["MUTEX_ACQUIRE", "MUTEX_RELEASE", "Mutex"]


class Mutex(MutexSteps):
    """A non-blocking lock: ``acquire`` and ``release`` are one conditional write each (the
    owner name is the identity: two objects with one owner share it).

    Parameters
    ----------
    client
        A boto3 DynamoDB client (:class:`ddbtx.aio.locks.Mutex` takes an
        aiobotocore one, with the same parameters).
    table : str
        A table made by :func:`~ddbtx.locks.create_lock_table`.
    owner : str
        Who holds the locks this object acquires.
    expire_after : float, optional
        Seconds after which a lock nobody released may be taken: an ``acquire``
        takes it once the record it found has stayed unchanged that long on this
        object's monotonic clock (the holder's view: :meth:`is_held`). ``None``
        (default): held until released.
    clock, wall_clock : callable, optional
        Monotonic seconds (expiry) and epoch seconds (the display-only acquire time).

    Examples
    --------
    >>> m = Mutex(client, "Locks", owner="worker-1")      # doctest: +SKIP
    >>> token = m.acquire_token("invoice-42")             # doctest: +SKIP
    >>> if token is not None:                             # doctest: +SKIP
    ...     try:
    ...         bill("invoice-42", fence=token)
    ...     finally:
    ...         m.release("invoice-42")
    """

    def acquire(self, resource: str) -> bool:
        """Take the lock if it is free (or expired); ``False`` if anyone holds it."""
        return drive(self._acquire_token(resource), self.client) is not None

    def acquire_token(self, resource: str) -> int | None:
        """Like :meth:`acquire`, returning the grant's fencing token (``None``: not granted)."""
        return drive(self._acquire_token(resource), self.client)

    def release(self, resource: str) -> bool:
        """Free the lock if this owner holds it; ``False`` (nothing changed) if not."""
        return drive(self._release(resource), self.client)
