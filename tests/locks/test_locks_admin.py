"""Table creation, the operator listing and the janitor's sweep of expired rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ddbtx import schema
from ddbtx.instrumentation import count_requests
from ddbtx.local import LocalDynamo
from ddbtx.locks import (
    GC_MARGIN,
    FifoLock,
    LeaseLockClient,
    LockRow,
    Mutex,
    create_lock_table,
    list_locks,
    sweep_expired_page,
    sweep_expired_rows,
)
from helpers import scan

from .conftest import LEASE, WALL_START
from .support import VirtualTime, wait_until

MakeLock = Callable[..., Any]
#: Epoch seconds well past every TTL the fixtures' clients write.
LATER = WALL_START + LEASE + GC_MARGIN + 10


def sort_keys(ddb: Any, table: str) -> list[tuple[str, str]]:
    return sorted((i[schema.LOCK_PK]["S"], i[schema.LOCK_SK]["S"]) for i in scan(ddb, table))


# --- create_lock_table ----------------------------------------------------------------


def test_given_no_table_when_created_twice_then_one_table_with_the_lock_key_schema(
    ddb: Any, table_name: Callable[[str], str], backend: LocalDynamo
) -> None:
    # Given
    name = table_name("locks")
    # When
    create_lock_table(ddb, name)
    create_lock_table(ddb, name)
    # Then
    table = ddb.describe_table(TableName=name)["Table"]
    assert table["KeySchema"] == [
        {"AttributeName": schema.LOCK_PK, "KeyType": "HASH"},
        {"AttributeName": schema.LOCK_SK, "KeyType": "RANGE"},
    ]
    assert table["TableStatus"] == "ACTIVE"
    if backend.kind == "moto":  # dynalite has no TTL API; TTL is garbage collection only
        ttl = ddb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
        assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", schema.LOCK_TTL)


def test_given_a_table_with_another_key_schema_when_created_then_value_error(
    ddb: Any, table_name: Callable[[str], str]
) -> None:
    # Given
    name = table_name("other")
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    # When / Then
    with pytest.raises(ValueError, match="key schema"):
        create_lock_table(ddb, name)


# --- list_locks -------------------------------------------------------------------------


def test_given_every_kind_of_lock_when_listed_then_each_row_says_what_it_is(
    make_lock: MakeLock, make_mutex: Callable[..., Mutex], ddb: Any, locks: str, vt: VirtualTime
) -> None:
    # Given: a mutex, a held lease with a waiter in line and a released one, a FIFO
    # holder with two waiters
    assert make_mutex("worker-1", expire_after=60.0).acquire("invoice-42")
    lease = make_lock(LeaseLockClient, "host-a")
    lease.acquire("Moe")
    lease.acquire("Larry").release()
    waiting_lease = make_lock(LeaseLockClient, "host-b")
    vt.spawn(lambda: waiting_lease.acquire("Moe").release())
    wait_until(lambda: "host-b" in {r.owner for r in list_locks(ddb, locks)}, "in line")
    holder = make_lock(FifoLock, "p1")
    lock = holder.acquire("orders", namespace="sum")
    waiters = [make_lock(FifoLock, name) for name in ("p2", "p3")]
    for fifo in waiters:
        vt.spawn(lambda f=fifo: f.acquire("orders", namespace="sum").release())
        wait_until(lambda f=fifo: f.owner in {r.owner for r in list_locks(ddb, locks)}, "queued")
    # When
    rows = list_locks(ddb, locks)
    lock.release()
    # Then
    assert [(r.resource, r.kind, r.namespace, r.state, r.owner) for r in rows] == [
        ("Larry", "lease", None, "free", None),
        ("Moe", "lease", None, "held", "host-a"),
        ("Moe", "lease", None, "waiting", "host-b"),
        ("invoice-42", "mutex", None, "held", "worker-1"),
        ("orders", "fifo", "sum", "held", "p1"),
        ("orders", "fifo", "sum", "waiting", "p2"),
        ("orders", "fifo", "sum", "waiting", "p3"),
    ]
    larry, moe, in_line, invoice, head, first, second = rows
    assert (larry.fencing_token, moe.fencing_token, head.fencing_token) == (1, 1, 1)
    assert (in_line.ticket, in_line.queue_position, in_line.fencing_token) == (1, 1, None)
    assert (first.ticket, first.queue_position, second.ticket, second.queue_position) == (
        2,
        1,
        3,
        2,
    )
    assert invoice.expires_at == WALL_START + 60
    assert moe.expires_at == WALL_START + LEASE
    assert all(
        isinstance(r, LockRow) and r.record_version for r in (moe, in_line, invoice, head, first)
    )


# --- sweep ------------------------------------------------------------------------------


@pytest.fixture
def expired_rows(
    make_lock: MakeLock, make_mutex: Callable[..., Mutex], ddb: Any, locks: str
) -> Callable[[], None]:
    """Rows for the sweeper: two rows of the earlier layouts, an expiring mutex (TTL,
    no counter) and the queue row of a FIFO waiter that died, then counters (lease
    row, FIFO head) and a mutex of this layout, which keeps its counter."""

    def legacy(resource: str, sort_key: str, owner: str, ttl: float) -> None:
        item = {
            schema.LOCK_PK: {"S": resource},
            schema.LOCK_SK: {"S": sort_key},
            "owner": {"S": owner},
            "rvn": {"S": f"old-{owner}"},
            schema.LOCK_TTL: {"N": str(int(ttl))},
        }
        ddb.put_item(TableName=locks, Item=item)

    def make() -> None:
        legacy("invoice-1", "mutex", "worker-1", WALL_START + 30)
        assert make_mutex("worker-2").acquire("invoice-2")
        make_lock(LeaseLockClient, "host-a").acquire("Moe")
        make_lock(FifoLock, "p1").acquire("orders")
        legacy("orders", "fifo#default#00000000000000000002", "p2", WALL_START + LEASE + GC_MARGIN)

    return make


def test_given_expired_rows_when_swept_then_only_those_past_the_grace_are_deleted(
    expired_rows: Callable[[], None], ddb: Any, locks: str
) -> None:
    # Given
    expired_rows()
    before = sort_keys(ddb, locks)
    # When: first within the grace of every TTL, then past it
    kept = sweep_expired_rows(ddb, locks, now=LATER, grace=LATER - WALL_START)
    swept = sweep_expired_rows(ddb, locks, now=LATER, grace=5.0)
    # Then: the mutex that expires and the queue row went; counters and the lasting mutex stay
    assert (kept, swept) == (0, 2)
    assert sort_keys(ddb, locks) == [
        ("Moe", "lease"),
        ("invoice-2", "mutex"),
        ("orders", "fifo#default#"),
    ]
    assert len(before) == 5


def test_given_a_row_renewed_after_the_scan_when_swept_then_it_is_kept(
    expired_rows: Callable[[], None], ddb: Any, locks: str, backend: LocalDynamo
) -> None:
    # Given: between the sweeper's scan and its delete, the expired mutex is re-acquired
    expired_rows()
    reacquired = []

    def reacquire_first(params: dict[str, Any], **_: Any) -> None:
        if not reacquired and params["Key"][schema.LOCK_SK]["S"] == "mutex":
            late = Mutex(ddb, locks, owner="worker-3", wall_clock=lambda: LATER)
            reacquired.append(late.acquire("invoice-1"))

    sweeper = backend.client()
    sweeper.meta.events.register("provide-client-params.dynamodb.DeleteItem", reacquire_first)
    # When
    swept = sweep_expired_rows(sweeper, locks, now=LATER, grace=5.0)
    # Then: the re-acquired row survived, the queue row did not
    assert reacquired == [True]
    assert swept == 1
    assert ("invoice-1", "mutex") in sort_keys(ddb, locks)
    assert [r.owner for r in list_locks(ddb, locks) if r.kind == "mutex"] == [
        "worker-3",
        "worker-2",
    ]


def test_given_a_page_budget_when_swept_page_by_page_then_resuming_completes_the_job(
    expired_rows: Callable[[], None], ddb: Any, locks: str
) -> None:
    # Given
    expired_rows()
    # When
    pages = [sweep_expired_page(ddb, locks, now=LATER, grace=5.0, page_size=2)]
    while pages[-1].next_key is not None:
        pages.append(
            sweep_expired_page(
                ddb, locks, now=LATER, grace=5.0, page_size=2, start_key=pages[-1].next_key
            )
        )
    # Then
    assert len(pages) >= 3
    assert sum(p.deleted for p in pages) == 2
    assert sum(p.scanned for p in pages) == 5


def test_given_an_empty_table_when_swept_then_one_scan_and_nothing_deleted(
    ddb: Any, locks: str
) -> None:
    # When
    with count_requests(ddb) as counts:
        swept = sweep_expired_rows(ddb, locks, now=LATER, grace=0.0)
    # Then
    assert swept == 0
    assert dict(counts.by_operation) == {"Scan": 1}


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"now": float("nan"), "grace": 1.0}, "now"),
        ({"now": LATER, "grace": -1.0}, "grace"),
        ({"now": LATER, "grace": 1.0, "page_size": 0}, "page_size"),
    ],
)
def test_given_bad_sweep_arguments_then_value_error_naming_it_and_no_request(
    ddb: Any, locks: str, kwargs: dict[str, Any], argument: str
) -> None:
    with count_requests(ddb) as counts, pytest.raises(ValueError, match=argument):
        sweep_expired_page(ddb, locks, **kwargs)
    assert counts.total == 0


def test_given_an_expired_mutex_of_this_layout_when_swept_then_freed_and_its_counter_kept(
    make_mutex: Callable[..., Mutex], ddb: Any, locks: str
) -> None:
    # Given: a holder whose expiry (30 s, by its wall clock) is long past, and one without
    assert make_mutex("worker-1", expire_after=30.0).acquire_token("invoice-1") == 1
    assert make_mutex("worker-2").acquire("invoice-2")
    # When
    kept = sweep_expired_rows(ddb, locks, now=WALL_START + 30 + 10, grace=60.0)
    freed = sweep_expired_rows(ddb, locks, now=LATER, grace=5.0)
    # Then: freed, never deleted; the next grant's token continues the count
    assert (kept, freed) == (0, 1)
    rows = {r.resource: (r.state, r.owner, r.fencing_token) for r in list_locks(ddb, locks)}
    assert rows == {"invoice-1": ("free", None, 1), "invoice-2": ("held", "worker-2", 1)}
    assert make_mutex("worker-3").acquire_token("invoice-1") == 2
