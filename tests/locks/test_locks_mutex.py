"""The conditional-put mutex: one write per acquire, never releases another owner's lock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ddbtx.chaos import Chaos
from ddbtx.instrumentation import count_requests
from ddbtx.locks import Mutex, list_locks

MakeMutex = Callable[..., Mutex]


def test_given_a_free_resource_when_two_owners_acquire_then_only_the_first_gets_it(
    make_mutex: MakeMutex, ddb: Any, locks: str
) -> None:
    # Given
    first, second = make_mutex("worker-1"), make_mutex("worker-2")
    # When
    got = [first.acquire("invoice-42"), second.acquire("invoice-42")]
    # Then
    assert got == [True, False]
    (row,) = list_locks(ddb, locks)
    assert (row.resource, row.kind, row.state, row.owner) == (
        "invoice-42",
        "mutex",
        "held",
        "worker-1",
    )


def test_given_a_held_mutex_when_another_owner_releases_it_then_the_lock_stays(
    make_mutex: MakeMutex, ddb: Any, locks: str
) -> None:
    # Given
    holder, other = make_mutex("worker-1"), make_mutex("worker-2")
    assert holder.acquire("invoice-42")
    # When
    released_by_other = other.release("invoice-42")
    # Then
    assert released_by_other is False
    assert [r.owner for r in list_locks(ddb, locks)] == ["worker-1"]
    assert other.acquire("invoice-42") is False


def test_given_a_released_mutex_when_acquired_again_then_it_is_granted(
    make_mutex: MakeMutex, ddb: Any, locks: str
) -> None:
    # Given
    holder, other = make_mutex("worker-1"), make_mutex("worker-2")
    assert holder.acquire("invoice-42")
    # When
    released = holder.release("invoice-42")
    released_again = holder.release("invoice-42")
    # Then
    assert (released, released_again) == (True, False)
    assert list_locks(ddb, locks) == []
    assert other.acquire("invoice-42") is True


def test_given_mutexes_when_acquired_and_released_then_each_is_exactly_one_request(
    make_mutex: MakeMutex,
) -> None:
    # Given
    holder, other = make_mutex("worker-1"), make_mutex("worker-2")
    # When
    with count_requests(holder.client) as mine, count_requests(other.client) as theirs:
        assert holder.acquire("invoice-42")
        assert not other.acquire("invoice-42")
        assert holder.release("invoice-42")
    # Then
    assert dict(mine.by_operation) == {"PutItem": 1, "DeleteItem": 1}
    assert dict(theirs.by_operation) == {"PutItem": 1}


def test_given_an_expiring_mutex_when_its_expiry_passes_then_the_row_no_longer_blocks(
    make_mutex: MakeMutex, wall: Any, ddb: Any, locks: str
) -> None:
    # Given: a holder that died; DynamoDB TTL has not deleted its row (it may take days)
    dead = make_mutex("worker-1", expire_after=30.0)
    other = make_mutex("worker-2")
    assert dead.acquire("invoice-42")
    wall.now += 29.0
    assert other.acquire("invoice-42") is False
    # When
    wall.now += 2.0
    taken = other.acquire("invoice-42")
    # Then
    assert taken is True
    assert [r.owner for r in list_locks(ddb, locks)] == ["worker-2"]
    assert dead.release("invoice-42") is False


def test_given_a_lost_acquire_response_when_the_sdk_retries_then_the_owner_still_holds(
    make_mutex: MakeMutex, ddb: Any, locks: str
) -> None:
    # Given: the put is applied but its response is lost, so botocore sends it again
    holder = make_mutex("worker-1")
    chaos = Chaos(holder.client)
    chaos.arm("lost", at=0)
    # When
    got = holder.acquire("invoice-42")
    # Then: the retry met our own row and recognised it
    assert chaos.fired
    assert got is True
    assert [r.owner for r in list_locks(ddb, locks)] == ["worker-1"]
    assert make_mutex("worker-2").acquire("invoice-42") is False


def test_given_a_lost_release_response_when_the_sdk_retries_then_release_reports_success(
    make_mutex: MakeMutex, ddb: Any, locks: str
) -> None:
    # Given
    holder = make_mutex("worker-1")
    assert holder.acquire("invoice-42")
    chaos = Chaos(holder.client)
    chaos.arm("lost", at=0)
    # When
    released = holder.release("invoice-42")
    # Then
    assert chaos.fired
    assert released is True
    assert list_locks(ddb, locks) == []
