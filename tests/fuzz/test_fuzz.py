"""The differential fuzzer (issue 32, item 8): random writes, natively and through ddbtx.

Hypothesis draws single-item writes (:mod:`.strategies`); each is sent natively to
table T1 and in a one-request transaction to its twin T2, from the same starting item,
and everything a user sees or could read afterwards is compared (:mod:`.runner`).
Cases where an emulator departs from AWS are not compared there, and differences of
a known class are counted, not failed (:mod:`.known`); anything else fails the test.

``DDBTX_FUZZ_EXAMPLES`` sets the examples per emulator (2,000 by default; the ``slow``
variant, run by ``make faults``, ten times as many). The seed is fixed: a run replays.
``DDBTX_FUZZ_SHRINK=1`` stops at the first unknown difference and has Hypothesis shrink it
to a minimal case (printed as the falsifying example).
"""

from __future__ import annotations

import os
import sys

import pytest

from ddbtx._base import requests
from ddbtx._base.requests import Request
from ddbtx.local import KINDS
from oracle.runner import Twins

from .fuzzer import fuzz
from .runner import native, through_ddbtx
from .strategies import Case

#: The budget the known classes were established at: below it, a class not hit is no failure.
DEFAULT_EXAMPLES = 2000
EXAMPLES = int(os.environ.get("DDBTX_FUZZ_EXAMPLES", DEFAULT_EXAMPLES))
SHRINK = os.environ.get("DDBTX_FUZZ_SHRINK") == "1"
#: The self-test's budget, a seventh of the default. Hypothesis draws simple cases first and
#: compound conditions later: 300 examples find the planted bug 12 times on each emulator,
#: 200 only twice on dynalite.
SELF_TEST_EXAMPLES = 300


@pytest.fixture
def emulator(request: pytest.FixtureRequest) -> str:
    """The emulator the twins are on (the ``twins`` parameter)."""
    return str(request.node.callspec.params["twins"])


def fuzz_and_report(twins: Twins, emulator: str, examples: int) -> None:
    # Given the twin tables on one emulator
    # When `examples` random writes go natively to T1 and through ddbtx to T2
    tally = fuzz(twins, emulator, examples, shrink=SHRINK)
    # Then every difference is of a known class, and each known class still occurs
    strict = examples >= DEFAULT_EXAMPLES
    summary = tally.summary(strict=strict)
    print(summary)
    assert tally.passed(strict=strict), summary


@pytest.mark.parametrize("twins", KINDS, indirect=True)
def test_random_writes_through_ddbtx_do_what_they_do_natively(twins: Twins, emulator: str) -> None:
    fuzz_and_report(twins, emulator, EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("twins", KINDS, indirect=True)
def test_ten_times_as_many_random_writes(twins: Twins, emulator: str) -> None:
    fuzz_and_report(twins, emulator, 10 * EXAMPLES)


def with_user_condition_in_parentheses(req: Request, protocol_condition: str) -> str:
    """ddbtx's old way of ANDing the user's condition in: always in a pair of its own, which
    DynamoDB refuses as redundant around a condition that has one (boto3's builder's)."""
    if not req.condition:
        return protocol_condition
    return f"({req.condition}) AND {protocol_condition}"


@pytest.fixture
def parentheses_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old parentheses bug, planted back wherever ``with_user_condition`` is used by name."""
    original = requests.with_user_condition
    planted = [
        name
        for name, module in sorted(sys.modules.items())
        if name.startswith("ddbtx") and getattr(module, "with_user_condition", None) is original
    ]
    for name in planted:
        monkeypatch.setattr(
            sys.modules[name], "with_user_condition", with_user_condition_in_parentheses
        )
    assert "ddbtx._item_steps.lock" in planted, planted


@pytest.mark.parametrize("twins", KINDS, indirect=True)
def test_the_fuzzer_finds_the_parentheses_bug_planted_back(
    twins: Twins, emulator: str, parentheses_bug: None
) -> None:
    # Given ddbtx with the old parentheses bug back in
    # When the fuzzer runs a seventh of its budget
    tally = fuzz(twins, emulator, SELF_TEST_EXAMPLES)
    summary = tally.summary(strict=False)
    print(summary)
    # Then it finds differences no known class explains: DynamoDB's redundant parentheses
    redundant = [
        f
        for f in tally.unknown
        if any("redundant parentheses" in str(d.ours) for d in f.differences)
    ]
    assert redundant, summary


#: The known class that is more than a message, at its smallest: the UpdateExpression is
#: refused whatever the item holds (two actions on one path), and the condition is false.
OVERLAP_AND_FALSE_CONDITION = Case(
    "update",
    "S",
    {
        "UpdateExpression": "ADD w :one, w :one",
        "ConditionExpression": "n = :ten",
        "ExpressionAttributeValues": {":one": {"N": "1"}, ":ten": {"N": "10"}},
    },
    start={"n": {"N": "5"}},
)


@pytest.mark.parametrize("twins", KINDS, indirect=True)
def test_an_invalid_update_expression_with_a_false_condition_is_refused_as_natively(
    twins: Twins, emulator: str, request: pytest.FixtureRequest
) -> None:
    if emulator == "moto":
        pytest.skip("moto checks an UpdateExpression only after the condition (AWS: before)")
    # Given an item whose n is 5
    # When an update with overlapping paths and the condition n = 10 is sent natively
    theirs = native(twins, OVERLAP_AND_FALSE_CONDITION)
    assert theirs.code == "ValidationException", theirs
    # and through ddbtx
    request.applymarker(
        pytest.mark.xfail(
            strict=True, reason="known class: false condition before an invalid update expression"
        )
    )
    ours = through_ddbtx(twins, OVERLAP_AND_FALSE_CONDITION)
    # Then ddbtx refuses it as DynamoDB does (it answers ConditionalCheckFailedException)
    assert ours.code == theirs.code, ours
