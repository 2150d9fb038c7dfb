"""The CLI's one-line answer to ordinary mistakes (region, credentials, endpoint, table)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import (
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
)

from ..errors import DdbtxError, DynamoDBError, TableNotFound, translate
from ..local import EmulatorError

#: Error codes with which AWS rejects the caller rather than the request.
_REJECTED_CALLER = frozenset(
    {
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "ExpiredTokenException",
        "AccessDeniedException",
    }
)


class CliError(Exception):
    """A mistake the user can fix; the message says how. Exit status 2."""


def missing_tables(describe: Callable[[str], Any], tables: Iterable[tuple[str, str]]) -> list[str]:
    """``"'name' (set by SOURCE)"`` for each configured table DescribeTable does not find."""
    missing = []
    for name, source in tables:
        try:
            describe(name)
        except ClientError as exc:
            if isinstance(translate(exc), TableNotFound):
                missing.append(f"{name!r} (set by {source})")
    return missing


def check_endpoint(url: str | None) -> None:
    """Refuse a URL with no ``http``/``https`` scheme or no host before boto3 fails on it."""
    if url is None:
        return
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CliError(
            f"--endpoint-url / AWS_ENDPOINT_URL_DYNAMODB must be a URL with a scheme and a"
            f" host, like http://127.0.0.1:8000, not {url!r}"
        )


def explain(
    exc: BaseException,
    *,
    endpoint: str | None,
    describe: Callable[[str], Any] | None = None,
    tables: Iterable[tuple[str, str]] = (),
    region: str | None = None,
) -> str | None:
    """The one-line message for ``exc``, or None when it is not a user mistake."""
    if (message := _before_any_request(exc, endpoint, region)) is not None:
        return message
    error = (
        translate(exc) if isinstance(exc, ClientError) and not isinstance(exc, DdbtxError) else exc
    )
    if any(isinstance(e, TableNotFound) for e in _causes(error)):
        named = missing_tables(describe, tables) if describe is not None else []
        if named:
            return f"table not found: {', '.join(named)}; create it or name the right table"
        return f"a table was not found ({error}); check the table options"
    if isinstance(error, DynamoDBError) and error.code in _REJECTED_CALLER:
        return f"AWS rejected the request ({error.code}): {error}; check the credentials and region"
    return None


def _before_any_request(exc: BaseException, endpoint: str | None, region: str | None) -> str | None:
    """The message for a mistake found before DynamoDB answered, or None."""
    if isinstance(exc, CliError):
        return str(exc)
    if isinstance(exc, EmulatorError):
        return f"{exc} (or run the demo on moto, the default: --emulator moto)"
    if isinstance(exc, NoRegionError):
        return "no AWS region: pass --region or set AWS_REGION (or a region in your AWS profile)"
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return (
            "no AWS credentials found: run `aws configure` or `aws sso login`, or set AWS_PROFILE"
            " or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (a local emulator: --endpoint-url)"
        )
    if isinstance(exc, EndpointConnectionError):
        if endpoint:
            return (
                f"cannot reach DynamoDB at {endpoint}: check --endpoint-url"
                " / AWS_ENDPOINT_URL_DYNAMODB"
            )
        # No endpoint given, so the region's own was used: check the region, not --endpoint-url.
        url = exc.kwargs.get("endpoint_url", "its endpoint")
        return (
            f"cannot reach DynamoDB in region {region!r} at {url}: check the region name"
            " (--region / AWS_REGION) and your network"
        )
    return None


def _causes(exc: BaseException | None) -> list[BaseException]:
    """``exc`` and its causes (a missing table often surfaces as a ddbtx error's cause)."""
    chain: list[BaseException] = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__
    return [
        translate(e) if isinstance(e, ClientError) and not isinstance(e, DdbtxError) else e
        for e in chain
    ]
