"""The lease lock: clock-free takeover by record version, fencing tokens, heartbeats,
lost responses, and mutual exclusion under real threads."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from ddbtx.chaos import Chaos
from ddbtx.instrumentation import count_requests
from ddbtx.local import LocalDynamo
from ddbtx.locks import (
    HeldLock,
    LeaseLockClient,
    LockLostError,
    LockNotGrantedError,
    list_locks,
)

from .conftest import LEASE, MAX_POLL, Wall
from .support import LoseOnce, VirtualTime

MakeLock = Callable[..., Any]


def lease_row(ddb: Any, locks: str, resource: str = "Moe") -> dict[str, Any]:
    (row,) = [r for r in list_locks(ddb, locks) if r.resource == resource and r.kind == "lease"]
    return {"state": row.state, "owner": row.owner, "token": row.fencing_token}


def fenced_write(client: Any, table: str, value: str, token: int) -> None:
    """The protected write: refused if a holder with a larger token has written."""
    client.update_item(
        TableName=table,
        Key={"pk": {"S": "customer-Moe"}},
        UpdateExpression="SET #v = :v, #fence = :token",
        ConditionExpression="attribute_not_exists(#fence) OR #fence <= :token",
        ExpressionAttributeNames={"#v": "value", "#fence": "fence"},
        ExpressionAttributeValues={":v": {"S": value}, ":token": {"N": str(token)}},
    )


# --- grants, costs, tokens ----------------------------------------------------------


def test_given_a_free_resource_when_acquired_heartbeaten_and_released_then_one_request_each(
    make_lock: MakeLock,
) -> None:
    # Given
    lc = make_lock(LeaseLockClient, "host-a")
    # When
    with count_requests(lc.client) as acquiring:
        lock = lc.acquire("Moe", data=b"customer record")
    with count_requests(lc.client) as beating:
        renewed = lock.heartbeat()
    with count_requests(lc.client) as releasing:
        released = lock.release()
    # Then
    assert (lock.fencing_token, lock.data, renewed, released) == (1, b"customer record", True, True)
    assert dict(acquiring.by_operation) == {"UpdateItem": 1}
    assert dict(beating.by_operation) == {"UpdateItem": 1}
    assert dict(releasing.by_operation) == {"UpdateItem": 1}


#: What a denied ``wait=0`` costs: the failed grant returns the row it failed on
#: (ReturnValuesOnConditionCheckFailure, documented by AWS and honoured by moto); dynalite
#: ignores that parameter, so there the client reads the row it must remember.
DENIED_TRY = {"moto": {"UpdateItem": 1}, "dynalite": {"UpdateItem": 1, "GetItem": 1}}


def test_given_a_held_lock_when_another_client_tries_once_then_one_request_denies_it(
    make_lock: MakeLock, ddb: Any, locks: str, backend: LocalDynamo
) -> None:
    # Given
    holder, other = make_lock(LeaseLockClient, "host-a"), make_lock(LeaseLockClient, "host-b")
    holder.acquire("Moe")
    # When
    with count_requests(other.client) as counts, pytest.raises(LockNotGrantedError):
        other.acquire("Moe", wait=0)
    # Then
    assert dict(counts.by_operation) == DENIED_TRY[backend.kind]
    assert lease_row(ddb, locks) == {"state": "held", "owner": "host-a", "token": 1}


def test_given_release_and_reacquire_when_tokens_compared_then_they_strictly_increase(
    make_lock: MakeLock, ddb: Any, locks: str
) -> None:
    # Given
    a, b = make_lock(LeaseLockClient, "host-a"), make_lock(LeaseLockClient, "host-b")
    tokens = []
    # When
    for lc in (a, b, a, b):
        with lc.acquire("Moe") as lock:
            tokens.append(lock.fencing_token)
    # Then: the counter stays in the (free) row, which nothing ever deletes
    assert tokens == [1, 2, 3, 4]
    assert lease_row(ddb, locks) == {"state": "free", "owner": None, "token": 4}


def test_given_a_released_lock_when_a_waiter_in_line_polls_then_it_gets_it_within_a_poll(
    make_lock: MakeLock, vt: VirtualTime
) -> None:
    # Given: host-b waits while host-a holds, host-a releases a few seconds later
    a, b = make_lock(LeaseLockClient, "host-a"), make_lock(LeaseLockClient, "host-b")
    lock_a = a.acquire("Moe")
    vt.spawn(lambda: (vt.sleep(5.0), lock_a.release()))
    # When
    start = vt.now()
    with count_requests(b.client) as counts:
        lock_b = b.acquire("Moe", wait=math.inf)
    # Then: granted well before a lease, within one poll of the release
    assert 5.0 <= vt.now() - start <= 5.0 + MAX_POLL
    assert lock_b.fencing_token == 2
    # the failed first try, its entry in line, and the grant (which removed the entry)
    assert counts.by_operation["UpdateItem"] == 3
    assert counts.by_operation["GetItem"] >= 1


# --- takeover: clock-free -----------------------------------------------------------


@pytest.mark.parametrize("skew", [-600.0, 600.0], ids=["holder-10min-behind", "holder-10min-ahead"])
def test_given_a_dead_holder_with_a_skewed_clock_when_waited_on_then_taken_after_one_lease(
    make_lock: MakeLock, vt: VirtualTime, wall: Wall, skew: float, ddb: Any, locks: str
) -> None:
    # Given: host-a's wall clock is ten minutes off, and it dies holding the lock
    a = make_lock(LeaseLockClient, "host-a", wall_clock=lambda: wall() + skew)
    b = make_lock(LeaseLockClient, "host-b")
    lock_a = a.acquire("Moe")
    # When
    start = vt.now()
    lock_b = b.acquire("Moe", wait=math.inf)
    # Then: at least one lease after host-b first saw its record version, at most one poll more
    assert LEASE <= vt.now() - start <= LEASE + MAX_POLL
    assert lock_b.fencing_token == lock_a.fencing_token + 1
    assert lease_row(ddb, locks) == {"state": "held", "owner": "host-b", "token": 2}
    assert lock_a.heartbeat() is False
    assert lock_a.lost


@pytest.mark.parametrize("skew", [-600.0, 600.0], ids=["holder-10min-behind", "holder-10min-ahead"])
def test_given_a_live_holder_with_a_skewed_clock_when_waited_on_then_it_keeps_the_lock(
    make_lock: MakeLock, vt: VirtualTime, wall: Wall, skew: float
) -> None:
    # Given: host-a heartbeats every 9 s of its lease of 20 s; its wall clock is off
    a = make_lock(LeaseLockClient, "host-a", wall_clock=lambda: wall() + skew)
    b = make_lock(LeaseLockClient, "host-b")
    lock_a = a.acquire("Moe")
    beating = vt.every(9.0, lock_a.heartbeat)
    # When: host-b waits three leases
    with pytest.raises(LockNotGrantedError):
        b.acquire("Moe", wait=3 * LEASE)
    beating.set()
    # Then
    assert not lock_a.lost
    assert lock_a.release() is True


def test_given_a_stalled_holder_when_taken_over_then_its_smaller_token_is_refused_by_the_data(
    make_lock: MakeLock, ddb: Any, data_table: str
) -> None:
    # Given: host-a pauses past its lease; host-b takes over and writes with its token
    lost: list[HeldLock] = []
    a = make_lock(LeaseLockClient, "host-a", on_lost=lost.append)
    b = make_lock(LeaseLockClient, "host-b")
    lock_a = a.acquire("Moe")
    fenced_write(ddb, data_table, "by host-a", lock_a.fencing_token)
    lock_b = b.acquire("Moe", wait=math.inf)
    fenced_write(ddb, data_table, "by host-b", lock_b.fencing_token)
    # When: host-a wakes up and writes on
    with pytest.raises(ddb.exceptions.ConditionalCheckFailedException):
        fenced_write(ddb, data_table, "late write by host-a", lock_a.fencing_token)
    # Then
    item = ddb.get_item(TableName=data_table, Key={"pk": {"S": "customer-Moe"}})["Item"]
    assert (item["value"]["S"], item["fence"]["N"]) == ("by host-b", "2")
    assert lock_a.heartbeat() is False
    assert lost == [lock_a]


def test_given_a_lock_taken_over_inside_with_when_the_block_exits_then_lock_lost_is_raised(
    make_lock: MakeLock,
) -> None:
    # Given
    a, b = make_lock(LeaseLockClient, "host-a"), make_lock(LeaseLockClient, "host-b")
    # When / Then
    with pytest.raises(LockLostError, match="taken over"), a.acquire("Moe") as lock_a:
        b.acquire("Moe", wait=math.inf)
    assert lock_a.lost


def test_given_an_exception_in_the_with_body_when_it_exits_then_it_propagates_and_releases(
    make_lock: MakeLock, ddb: Any, locks: str
) -> None:
    # Given
    lc = make_lock(LeaseLockClient, "host-a")
    # When
    with pytest.raises(KeyError, match="boom"), lc.acquire("Moe"):
        raise KeyError("boom")
    # Then
    assert lease_row(ddb, locks)["state"] == "free"


def test_given_a_lost_lock_and_an_exception_in_the_body_then_the_exception_wins_with_a_note(
    make_lock: MakeLock,
) -> None:
    # Given
    a, b = make_lock(LeaseLockClient, "host-a"), make_lock(LeaseLockClient, "host-b")
    # When
    with pytest.raises(ValueError, match="work failed") as caught, a.acquire("Moe"):
        b.acquire("Moe", wait=math.inf)
        raise ValueError("work failed")
    # Then
    assert any("taken over" in note for note in caught.value.__notes__)


# --- heartbeats and close ---------------------------------------------------------------


def test_given_held_locks_when_the_client_closes_then_heartbeats_stop_and_locks_are_free(
    make_lock: MakeLock, ddb: Any, locks: str
) -> None:
    # Given: a heartbeat period of an hour, so close() must wake the thread, not wait it out
    lc = make_lock(LeaseLockClient, "host-a", lease_duration=7200.0, heartbeat_period=3600.0)
    first, second = lc.acquire("Moe"), lc.acquire("Larry")
    (thread,) = [t for t in threading.enumerate() if t.name == "ddbtx-lease-heartbeat-host-a"]
    # When
    lc.close()
    # Then
    assert not thread.is_alive()
    assert first.released and second.released
    assert {r.resource: r.state for r in list_locks(ddb, locks)} == {"Moe": "free", "Larry": "free"}
    with pytest.raises(RuntimeError, match="closed"):
        lc.acquire("Curly")


def test_given_real_time_when_a_lock_is_held_then_the_heartbeat_thread_renews_its_rvn(
    backend: LocalDynamo, locks: str, ddb: Any
) -> None:
    # Given: real clocks, a heartbeat every 20 ms
    lc = LeaseLockClient(
        backend.client(), locks, owner="host-a", lease_duration=5.0, heartbeat_period=0.02
    )
    lock = lc.acquire("Moe")
    # When: watch the row's record version for a while
    seen = set()
    give_up = time.monotonic() + 20.0
    while len(seen) < 4 and time.monotonic() < give_up:
        seen.add(lease_rvn(ddb, locks))
        time.sleep(0.01)
    lc.close()
    # Then
    assert len(seen) >= 4
    assert lock.released


def lease_rvn(ddb: Any, locks: str) -> str:
    (row,) = [r for r in list_locks(ddb, locks) if r.kind == "lease"]
    return row.record_version or ""


# --- lost responses -----------------------------------------------------------------------


def test_given_a_lost_acquire_response_when_the_sdk_retries_then_the_grant_is_recognised(
    make_lock: MakeLock, ddb: Any, locks: str
) -> None:
    # Given: the grant is applied, its response lost; the retry meets the condition failing
    lc = make_lock(LeaseLockClient, "host-a")
    with count_requests(lc.client) as counts:  # registered first: it sees both attempts
        chaos = Chaos(lc.client)
        chaos.arm("lost", at=0)
        # When
        lock = lc.acquire("Moe", wait=0)
    # Then: one call, two attempts, and no wait for our own lease to run out
    assert chaos.fired
    assert (counts.total, counts.attempts) == (1, 2)
    assert lock.fencing_token == lease_row(ddb, locks)["token"]
    assert lease_row(ddb, locks)["owner"] == "host-a"
    assert lock.release() is True


def test_given_a_lost_heartbeat_response_when_the_sdk_retries_then_the_lock_is_not_lost(
    make_lock: MakeLock, ddb: Any, locks: str
) -> None:
    # Given
    lc = make_lock(LeaseLockClient, "host-a")
    lock = lc.acquire("Moe")
    before = lease_rvn(ddb, locks)
    chaos = Chaos(lc.client)
    chaos.arm("lost", at=0)
    # When
    renewed = lock.heartbeat()
    # Then
    assert chaos.fired
    assert renewed is True and not lock.lost
    assert lease_rvn(ddb, locks) != before


def test_given_a_lost_release_response_when_the_sdk_retries_then_release_succeeds(
    make_lock: MakeLock, ddb: Any, locks: str
) -> None:
    # Given
    lc = make_lock(LeaseLockClient, "host-a")
    lock = lc.acquire("Moe")
    chaos = Chaos(lc.client)
    chaos.arm("lost", at=0)
    # When: leaving the with block must not raise LockLostError
    with lock:
        pass
    # Then
    assert chaos.fired
    assert lock.released
    assert lease_row(ddb, locks)["state"] == "free"


def test_given_a_lost_release_response_and_a_new_grant_before_the_retry_then_the_grant_stays(
    make_lock: MakeLock, ddb: Any, locks: str
) -> None:
    from botocore.exceptions import ReadTimeoutError
    from botocore.httpsession import URLLib3Session

    # Given: A's release is applied, B is granted the free lease, then A's answer is lost
    a = make_lock(LeaseLockClient, "host-a")
    b = make_lock(LeaseLockClient, "host-b")
    lock_a = a.acquire("Moe")
    granted: list[Any] = []

    def lose_after_b_acquires(request: Any, **_: Any) -> None:
        if granted:
            return None  # the SDK's retry goes through
        URLLib3Session().send(request)  # applied by DynamoDB...
        granted.append(b.acquire("Moe", wait=0))
        raise ReadTimeoutError(endpoint_url=request.url)  # ...but the answer never arrives

    a.client.meta.events.register("before-send.dynamodb.UpdateItem", lose_after_b_acquires)
    # When the SDK retries A's release
    released = lock_a.release()
    a.client.meta.events.unregister("before-send.dynamodb.UpdateItem", lose_after_b_acquires)
    # Then A's release counts as done, and B's grant was not removed by the replay
    assert released is True
    (lock_b,) = granted
    assert lease_row(ddb, locks)["owner"] == "host-b"
    assert lock_b.heartbeat() is True
    assert lock_b.release() is True


# --- wait=0 takeover across calls (issue 13, goal 3) ----------------------------------------


def test_given_a_dead_holder_when_tried_once_now_and_a_lease_later_then_taken_over(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime
) -> None:
    # Given: host-a dies holding the lock; host-b runs once a minute (wait=0)
    dead = make_lock(LeaseLockClient, "host-a").acquire("Moe")
    b = make_lock(LeaseLockClient, "host-b")
    with pytest.raises(LockNotGrantedError):
        b.acquire("Moe", wait=0)  # only looks
    # When: a lease and more later
    vt.sleep(60.0)
    start = vt.now()
    lock = b.acquire("Moe", wait=0)
    # Then: taken over without sleeping
    assert vt.now() == start
    assert lock.fencing_token == dead.fencing_token + 1
    assert dead.heartbeat() is False


def test_given_a_live_holder_when_tried_once_a_lease_apart_then_never_taken(
    make_lock: MakeLock, vt: VirtualTime
) -> None:
    # Given: host-a heartbeats every 9 s
    lock_a = make_lock(LeaseLockClient, "host-a").acquire("Moe")
    beating = vt.every(9.0, lock_a.heartbeat)
    b = make_lock(LeaseLockClient, "host-b")
    # When: host-b tries once every 25 s (more than a lease) for a while
    denied = 0
    for _ in range(4):
        with pytest.raises(LockNotGrantedError):
            b.acquire("Moe", wait=0)
        denied += 1
        vt.sleep(25.0)
    beating.set()
    # Then
    assert denied == 4
    assert not lock_a.lost and lock_a.release() is True


def test_given_a_cold_start_when_a_dead_holder_is_found_then_the_first_call_only_observes(
    make_lock: MakeLock, vt: VirtualTime
) -> None:
    # Given: the holder died long ago; a new client (a new Lambda container) arrives
    make_lock(LeaseLockClient, "host-a").acquire("Moe")
    vt.sleep(600.0)
    fresh = make_lock(LeaseLockClient, "host-b")
    # When / Then
    with pytest.raises(LockNotGrantedError):
        fresh.acquire("Moe", wait=0)
    vt.sleep(LEASE)
    assert fresh.acquire("Moe", wait=0).fencing_token == 2


def test_given_a_lost_wait0_takeover_response_when_the_sdk_retries_then_it_is_recognised(
    make_lock: MakeLock, ddb: Any, locks: str, vt: VirtualTime
) -> None:
    # Given
    make_lock(LeaseLockClient, "host-a").acquire("Moe")
    b = make_lock(LeaseLockClient, "host-b")
    with pytest.raises(LockNotGrantedError):
        b.acquire("Moe", wait=0)
    vt.sleep(LEASE)
    lost = LoseOnce(b.client, "UpdateItem", lambda p: ":seen" in p["ExpressionAttributeValues"])
    # When
    lock = b.acquire("Moe", wait=0)
    # Then
    assert lost.fired
    assert lease_row(ddb, locks) == {
        "state": "held",
        "owner": "host-b",
        "token": lock.fencing_token,
    }


# --- lock in danger (issue 13, goal 5) -------------------------------------------------------


def test_given_failing_heartbeats_when_less_than_the_danger_part_is_left_then_on_danger_once(
    make_lock: MakeLock, vt: VirtualTime
) -> None:
    # Given: heartbeats that fail (throttled on every attempt); danger below 40 % of the lease
    warned: list[HeldLock] = []
    lc = make_lock(LeaseLockClient, "host-a", on_danger=warned.append, danger_fraction=0.4)
    lock = lc.acquire("Moe")
    # Only the test beats: the thread's real-time beats (every 9 s) would land in the
    # middle once the throttled attempts' real backoff adds up
    lc._heartbeats.close()
    chaos = Chaos(lc.client)
    # When: a failed beat with 60 % left, then two with less than 40 % left
    vt.sleep(0.4 * LEASE)
    chaos.arm("throttle", at=0)
    lock._beat()
    early = list(warned)
    vt.sleep(0.3 * LEASE)
    for at in (0, 0):
        chaos.arm("throttle", at=at)
        lock._beat()
    # Then: warned once, while still held; a good heartbeat re-arms the warning
    assert (early, warned) == ([], [lock])
    assert lock.is_held() and lock.in_danger
    chaos.disarm()
    assert lock.heartbeat() and not lock.in_danger
    vt.sleep(0.7 * LEASE)
    chaos.arm("throttle", at=0)
    lock._beat()
    assert warned == [lock, lock]


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"danger_fraction": 0}, "danger_fraction"),
        ({"danger_fraction": 1.0}, "danger_fraction"),
        ({"danger_fraction": "half"}, "danger_fraction"),
        ({"on_danger": "not callable"}, "on_danger"),
        ({"on_lost": 3}, "on_lost"),
    ],
)
def test_given_bad_danger_settings_then_value_error_naming_them(
    make_lock: MakeLock, options: dict[str, Any], argument: str
) -> None:
    with pytest.raises(ValueError, match=argument):
        make_lock(LeaseLockClient, "host-a", **options)
