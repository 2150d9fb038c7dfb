"""Long transactions (issue 37, item 5): what a pending transaction meets at and past the
sweeper's rollback age, whose clocks decide, and how a long one stays alive. The
coordinator and the sweeper each have a clock of their own here (a skew is set by hand)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from ddbtx import TransactionManager
from ddbtx.errors import TransactionRolledBackError
from ddbtx.sweeper import Sweeper
from helpers import FakeClock, Tables, assert_clean

ROLLBACK_AFTER = timedelta(seconds=60)


def key(pk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}}


@pytest.fixture
def sweeper_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sweep(
    make_tm: Callable[..., TransactionManager], sweeper_clock: FakeClock
) -> Callable[[], Any]:
    """One sweep, on the sweeper's own clock."""
    manager = make_tm(
        clock=sweeper_clock.time, monotonic=sweeper_clock.monotonic, sleep=sweeper_clock.sleep
    )

    def run() -> Any:
        sweeper = Sweeper(
            manager, rollback_after=ROLLBACK_AFTER, delete_after=timedelta(days=1),
            persist_cursor=False,
        )  # fmt: skip
        return sweeper.run(resume=False)

    return run


def write(tx: Any, tables: Tables, pk: str) -> None:
    tx.put_item(TableName=tables.data, Item={**key(pk), "v": {"S": "new"}})


def test_given_a_transaction_idle_past_the_rollback_age_when_swept_then_its_next_step_fails(
    tm: TransactionManager, tables: Tables, clock: FakeClock, sweeper_clock: FakeClock,
    sweep: Callable[[], Any], ddb: Any,
) -> None:  # fmt: skip
    # Given a transaction that wrote an item, then did nothing for 61 s by every clock
    tx = tm.begin()
    write(tx, tables, "a")
    clock.advance(61)
    sweeper_clock.advance(61)
    # When the sweeper runs
    report = sweep()
    # Then it rolled the transaction back, and its coordinator's next request and its
    # commit both raise TransactionRolledBackError; nothing is left
    assert report.rolled_back == 1
    with pytest.raises(TransactionRolledBackError):
        write(tx, tables, "b")
    with pytest.raises(TransactionRolledBackError):
        tx.commit()
    assert ddb.get_item(TableName=tables.data, Key=key("a")).get("Item") is None
    assert_clean(ddb, tables)


def test_given_a_transaction_that_writes_every_40_s_when_swept_between_then_it_lives_and_commits(
    tm: TransactionManager, tables: Tables, clock: FakeClock, sweeper_clock: FakeClock,
    sweep: Callable[[], Any], ddb: Any,
) -> None:  # fmt: skip
    # Given a transaction open for 200 s, writing a new item every 40 s (each write changes
    # its record), with a sweep after each pause
    tx = tm.begin()
    for number in range(5):
        write(tx, tables, f"item-{number}")
        clock.advance(40)
        sweeper_clock.advance(40)
        # When the sweeper runs, Then the transaction is younger than the rollback age
        assert sweep().rolled_back == 0
    # And it commits, every write in place
    tx.commit()
    items = [
        ddb.get_item(TableName=tables.data, Key=key(f"item-{n}")).get("Item") for n in range(5)
    ]
    assert all(item is not None and item["v"] == {"S": "new"} for item in items)
    assert_clean(ddb, tables)


@pytest.mark.parametrize("skew", [-30, 30], ids=["coordinator-behind", "coordinator-ahead"])
def test_given_clocks_apart_when_swept_then_the_age_is_the_sweepers_now_less_the_coordinators_ts(
    tm: TransactionManager, tables: Tables, clock: FakeClock, sweeper_clock: FakeClock,
    sweep: Callable[[], Any], skew: int,
) -> None:  # fmt: skip
    # Given a coordinator whose clock is `skew` seconds off the sweeper's, and a transaction
    # that wrote once
    clock.advance(skew)
    tx = tm.begin()
    write(tx, tables, "a")
    # When 60 + skew - 1 seconds pass by the sweeper's clock (an age of 59 s by its
    # reckoning: a coordinator behind is rolled back sooner, one ahead later)
    sweeper_clock.advance(60 + skew - 1)
    # Then it is left; two more seconds and it is rolled back
    assert sweep().rolled_back == 0
    sweeper_clock.advance(2)
    assert sweep().rolled_back == 1
