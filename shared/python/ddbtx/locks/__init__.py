"""Distributed locks on one DynamoDB table, with fencing tokens: :class:`Mutex`,
:class:`LeaseLockClient` and :class:`FifoLock`; :func:`break_lock`, :func:`list_locks`.

Examples
--------
>>> from ddbtx.locks import create_lock_table, LeaseLockClient   # doctest: +SKIP
>>> create_lock_table(client, "Locks")                            # doctest: +SKIP
>>> with LeaseLockClient(client, "Locks", owner="host-a") as lc:  # doctest: +SKIP
...     with lc.acquire("Moe", wait=30.0) as lock:
...         print(lock.fencing_token)
"""

from ..errors import LockError, LockLostError, LockNotFoundError, LockNotGrantedError
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
from .breaking import BreakResult, Seen, break_lock
from .fifo import FifoHeldLock, FifoLock
from .lease import LeaseLock, LeaseLockClient
from .mutex import Mutex

__all__ = [
    "DEFAULT_NAMESPACE",
    "GC_MARGIN",
    "MAX_NAMESPACE_BYTES",
    "MAX_RESOURCE_BYTES",
    "BreakResult",
    "FifoHeldLock",
    "FifoLock",
    "HeldLock",
    "LeaseLock",
    "LeaseLockClient",
    "LockClient",
    "LockError",
    "LockLostError",
    "LockNotFoundError",
    "LockNotGrantedError",
    "LockRow",
    "Mutex",
    "Seen",
    "SweepResult",
    "break_lock",
    "create_lock_table",
    "list_locks",
    "sweep_expired_page",
    "sweep_expired_rows",
]
