"""The single door to DynamoDB: every call goes through :func:`call`.

It translates botocore ``ClientError`` into :mod:`ddbtx.errors` classes (one
place, cause kept) and strips response metadata nobody needs.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from .errors import translate


def call(client: Any, operation: str, **params: Any) -> dict[str, Any]:
    """Call ``client.<operation>(**params)``; raise a :class:`DynamoDBError` on failure."""
    try:
        response: dict[str, Any] = getattr(client, operation)(**params)
    except ClientError as exc:
        raise translate(exc) from exc
    response.pop("ResponseMetadata", None)
    return response
