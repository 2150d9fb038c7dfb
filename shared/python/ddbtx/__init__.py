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
    InvalidTransactionIdError,
    TransactionCommittedError,
    TransactionConflictError,
    TransactionError,
    TransactionIdReusedError,
    TransactionNotFoundError,
    TransactionOutcomeUnknownError,
    TransactionRolledBackError,
)
from .guard import GuardError, guard, is_locked
from .manager import (
    AlreadyCommitted,
    Contention,
    Isolation,
    SweepOutcome,
    Transaction,
    TransactionManager,
)

__all__ = [
    "AlreadyCommitted",
    "ConditionalCheckFailedError",
    "Contention",
    "DuplicateRequestError",
    "GuardError",
    "InvalidRequestError",
    "InvalidTransactionIdError",
    "Isolation",
    "SweepOutcome",
    "Transaction",
    "TransactionCommittedError",
    "TransactionConflictError",
    "TransactionError",
    "TransactionIdReusedError",
    "TransactionManager",
    "TransactionNotFoundError",
    "TransactionOutcomeUnknownError",
    "TransactionRolledBackError",
    "guard",
    "is_locked",
]
__version__ = "0.1.0"
