"""Bad arguments to the sweeper fail at once, naming the argument, before any request."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from ddbtx import TransactionManager
from ddbtx.sweeper import Sweeper

GOOD: dict[str, Any] = {"rollback_after": timedelta(minutes=1), "delete_after": timedelta(days=1)}


class NoClient:
    """Fails the test if the sweeper sends anything."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected DynamoDB call {name}")


@pytest.fixture
def manager() -> TransactionManager:
    return TransactionManager(NoClient(), "Tx", "Img")


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ({"rollback_after": timedelta(seconds=-1)}, "rollback_after"),
        ({"delete_after": 3600}, "delete_after"),
        ({"decided_grace": None}, "decided_grace"),
        ({"data_tables": "Accounts"}, "data_tables"),
        ({"data_tables": ["Accounts", ""]}, "data_tables"),
        ({"lock_grace": float("nan")}, "lock_grace"),
        ({"lock_grace": -1}, "lock_grace"),
        ({"page_size": 0}, "page_size"),
        ({"safety_margin": -0.5}, "safety_margin"),
    ],
)
def test_given_a_bad_constructor_argument_then_value_error_names_it(
    manager: TransactionManager, override: dict[str, Any], named: str
) -> None:
    # When a sweeper is made with one bad argument, Then it is refused by name
    with pytest.raises(ValueError, match=named):
        Sweeper(manager, **{**GOOD, **override})


@pytest.mark.parametrize(
    ("call", "named"),
    [
        ({"page_budget": 0}, "page_budget"),
        ({"page_budget": True}, "page_budget"),
    ],
)
def test_given_a_bad_run_argument_then_value_error_names_it_and_nothing_is_sent(
    manager: TransactionManager, call: dict[str, Any], named: str
) -> None:
    # Given a valid sweeper on a client that must not be used
    sweeper = Sweeper(manager, **GOOD)
    # When it is run with a bad argument, Then it is refused by name without a request
    with pytest.raises(ValueError, match=named):
        sweeper.run(**call)
    with pytest.raises(ValueError, match="segments"):
        sweeper.run_full(segments=0)
