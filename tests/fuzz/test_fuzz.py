"""The differential fuzzer (issue 32, item 8): random writes, natively and through ddbtx.

Hypothesis draws single-item writes (:mod:`.strategies`); each is sent natively to
table T1 and in a one-request transaction to its twin T2, from the same starting item,
and everything a user sees or could read afterwards is compared (:mod:`.runner`).
Cases where an emulator departs from AWS are not compared there (:mod:`.deviations`);
any difference of ddbtx's fails the test.

``DDBTX_FUZZ_EXAMPLES`` sets the examples per emulator in ``make test`` (600 by default,
which keeps CI within its budget); the ``slow`` variant, run by ``make faults``, draws
6,000. The seed is fixed: a run replays.
``DDBTX_FUZZ_SHRINK=1`` stops at the first difference and has Hypothesis shrink it to a
minimal case (printed as the falsifying example).
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

import pytest
from botocore.exceptions import EndpointConnectionError

from ddbtx._base import requests
from ddbtx._base.requests import Request
from ddbtx.local import KINDS
from oracle.runner import Twins

from .fuzzer import Tally, fuzz
from .strategies import Case, Tag

EXAMPLES = int(os.environ.get("DDBTX_FUZZ_EXAMPLES", 600))
#: The slow variant's budget (``make faults``).
LONGER_EXAMPLES = 6000
SHRINK = os.environ.get("DDBTX_FUZZ_SHRINK") == "1"
#: The self-test's budget. Hypothesis draws simple cases first and
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
    try:
        tally = fuzz(twins, emulator, examples, shrink=SHRINK)
    except EndpointConnectionError as exc:
        if emulator != "dynalite":
            raise
        # dynalite's process exited (its bug, as on the conditions deviations.py names):
        # the run cannot go on there; the case is in the exception's notes
        notes = "\n".join(getattr(exc, "__notes__", []))
        pytest.skip(
            f"dynalite's process exited mid-run, on a case to add to deviations.py:\n{notes}"
        )
    # Then ddbtx did what DynamoDB did with each (where the emulator is AWS's match)
    summary = tally.summary()
    print(summary)
    assert tally.passed(), summary


@pytest.mark.parametrize("twins", KINDS, indirect=True)
def test_random_writes_through_ddbtx_do_what_they_do_natively(twins: Twins, emulator: str) -> None:
    fuzz_and_report(twins, emulator, EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("twins", KINDS, indirect=True)
def test_ten_times_as_many_random_writes(twins: Twins, emulator: str) -> None:
    fuzz_and_report(twins, emulator, LONGER_EXAMPLES)


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
    summary = tally.summary()
    print(summary)
    # Then it finds differences: DynamoDB's redundant parentheses
    redundant = [
        f
        for f in tally.differing
        if any("redundant parentheses" in str(d.ours) for d in f.differences)
    ]
    assert redundant, summary


#: What the fuzzer found ddbtx doing otherwise than DynamoDB, each at its smallest (all fixed).
FOUND: dict[str, Case] = {
    "ReturnValues of another operation": Case(
        "put",
        "S",
        {"Item": {"a": {"S": "x"}}, "ReturnValues": "ALL_NEW"},
        start=None,
        tags=frozenset({Tag.RV_FOR_OTHER_OP}),
    ),
    "ReturnValues outside its enum": Case(
        "update",
        "S",
        {
            "UpdateExpression": "SET a = :v",
            "ExpressionAttributeValues": {":v": {"S": "x"}},
            "ReturnValues": "BOGUS",
        },
        start=None,
        tags=frozenset({Tag.BAD_RETURN_VALUES}),
    ),
    "an operand of the wrong type, and an unused placeholder": Case(
        "delete",
        "S",
        {
            "ConditionExpression": "begins_with(m, :v)",
            "ExpressionAttributeValues": {":v": {"NS": ["1"]}, ":unused": {"S": "q"}},
        },
        start=None,
        tags=frozenset({Tag.UNUSED_VALUE}),
    ),
    "a placeholder neither expression defines": Case(
        "update",
        "S",
        {"UpdateExpression": "SET a = :u", "ConditionExpression": ":u <> b"},
        start={"b": {"N": "1"}},
        tags=frozenset({Tag.UNDEFINED_VALUE}),
    ),
    "a set with a duplicate in ExpressionAttributeValues": Case(
        "update",
        "S",
        {"UpdateExpression": "ADD s :v", "ExpressionAttributeValues": {":v": {"SS": ["a", "a"]}}},
        start=None,
        tags=frozenset({Tag.BAD_SET}),
    ),
    "a key attribute updated, a reserved word in the condition": Case(
        "update",
        "S",
        {
            "UpdateExpression": "REMOVE #k",
            "ConditionExpression": "name <= b",
            "ExpressionAttributeNames": {"#k": "pk"},
        },
        start={"b": {"N": "1"}},
        tags=frozenset({Tag.BARE_RESERVED}),
    ),
    "an update refused whatever the item, a syntax error in the condition": Case(
        "update",
        "S",
        {
            "UpdateExpression": "ADD w :one, w :one",
            "ConditionExpression": "n = :one AND",
            "ExpressionAttributeValues": {":one": {"N": "1"}},
        },
        start={"n": {"N": "5"}},
        tags=frozenset({Tag.SYNTAX}),
    ),
    # ddbtx evaluates the condition first (with the lock), DynamoDB the UpdateExpression
    "an update refused whatever the item, a false condition": Case(
        "update",
        "S",
        {
            "UpdateExpression": "ADD w :one, w :one",
            "ConditionExpression": "n = :ten",
            "ExpressionAttributeValues": {":one": {"N": "1"}, ":ten": {"N": "10"}},
        },
        start={"n": {"N": "5"}},
    ),
}


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "aio"])
@pytest.mark.parametrize("found", FOUND, ids=list(FOUND))
@pytest.mark.parametrize("twins", KINDS, indirect=True)
def test_what_the_fuzzer_found_is_done_as_natively(
    twins: Twins, emulator: str, found: str, aio: bool
) -> None:
    # Given a request the fuzzer once found ddbtx answering otherwise than DynamoDB
    case = replace(FOUND[found], aio=aio)
    # When it is sent natively and through ddbtx
    tally = Tally(twins, emulator)
    finding = tally.record(case)
    if tally.skipped:
        pytest.skip(f"{emulator} departs from AWS here: {', '.join(tally.skipped)}")
    # Then ddbtx answered as DynamoDB did, left the item as it did, and nothing else
    assert finding is None, str(finding)
    assert tally.agreed == 1
