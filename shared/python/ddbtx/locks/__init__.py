"""Distributed locks on one DynamoDB table: a mutex, a lease lock and a fair FIFO lock.

* :class:`Mutex` (conditional put): non-blocking, one write to acquire, one to
  release, never releases someone else's lock.
* :class:`LeaseLockClient` (heartbeats and record version numbers): blocking
  with a wait bound, clock-free takeover of dead holders, fencing tokens.
* :class:`FifoLock` (ticket counter and now-serving pointer): grants in ticket
  order, dead waiters skipped, fencing tokens.

Examples
--------
>>> from ddbtx.locks import create_lock_table, LeaseLockClient   # doctest: +SKIP
>>> create_lock_table(client, "Locks")                            # doctest: +SKIP
>>> with LeaseLockClient(client, "Locks", owner="host-a") as lc:  # doctest: +SKIP
...     with lc.acquire("Moe", wait=30.0) as lock:
...         print(lock.fencing_token)
"""

from ..errors import LockError, LockLostError, LockNotGrantedError
from ._held import HeldLock, LockClient
from ._rows import DEFAULT_NAMESPACE, GC_MARGIN, MAX_NAMESPACE_BYTES, MAX_RESOURCE_BYTES
from .admin import (
    LockRow,
    SweepResult,
    create_lock_table,
    list_locks,
    sweep_expired_page,
    sweep_expired_rows,
)
from .fifo import FifoHeldLock, FifoLock
from .lease import LeaseLock, LeaseLockClient
from .mutex import Mutex

__all__ = [
    "DEFAULT_NAMESPACE",
    "GC_MARGIN",
    "MAX_NAMESPACE_BYTES",
    "MAX_RESOURCE_BYTES",
    "FifoHeldLock",
    "FifoLock",
    "HeldLock",
    "LeaseLock",
    "LeaseLockClient",
    "LockClient",
    "LockError",
    "LockLostError",
    "LockNotGrantedError",
    "LockRow",
    "Mutex",
    "SweepResult",
    "create_lock_table",
    "list_locks",
    "sweep_expired_page",
    "sweep_expired_rows",
]
