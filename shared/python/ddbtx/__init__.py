"""ddbtx: ACID transactions, distributed locks and their janitors for Amazon DynamoDB.

Examples
--------
>>> from ddbtx import TransactionManager, Isolation           # doctest: +SKIP
>>> tm = TransactionManager(client, "Transactions", "TransactionImages")  # doctest: +SKIP
>>> with tm.transaction() as tx:                               # doctest: +SKIP
...     tx.put_item(TableName="Orders", Item={"id": {"S": "o-1"}})
"""

from .errors import (
    ConditionalCheckFailedError,
    DuplicateRequestError,
    InvalidRequestError,
    TransactionCommittedError,
    TransactionConflictError,
    TransactionError,
    TransactionNotFoundError,
    TransactionRolledBackError,
)
from .guard import GuardError, guard, is_locked
from .transaction import Contention, Isolation, SweepOutcome, Transaction, TransactionManager

__all__ = [
    "ConditionalCheckFailedError",
    "Contention",
    "DuplicateRequestError",
    "GuardError",
    "InvalidRequestError",
    "Isolation",
    "SweepOutcome",
    "Transaction",
    "TransactionCommittedError",
    "TransactionConflictError",
    "TransactionError",
    "TransactionManager",
    "TransactionNotFoundError",
    "TransactionRolledBackError",
    "guard",
    "is_locked",
]
__version__ = "0.1.0"
