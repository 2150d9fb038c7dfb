"""The sweep cursor row: never moved back by a concurrent sweeper, and a save whose
response is lost is recognised as our own by reading."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from ddbtx import TransactionManager
from ddbtx.chaos import Chaos
from ddbtx.sweeper import Cursor, Sweeper

AGES = {"rollback_after": timedelta(minutes=1), "delete_after": timedelta(days=1)}


def test_given_two_sweepers_from_one_generation_when_both_save_then_the_later_save_loses(
    make_tm: Callable[..., TransactionManager],
) -> None:
    # Given two sweepers that both read the cursor at generation 0
    first, second = Sweeper(make_tm(), **AGES), Sweeper(make_tm(), **AGES)
    (gen_a, _), (gen_b, _) = first.load_cursor(), second.load_cursor()
    ahead = Cursor(task="data:Accounts", scan_key={"pk": {"S": "m"}, "sk": {"B": b"\x00\xff"}})
    behind = Cursor(task="images")

    # When the first stores its position, then the second stores an older one
    saved_ahead = first.save_cursor(gen_a, ahead)
    saved_behind = second.save_cursor(gen_b, behind)

    # Then only the first is stored, at the next generation
    assert (saved_ahead, saved_behind) == (True, False)
    assert first.load_cursor() == (1, ahead)


def test_given_a_save_whose_response_is_lost_when_retried_then_it_counts_as_ours(
    make_tm: Callable[..., TransactionManager],
) -> None:
    # Given a sweeper whose next DynamoDB call is applied but its answer lost
    sweeper = Sweeper(make_tm(), **AGES)
    generation, _ = sweeper.load_cursor()
    chaos = Chaos(sweeper.client)
    chaos.arm("lost", at=0)
    position = Cursor(partition=3, index_key=None, task=None)

    # When it saves (botocore retries the update, which now fails its condition)
    saved = sweeper.save_cursor(generation, position)

    # Then the save is recognised as its own, and the position is stored once
    assert chaos.fired
    assert saved is True
    assert sweeper.load_cursor() == (generation + 1, position)
