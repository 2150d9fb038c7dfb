"""The lock workload's ledger on hand-made observations: each problem is found, and only it.

No DynamoDB here: the ledger is pure bookkeeping on the simulated time line.
"""

from __future__ import annotations

from .env import SkewClock
from .lockload import LEASE, Ledger


def ledger() -> Ledger:
    return Ledger(SkewClock())


def test_given_grants_in_token_order_after_each_lease_then_no_problem() -> None:
    book = ledger()
    book.enter("p0", 1, book.clock.now)
    book.renewed("p0", 1, book.clock.now, ok=True)
    book.leave("p0")
    book.enter("p1", 2, book.clock.now)
    assert book.problems == []


def test_given_a_grant_while_the_holder_renewed_recently_then_it_is_a_double_grant() -> None:
    book = ledger()
    book.enter("p0", 1, book.clock.now)
    book.clock.advance(LEASE / 2)
    book.enter("p1", 2, book.clock.now)
    assert book.problems == ["p1 (token 2) entered while ['p0'] held it"]


def test_given_a_grant_reported_after_a_later_token_when_it_never_renews_then_no_problem() -> None:
    # Given p0's grant (token 1) reported only after p1 took over with token 2
    book = ledger()
    since = book.clock.now
    book.clock.advance(LEASE)  # waiters' sleeps while p0's thread was descheduled
    book.enter("p1", 2, book.clock.now)
    book.enter("p0", 1, since)
    # When p0's renewal is refused, as an overtaken lease's must be
    book.renewed("p0", 1, book.clock.now, ok=False)
    # Then that is what a paused process sees: no problem
    assert book.problems == []


def test_given_an_overtaken_grant_when_it_still_renews_then_two_hold_the_lock() -> None:
    book = ledger()
    since = book.clock.now
    book.clock.advance(LEASE)
    book.enter("p1", 2, book.clock.now)
    book.enter("p0", 1, since)
    book.renewed("p0", 1, book.clock.now, ok=True)
    assert book.problems == ["p0 renewed token 1 after a later grant"]


def test_given_a_renewal_refused_within_the_lease_then_it_is_a_lost_lock() -> None:
    book = ledger()
    book.enter("p0", 1, book.clock.now)
    book.clock.advance(LEASE / 4)
    book.renewed("p0", 1, book.clock.now, ok=False)
    assert book.problems == ["p0 lost token 1 within its lease"]
