"""When a waiter looks again (pure logic, no DynamoDB): paced by the grant cycle it has
seen, a few polls back to back once its holder is due, then a backoff."""

from __future__ import annotations

import pytest

from ddbtx.locks._pace import TIGHT_POLLS, Pace, Polls

LOW, HIGH = 0.01, 1.0


def paced(cycle: float, start: float = 100.0) -> Pace:
    """A pace that saw grants 0 to 4 go by, one every ``cycle`` seconds, the last at ``start``."""
    pace = Pace()
    for grant in range(5):
        pace.observe(grant, start - (4 - grant) * cycle)
    return pace


def test_given_a_known_pace_when_first_in_line_then_halves_then_back_to_back_then_backoff() -> None:
    # Given: a grant every second; the current holder was first seen at t=100
    polls = Polls(paced(1.0), LOW, HIGH)
    # When: the first in line asks at t=100 and, each time, after the sleep it was told
    now, delays = 100.0, []
    for _ in range(12):
        delays.append(polls.next(1, now))
        now += delays[-1]
    # Then: halves of what is left of the expected hold while longer than min_poll; once
    # the holder is due, TIGHT_POLLS looks back to back, then the backoff doubles
    halves = [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625]
    assert delays[: len(halves)] == pytest.approx(halves)
    rest = delays[len(halves) :]
    assert rest[:TIGHT_POLLS] == [0.0] * TIGHT_POLLS
    assert rest[TIGHT_POLLS:] == pytest.approx([0.01, 0.02, 0.04])


def test_given_a_known_pace_when_further_back_then_it_sleeps_until_it_is_expected_first() -> None:
    # Given: a grant every 0.2 s, the current holder first seen at t=100
    polls = Polls(paced(0.2), LOW, HIGH)
    # When / Then: three ahead (holder included): first in line after two more grants
    assert polls.next(3, 100.0) == pytest.approx(0.4)
    assert polls.next(3, 100.3) == pytest.approx(0.1)
    # and once that moment has passed, further back it backs off (no back-to-back polls)
    assert [polls.next(3, 100.5) for _ in range(3)] == pytest.approx([0.01, 0.02, 0.04])


def test_given_an_unknown_pace_then_the_first_in_line_backs_off_with_no_back_to_back_poll() -> None:
    polls = Polls(Pace(), LOW, HIGH)
    delays = [polls.next(1, 100.0) for _ in range(8)]
    assert delays == pytest.approx([0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0])


def test_given_progress_then_back_to_back_polls_and_backoff_start_over() -> None:
    # Given: a first in line that used its back-to-back polls and backed off
    polls = Polls(paced(1.0), LOW, HIGH)
    late = 102.0  # the holder is a second overdue
    used = [polls.next(1, late) for _ in range(TIGHT_POLLS + 2)]
    # When the line moves (a new holder), and it is overdue again
    polls.progress()
    again = [polls.next(1, late) for _ in range(TIGHT_POLLS + 1)]
    # Then
    assert used == pytest.approx([0.0] * TIGHT_POLLS + [0.01, 0.02])
    assert again == pytest.approx([0.0] * TIGHT_POLLS + [0.01])


def test_given_a_long_pause_in_the_traffic_then_the_pace_starts_afresh() -> None:
    # Given: a grant every 0.1 s, then nothing for more than 20 cycles
    pace = paced(0.1)
    # When the next grant is seen 10 s later
    pace.observe(5, 110.0)
    # Then that one gap is the new cycle: the old one is forgotten, not averaged in
    assert pace.cycle == pytest.approx(10.0)
