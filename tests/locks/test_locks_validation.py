"""Bad input: a ValueError naming the argument, before any request, leaving nothing behind."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from ddbtx.instrumentation import count_requests
from ddbtx.local import LocalDynamo
from ddbtx.locks import MAX_RESOURCE_BYTES, FifoLock, LeaseLockClient, Mutex, list_locks
from helpers import scan

MakeLock = Callable[..., Any]
CLIENTS = [LeaseLockClient, FifoLock]


@pytest.mark.parametrize("kind", CLIENTS, ids=["lease", "fifo"])
@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"owner": ""}, "owner"),
        ({"owner": 7}, "owner"),
        ({"lease_duration": 0}, "lease_duration"),
        ({"lease_duration": -5.0}, "lease_duration"),
        ({"lease_duration": math.inf}, "lease_duration"),
        ({"lease_duration": math.nan}, "lease_duration"),
        ({"lease_duration": True}, "lease_duration"),
        ({"heartbeat_period": 0.0}, "heartbeat_period"),
        ({"lease_duration": 10.0, "heartbeat_period": 10.0}, "heartbeat_period"),
        ({"lease_duration": 10.0, "heartbeat_period": 12.0}, "heartbeat_period"),
        ({"min_poll": 0.0}, "min_poll"),
        ({"max_poll": -1.0}, "max_poll"),
        ({"min_poll": 0.5, "max_poll": 0.2}, "min_poll"),
    ],
)
def test_given_bad_settings_when_a_lock_client_is_made_then_value_error_naming_them(
    backend: LocalDynamo, locks: str, kind: type[Any], options: dict[str, Any], argument: str
) -> None:
    settings: dict[str, Any] = {"owner": "host-a", **options}
    with pytest.raises(ValueError, match=argument):
        kind(backend.client(), locks, **settings)


@pytest.mark.parametrize(
    ("options", "argument"),
    [({"owner": ""}, "owner"), ({"owner": "w", "expire_after": 0}, "expire_after")],
)
def test_given_bad_settings_when_a_mutex_is_made_then_value_error_naming_them(
    ddb: Any, locks: str, options: dict[str, Any], argument: str
) -> None:
    with pytest.raises(ValueError, match=argument):
        Mutex(ddb, locks, **options)


BAD_RESOURCES = [
    pytest.param("", id="empty"),
    pytest.param("x" * (MAX_RESOURCE_BYTES + 1), id="too-long"),
    pytest.param("é" * (MAX_RESOURCE_BYTES // 2 + 1), id="too-many-utf8-bytes"),
    pytest.param(42, id="not-a-string"),
]


def attempts(make_lock: MakeLock, make_mutex: Callable[..., Mutex]) -> dict[str, Any]:
    """One acquire per lock kind, taking the resource (and more) as keyword arguments."""
    lease = make_lock(LeaseLockClient, "host-a")
    fifo = make_lock(FifoLock, "p1")
    mutex = make_mutex("worker-1")
    return {
        "mutex": (mutex.client, lambda resource="r", **kw: mutex.acquire(resource, **kw)),
        "mutex-release": (mutex.client, lambda resource="r", **kw: mutex.release(resource, **kw)),
        "lease": (lease.client, lambda resource="r", **kw: lease.acquire(resource, **kw)),
        "fifo": (fifo.client, lambda resource="r", **kw: fifo.acquire(resource, **kw)),
    }


@pytest.mark.parametrize("kind", ["mutex", "mutex-release", "lease", "fifo"])
@pytest.mark.parametrize("resource", BAD_RESOURCES)
def test_given_a_bad_resource_when_acquired_then_value_error_and_nothing_written(
    make_lock: MakeLock,
    make_mutex: Callable[..., Mutex],
    ddb: Any,
    locks: str,
    kind: str,
    resource: Any,
) -> None:
    # Given
    client, attempt = attempts(make_lock, make_mutex)[kind]
    # When
    with count_requests(client) as counts, pytest.raises(ValueError, match="resource"):
        attempt(resource)
    # Then
    assert counts.total == 0
    assert scan(ddb, locks) == []


@pytest.mark.parametrize(
    ("kind", "options", "argument"),
    [
        ("lease", {"wait": -1.0}, "wait"),
        ("lease", {"wait": math.nan}, "wait"),
        ("lease", {"data": "not bytes"}, "data"),
        ("fifo", {"wait": -0.5}, "wait"),
        ("fifo", {"namespace": ""}, "namespace"),
        ("fifo", {"namespace": "a#b"}, "namespace"),
        ("fifo", {"namespace": "n" * 256}, "namespace"),
    ],
)
def test_given_bad_acquire_arguments_then_value_error_naming_them_and_nothing_written(
    make_lock: MakeLock,
    make_mutex: Callable[..., Mutex],
    ddb: Any,
    locks: str,
    kind: str,
    options: dict[str, Any],
    argument: str,
) -> None:
    # Given
    client, attempt = attempts(make_lock, make_mutex)[kind]
    # When
    with count_requests(client) as counts, pytest.raises(ValueError, match=argument):
        attempt(**options)
    # Then
    assert counts.total == 0
    assert scan(ddb, locks) == []


@pytest.mark.parametrize("kind", ["mutex", "lease", "fifo"])
def test_given_the_longest_allowed_resource_name_when_acquired_then_it_works(
    make_lock: MakeLock, make_mutex: Callable[..., Mutex], ddb: Any, locks: str, kind: str
) -> None:
    # Given: exactly DynamoDB's partition key limit, in two-byte characters
    resource = "é" * (MAX_RESOURCE_BYTES // 2)
    _, attempt = attempts(make_lock, make_mutex)[kind]
    # When
    granted = attempt(resource)
    # Then
    assert granted
    assert [r.resource for r in list_locks(ddb, locks)] == [resource]
