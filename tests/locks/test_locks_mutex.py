"""The mutex: one write per acquire and release, never frees another owner's lock,
fencing tokens that never restart, and an expiry no skewed clock can bring forward."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ddbtx.aio import locks as aio_locks
from ddbtx.chaos import Chaos
from ddbtx.instrumentation import count_requests
from ddbtx.local import LocalDynamo
from ddbtx.locks import Mutex, list_locks
from drivers import EventLoopThread

from .conftest import Monotonic, Wall
from .support import LoseOnce

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
    # Then: the row stays, free, with its fencing counter
    assert (released, released_again) == (True, False)
    assert [(r.state, r.owner, r.fencing_token) for r in list_locks(ddb, locks)] == [
        ("free", None, 1)
    ]
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
    assert dict(mine.by_operation) == {"UpdateItem": 2}
    assert dict(theirs.by_operation) == {"UpdateItem": 1}


def test_given_acquires_and_releases_by_several_owners_then_tokens_strictly_increase(
    make_mutex: MakeMutex, ddb: Any, locks: str
) -> None:
    # Given
    a, b = make_mutex("worker-1"), make_mutex("worker-2")
    tokens = []
    # When
    for mutex in (a, b, a, b):
        token = mutex.acquire_token("invoice-42")
        assert token is not None and mutex.fencing_token("invoice-42") == token
        tokens.append(token)
        assert mutex.release("invoice-42")
    # Then
    assert tokens == [1, 2, 3, 4]
    assert b.acquire_token("invoice-42") == 5
    assert a.acquire_token("invoice-42") is None


def test_given_an_expiring_mutex_whose_holder_died_then_it_is_taken_after_expire_after(
    make_mutex: MakeMutex, mono: Monotonic, ddb: Any, locks: str
) -> None:
    # Given: a holder that died; another object saw its lock held
    dead = make_mutex("worker-1", expire_after=30.0)
    other = make_mutex("worker-2", expire_after=30.0)
    assert dead.acquire_token("invoice-42") == 1
    assert other.acquire("invoice-42") is False
    mono.now += 29.0
    assert other.acquire("invoice-42") is False
    assert dead.is_held("invoice-42")
    # When: 30 s after the other first saw the unchanged record, on its own clock
    mono.now += 1.0
    token = other.acquire_token("invoice-42")
    # Then
    assert token == 2
    assert not dead.is_held("invoice-42")
    assert [r.owner for r in list_locks(ddb, locks)] == ["worker-2"]
    assert dead.release("invoice-42") is False


def test_given_a_fresh_object_when_a_lock_is_held_then_its_first_try_only_observes(
    make_mutex: MakeMutex, mono: Monotonic
) -> None:
    # Given: a holder acquired long ago; a new object (a cold start) has seen nothing
    assert make_mutex("worker-1", expire_after=30.0).acquire("invoice-42")
    mono.now += 3600.0
    late = make_mutex("worker-2", expire_after=30.0)
    # When / Then: no takeover before it has watched the record for expire_after
    assert late.acquire("invoice-42") is False
    mono.now += 29.0
    assert late.acquire("invoice-42") is False
    mono.now += 1.0
    assert late.acquire("invoice-42") is True


@pytest.mark.parametrize("skew", [-60.0, 60.0], ids=["waiter-60s-behind", "waiter-60s-ahead"])
def test_given_skewed_wall_clocks_when_a_live_lock_is_tried_then_it_is_never_taken_early(
    make_mutex: MakeMutex, mono: Monotonic, wall: Wall, skew: float, ddb: Any, locks: str
) -> None:
    # Given: the holder's and the waiter's wall clocks a minute apart (the flaw of
    # wall-clock expiry: a live lock taken 0.35 s into a 4 s hold)
    holder = make_mutex("worker-1", expire_after=4.0)
    waiter = make_mutex("worker-2", expire_after=4.0, wall_clock=lambda: wall() + skew)
    assert holder.acquire("invoice-42")
    # When: the waiter tries every 0.35 s through the 4 s hold
    taken = []
    for _ in range(11):
        mono.now += 0.35
        taken.append(waiter.acquire("invoice-42"))
    # Then
    assert taken == [False] * 11
    assert holder.is_held("invoice-42")
    assert holder.release("invoice-42") is True


def test_given_a_denied_acquire_then_what_it_remembers_costs_one_read_only_where_needed(
    make_mutex: MakeMutex, backend: LocalDynamo
) -> None:
    # Given
    assert make_mutex("worker-1").acquire("invoice-42")
    plain, expiring = make_mutex("worker-2"), make_mutex("worker-3", expire_after=30.0)
    # When
    with count_requests(plain.client) as without, count_requests(expiring.client) as with_expiry:
        assert not plain.acquire("invoice-42")
        assert not expiring.acquire("invoice-42")
    # Then: without expiry nothing is remembered; with it, the failed write returns the
    # row (ReturnValuesOnConditionCheckFailure, documented by AWS, honoured by moto),
    # while dynalite ignores that parameter and the record is read instead
    assert dict(without.by_operation) == {"UpdateItem": 1}
    reads = {"moto": {}, "dynalite": {"GetItem": 1}}[backend.kind]
    assert dict(with_expiry.by_operation) == {"UpdateItem": 1, **reads}


def test_given_a_lost_takeover_response_when_the_sdk_retries_then_the_grant_is_recognised(
    make_mutex: MakeMutex, mono: Monotonic, ddb: Any, locks: str
) -> None:
    # Given: a dead holder watched for expire_after; the takeover's answer is lost
    assert make_mutex("worker-1", expire_after=30.0).acquire("invoice-42")
    other = make_mutex("worker-2", expire_after=30.0)
    assert other.acquire("invoice-42") is False
    mono.now += 30.0
    lost = LoseOnce(other.client, "UpdateItem", lambda params: True)
    # When
    token = other.acquire_token("invoice-42")
    # Then: the replay met its own record; one token was taken twice over at most
    assert lost.fired
    assert token is not None and token >= 2
    assert [(r.owner, r.fencing_token) for r in list_locks(ddb, locks)] == [("worker-2", token)]


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
    assert [r.state for r in list_locks(ddb, locks)] == ["free"]


def test_given_a_sync_and_an_async_mutex_on_one_table_then_they_exclude_each_other(
    backend: LocalDynamo, locks: str, event_loop_thread: EventLoopThread, ddb: Any
) -> None:
    # Given: one owner through boto3, one through aiobotocore, on the same rows
    sync = Mutex(backend.client(), locks, owner="worker-sync")
    aio = aio_locks.Mutex(event_loop_thread.client(backend), locks, owner="worker-aio")
    # When
    sync_token = sync.acquire_token("invoice-42")
    refused = event_loop_thread.run(aio.acquire_token("invoice-42"))
    assert sync.release("invoice-42")
    aio_token = event_loop_thread.run(aio.acquire_token("invoice-42"))
    # Then: one counter for both; each refuses the other while it holds
    assert (sync_token, refused, aio_token) == (1, None, 2)
    assert sync.acquire("invoice-42") is False
    assert event_loop_thread.run(aio.release("invoice-42")) is True
    assert [(r.state, r.fencing_token) for r in list_locks(ddb, locks)] == [("free", 2)]
