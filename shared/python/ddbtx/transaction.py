"""Transactions, as the public API names them: :class:`Transaction` (one transaction, as
``tm.transaction()`` yields it) and :class:`TransactionManager`, with the names that go
with them.

Each is defined in its layer: the manager in :mod:`ddbtx.manager`, a transaction in the
coordinator layer (``ddbtx/_coordinator/transaction.py``); this module keeps
``from ddbtx.transaction import ...`` working as it always has.

Examples
--------
>>> from ddbtx.transaction import Transaction, TransactionManager
>>> def pay(tx: Transaction) -> None: ...
"""

from .manager import (
    HEADER_SOFT_LIMIT,
    INLINE_IMAGE_LIMIT,
    SPILL_BYTES,
    AlreadyCommitted,
    Contention,
    Isolation,
    SweepOutcome,
    Transaction,
    TransactionManager,
)

__all__ = [
    "HEADER_SOFT_LIMIT",
    "INLINE_IMAGE_LIMIT",
    "SPILL_BYTES",
    "AlreadyCommitted",
    "Contention",
    "Isolation",
    "SweepOutcome",
    "Transaction",
    "TransactionManager",
]
