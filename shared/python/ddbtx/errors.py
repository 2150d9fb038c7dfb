"""Exceptions raised by ddbtx; botocore's ``ClientError`` becomes one in :func:`translate`
only, kept as ``__cause__``.

Every error that stands for a DynamoDB error is also a botocore ``ClientError`` with
DynamoDB's ``response`` (``Error.Code``, ``Error.Message``, and ``Item`` where DynamoDB
returns one) and ``operation_name``, so code written for boto3 catches it unchanged:
``except ClientError as e: e.response["Error"]["Code"]``. Raised through a manager, it is
also an instance of the matching ``client.exceptions.<Code>`` of the client the manager
was given (:func:`as_client_exception`). These are :class:`DynamoDBError` and its
subclasses, :class:`ConditionalCheckFailedError` (``ConditionalCheckFailedException``)
and :class:`InvalidRequestError` (``ValidationException``). ddbtx's own outcomes
(rolled back, conflict, outcome unknown, duplicate request, reused id, not found) and the
lock errors have no DynamoDB counterpart and are not ``ClientError``.

Hierarchy::

    DdbtxError
    ├── DynamoDBError                 a DynamoDB call failed (code, operation)
    │   ├── ConditionFailed           ConditionalCheckFailedException
    │   ├── ValidationFailed          ValidationException (bad expression, item too large, ...)
    │   ├── TableNotFound             ResourceNotFoundException
    │   └── Throttled                 throughput or request-limit errors, after SDK retries
    ├── GlobalTableError              a table's replication forbids it here (MREC)
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

import threading
from typing import Any, cast

from botocore.exceptions import ClientError

#: DynamoDB's own text for a false condition (PutItem, UpdateItem, DeleteItem).
CONDITION_FAILED_MESSAGE = "The conditional request failed"


class DdbtxError(Exception):
    """Base class of every error ddbtx raises on purpose."""

    def __init__(self, *args: object) -> None:
        # Not ClientError.__init__, which those that are also ClientError would reach next.
        Exception.__init__(self, *args)


def _response(code: str, message: str, item: dict[str, Any] | None = None) -> Any:
    """An error ``response`` as botocore parses DynamoDB's answer (botocore's own type)."""
    response: dict[str, Any] = {"Error": {"Code": code, "Message": message}}
    if item is not None:
        response["Item"] = item
    response["ResponseMetadata"] = {"HTTPStatusCode": 400}
    return response


class DynamoDBError(DdbtxError, ClientError):
    """A DynamoDB call failed; ``code`` is DynamoDB's error code, ``response`` its answer."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        operation: str,
        response: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.operation = operation
        self.operation_name = operation
        self.response = _response(code, message) if response is None else cast(Any, response)


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
    if isinstance(exc, DynamoDBError):
        return exc
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
    return cls(text, code=code, operation=operation, response=dict(exc.response))


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


def _operation(op: str | None) -> str:
    """``put`` -> ``PutItem``: the API a transaction's request stands for."""
    names = {"put": "PutItem", "update": "UpdateItem", "delete": "DeleteItem", "get": "GetItem"}
    return names.get(op or "", op or "TransactWriteItems")


class InvalidRequestError(TransactionError, ClientError):
    """The request is malformed or cannot be applied (reserved names, size, types, ...).

    Also a ``ClientError`` with code ``ValidationException``: DynamoDB's own message where
    DynamoDB refused the request (``dynamodb_message``), ddbtx's otherwise.
    """

    def __init__(
        self,
        message: str,
        *,
        operation: str | None = None,
        dynamodb_message: str | None = None,
        **where: Any,
    ) -> None:
        super().__init__(message, **where)
        self.operation_name = _operation(operation)
        self.response = _response("ValidationException", dynamodb_message or message)


class InvalidTransactionIdError(InvalidRequestError):
    """A ``transaction_id`` that is not a non-empty string of at most 1,024 UTF-8 bytes."""


class TransactionIdReusedError(TransactionError):
    """A ``transaction_id`` whose pending transaction recorded different work (another item
    first, other parameters, fewer requests at commit): the id was reused for other work."""


class ConditionalCheckFailedError(TransactionError, ClientError):
    """The request's own condition expression was false; the transaction was rolled back.

    Also a ``ClientError`` with code ``ConditionalCheckFailedException`` and DynamoDB's
    message; with ``ReturnValuesOnConditionCheckFailure="ALL_OLD"`` its ``response`` holds
    the item as it was (``Item``), as DynamoDB's does.
    """

    def __init__(
        self,
        message: str,
        *,
        operation: str | None = None,
        item: dict[str, Any] | None = None,
        **where: Any,
    ) -> None:
        super().__init__(message, **where)
        self.operation_name = _operation(operation)
        self.response = _response("ConditionalCheckFailedException", CONDITION_FAILED_MESSAGE, item)


class GlobalTableError(DdbtxError):
    """A table's replication forbids what was asked here: an MREC global table written
    outside its home Region, or with no home Region given (docs/global-tables.md).

    Raised before any write; ``table``, ``mode`` and ``region`` say which, where.
    """

    def __init__(self, message: str, *, table: str, mode: str, region: str | None) -> None:
        super().__init__(message)
        self.table = table
        self.mode = mode
        self.region = region


class LockError(DdbtxError):
    """Base class of lock errors."""


class LockNotGrantedError(LockError):
    """The lock was not granted within the wait."""


class LockLostError(LockError):
    """A held lock was taken over (its lease ran out without a successful heartbeat)."""


class LockNotFoundError(LockError):
    """No lock row matches what was asked for (resource, kind, namespace)."""


_dressed: dict[tuple[type[BaseException], type[ClientError]], type[BaseException]] = {}
_dressed_lock = threading.Lock()


def as_client_exception(exc: BaseException, client: Any) -> None:
    """Make ``exc`` also an instance of ``client.exceptions.<its code>``, in place.

    botocore makes one exception class per code for each client's session, so code
    written for boto3 catches ``client.exceptions.ConditionalCheckFailedException``; a
    ddbtx error raised through that client is made an instance of it too, keeping its own
    class (its type's name, and ``isinstance`` against it, are unchanged). An error with
    no such class on the client (``ValidationException`` has none) stays as it is.
    """
    if not isinstance(exc, DdbtxError) or not isinstance(exc, ClientError):
        return
    exceptions = getattr(client, "exceptions", None)
    code = exc.response.get("Error", {}).get("Code")
    modeled = getattr(exceptions, str(code), None) if code else None
    if not isinstance(modeled, type) or not issubclass(modeled, ClientError):
        return
    if isinstance(exc, modeled):
        return
    own = type(exc)
    with _dressed_lock:
        both = _dressed.get((own, modeled))
        if both is None:
            attributes = {"__module__": own.__module__, "__qualname__": own.__qualname__}
            both = _dressed[own, modeled] = type(own.__name__, (own, modeled), attributes)
    exc.__class__ = cast(Any, both)
