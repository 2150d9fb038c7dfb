"""Exceptions raised by ddbtx; botocore's ``ClientError`` becomes one in :func:`translate`
only, kept as ``__cause__``.

Hierarchy::

    DdbtxError
    ├── DynamoDBError                 a DynamoDB call failed (code, operation)
    │   ├── ConditionFailed           ConditionalCheckFailedException
    │   ├── ValidationFailed          ValidationException (bad expression, item too large, ...)
    │   ├── TableNotFound             ResourceNotFoundException
    │   └── Throttled                 throughput or request-limit errors, after SDK retries
    ├── TransactionError              a transaction could not do what was asked
    │   ├── TransactionRolledBackError
    │   ├── TransactionCommittedError
    │   ├── TransactionOutcomeUnknownError
    │   ├── TransactionNotFoundError
    │   ├── TransactionConflictError
    │   ├── DuplicateRequestError
    │   ├── InvalidRequestError
    │   │   └── InvalidTransactionIdError
    │   ├── TransactionIdReusedError
    │   └── ConditionalCheckFailedError
    └── LockError
        ├── LockNotGrantedError
        ├── LockLostError
        └── LockNotFoundError
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError


class DdbtxError(Exception):
    """Base class of every error ddbtx raises on purpose."""


class DynamoDBError(DdbtxError):
    """A DynamoDB call failed; ``code`` is DynamoDB's error code."""

    def __init__(self, message: str, *, code: str, operation: str) -> None:
        super().__init__(message)
        self.code = code
        self.operation = operation


class ConditionFailed(DynamoDBError):
    """A condition expression evaluated to false (nothing was written)."""


class ValidationFailed(DynamoDBError):
    """DynamoDB rejected the request as invalid (nothing was written)."""


class TableNotFound(DynamoDBError):
    """The table does not exist or is not active."""


class Throttled(DynamoDBError):
    """DynamoDB kept throttling after the SDK's retries were exhausted."""


_CLASSES: dict[str, type[DynamoDBError]] = {
    "ConditionalCheckFailedException": ConditionFailed,
    "ValidationException": ValidationFailed,
    "ResourceNotFoundException": TableNotFound,
    "ProvisionedThroughputExceededException": Throttled,
    "ThrottlingException": Throttled,
    "RequestLimitExceeded": Throttled,
    "LimitExceededException": Throttled,
}


def translate(exc: ClientError, tables: tuple[str, ...] = ()) -> DynamoDBError:
    """Map a botocore ``ClientError`` to the matching :class:`DynamoDBError` subclass.

    Parameters
    ----------
    exc : ClientError
        The error botocore raised.
    tables : tuple of str
        The tables the failed request named, for a ``ResourceNotFoundException``'s
        message (emulators say only "Requested resource not found").
    """
    error = exc.response.get("Error", {})
    code = str(error.get("Code", "Unknown"))
    message = str(error.get("Message", "")) or code
    operation = str(getattr(exc, "operation_name", "") or "")
    cls = _CLASSES.get(code, DynamoDBError)
    text = f"{operation}: {code}: {message}"
    if cls is TableNotFound and tables:
        named = ", ".join(repr(t) for t in tables)
        text += (
            f" (table {named}: does it exist in this region and account, or at this "
            "endpoint? TransactionManager.create_tables() makes the transactions and "
            "images tables, ddbtx.tables.create_data_table() a data table)"
        )
    return cls(text, code=code, operation=operation)


def describe_key(key: dict[str, Any] | None) -> str:
    """Render a low-level key like ``pk=S:acct-1`` for error messages."""
    if not key:
        return "-"
    parts = []
    for name, value in sorted(key.items()):
        ((kind, raw),) = (
            value.items() if isinstance(value, dict) and len(value) == 1 else (("?", value),)
        )
        text = raw.hex() if isinstance(raw, bytes | bytearray) else str(raw)
        parts.append(f"{name}={kind}:{text[:64]}")
    return ",".join(parts)


class TransactionError(DdbtxError):
    """A transaction operation failed. Names the transaction, and the item where relevant.

    ``tx_id``, ``table``, ``key`` and ``other_tx_id`` are fields, not only text.
    """

    def __init__(
        self,
        message: str,
        *,
        tx_id: str | None = None,
        table: str | None = None,
        key: dict[str, Any] | None = None,
        other_tx_id: str | None = None,
    ) -> None:
        where = f" table={table} key={describe_key(key)}" if table is not None else ""
        super().__init__(message + (f" [tx={tx_id}{where}]" if tx_id is not None else ""))
        #: What is wrong, without the transaction and item suffix: re-raising with
        #: another transaction's id starts from it (the text itself may hold " [").
        self.detail = message
        self.tx_id = tx_id
        self.table = table
        self.key = key
        #: The other transaction involved, where known: the older one that kept the
        #: item locked (conflict) or that rolled this one back (wound-wait).
        self.other_tx_id = other_tx_id


class TransactionRolledBackError(TransactionError):
    """The transaction was rolled back (by this or another coordinator)."""


class TransactionCommittedError(TransactionError):
    """The transaction is already committed; it can no longer change or roll back."""


class TransactionOutcomeUnknownError(TransactionError):
    """Whether the transaction committed cannot be known any more: the commit decision's
    answer was lost and a janitor deleted the record since. The items are consistent
    either way; read them to learn which. Not retried by :meth:`TransactionManager.run`."""


class TransactionNotFoundError(TransactionError):
    """No TX record exists under this id (never created, or already deleted)."""


class TransactionConflictError(TransactionError):
    """Another transaction kept an item locked past the wait bound; this one was rolled back."""


class DuplicateRequestError(TransactionError):
    """The item already has a write request in this transaction."""


class InvalidRequestError(TransactionError):
    """The request is malformed or cannot be applied (reserved names, size, types, ...)."""


class InvalidTransactionIdError(InvalidRequestError):
    """A ``transaction_id`` that is not a non-empty string of at most 1,024 UTF-8 bytes."""


class TransactionIdReusedError(TransactionError):
    """A ``transaction_id`` whose pending transaction recorded different work (another item
    first, other parameters, fewer requests at commit): the id was reused for other work."""


class ConditionalCheckFailedError(TransactionError):
    """The request's own condition expression was false; the transaction was rolled back."""


class LockError(DdbtxError):
    """Base class of lock errors."""


class LockNotGrantedError(LockError):
    """The lock was not granted within the wait."""


class LockLostError(LockError):
    """A held lock was taken over (its lease ran out without a successful heartbeat)."""


class LockNotFoundError(LockError):
    """No lock row matches what was asked for (resource, kind, namespace)."""
