"""Where the emulators depart from AWS: :data:`DEVIATIONS`, each entry named and decided by
predicates, with AWS's documented behaviour (the oracle's own reasons where it has one,
:mod:`oracle.test_oracle`). An emulator's native answer cannot be the reference where it
deviates, so such a case is not compared on that emulator (the run counts it, by name).
ddbtx itself has no entry here: any difference of ddbtx's fails the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ddbtx.local import KINDS
from oracle.runner import KEYS, normal
from oracle.test_oracle import (
    DELETE_RETURN_VALUES,
    ENUM,
    NO_EXPRESSION,
    NUMBERS,
    OLD_ON_FAILURE,
    PLACEHOLDERS,
    SYNTAX,
    UPDATED_NEW,
)

from .runner import Observed
from .strategies import Case, Tag

MOTO = frozenset({"moto"})
DYNALITE = frozenset({"dynalite"})
BOTH = frozenset(KINDS)


# --- the emulators' deviations ---------------------------------------------------------


#: A deviation's test of the emulator's answers: given the case, its answer to the native
#: request, and (after ddbtx ran; None before) what ddbtx got from it.
Answer = Callable[[Case, Observed, Observed | None], bool]


@dataclass(frozen=True)
class Deviation:
    """An emulator's departure from AWS's documented behaviour, on the cases it decides:
    those whose request has a feature (``request``) and, where given, whose answers show
    the departure (``answer``). Without ``answer`` the case is not even sent there (the
    emulator would crash)."""

    name: str
    #: What AWS does (the Developer Guide or API reference says so), and what the emulator does
    aws: str
    emulators: frozenset[str]
    request: Callable[[Case], bool]
    answer: Answer | None = None
    #: When it shows: in the native answer alone (ddbtx is then not run), or only with
    #: what ddbtx got from the emulator
    side: Literal["native", "ddbtx"] = "native"


PATH_IN_LIST_OR_BOUND = (
    "the operands of IN and BETWEEN are any operands, document paths included (Developer "
    "Guide: Comparison operator and function reference); dynalite's process exits when a "
    "path in an IN list or as BETWEEN's upper bound (or under size() there) names nothing "
    "in the item, or something it takes for nothing: false, NULL, an empty string or "
    "binary, a zero, or under size() something of size 0"
)
EVALUATION = (
    "a condition compares operands of any types (false when the types differ), and BETWEEN, "
    "IN and size() take any operand (Developer Guide: Comparison operator and function "
    "reference); moto's backend raises a Python exception instead (its server: an internal "
    "error)"
)
NESTED_FUNCTION = (
    "a function's operand may be a function (Developer Guide: Update expressions, syntax: "
    "operand ::= path | function, function ::= list_append (list1, list2) | if_not_exists "
    "(path, value)); moto refuses it as a syntax error"
)
ONLY_WITH_EXPRESSIONS = (
    "ExpressionAttributeNames or ExpressionAttributeValues without any expression is a "
    "ValidationException saying they 'can only be specified when using expressions' (API "
    "reference, Common errors of PutItem, UpdateItem, DeleteItem); moto calls them unused"
)
ATOMIC = (
    "a write DynamoDB refuses changes nothing: each UpdateItem is atomic on its item "
    "(Developer Guide: Working with items and attributes, UpdateItem); moto applies the "
    "actions before the one it refuses (ADD to a list, for one)"
)
PREFIX = (
    "an invalid expression's message is its own (e.g. 'Value provided in "
    "ExpressionAttributeNames unused in expressions: keys: {#x}'); '1 validation error "
    "detected: ' begins only those of parameter constraints (API reference, Common "
    "errors: ValidationException); moto prefixes it to every ValidationException"
)
DUPLICATE_IN_SET = (
    "a set with the same element twice is a ValidationException (Developer Guide: Data "
    "types, Sets); moto stores it"
)


def tagged(*tags: Tag) -> Callable[[Case], bool]:
    """The request has one of ``tags``."""
    return lambda case: bool(case.tags & set(tags))


def anything(case: Case) -> bool:
    return True


def accepted_or_crashed(case: Case, native: Observed, ours: Observed | None) -> bool:
    """The emulator did not refuse the request (it applied it, or failed inside)."""
    return native.code != "ValidationException"


def crashed(case: Case, native: Observed, ours: Observed | None) -> bool:
    """The emulator failed inside (a Python exception raised in moto's code, in process):
    on the native request, or (once ddbtx ran) on ddbtx's."""
    return (ours or native).origin == "moto"


def syntax_error(case: Case, native: Observed, ours: Observed | None) -> bool:
    return "Syntax error" in (native.message or "")


def without_enum_message(case: Case, native: Observed, ours: Observed | None) -> bool:
    return "returnValuesOnConditionCheckFailure" not in (native.message or "")


def key_in_updated_new(case: Case) -> bool:
    return case.op == "update" and case.params.get("ReturnValues") == "UPDATED_NEW"


def returns_key(case: Case, native: Observed, ours: Observed | None) -> bool:
    return bool(native.attributes) and bool(case.key_names & set(native.attributes))


def old_item_kept_back(case: Case, native: Observed, ours: Observed | None) -> bool:
    return native.code == "ConditionalCheckFailedException" and native.old is None


def placeholders_without_expressions(case: Case) -> bool:
    expressions = ("ConditionExpression", "UpdateExpression")
    maps = ("ExpressionAttributeNames", "ExpressionAttributeValues")
    return not any(e in case.params for e in expressions) and any(m in case.params for m in maps)


def not_said_only_with_expressions(case: Case, native: Observed, ours: Observed | None) -> bool:
    return "can only be specified when using expressions" not in (native.message or "")


def changed_though_refused(case: Case, native: Observed, ours: Observed | None) -> bool:
    """Refused, yet the item is not the one it started as."""
    return native.code == "ValidationException" and native.item != _start_item(case)


#: moto's prefix on messages AWS gives without one (AWS has it on parameter constraints only).
MOTO_PREFIX = "1 validation error detected: "


def prefixed_only(case: Case, native: Observed, ours: Observed | None) -> bool:
    """The messages differ by moto's prefix alone."""
    text = native.message or ""
    return (
        ours is not None
        and text.startswith(MOTO_PREFIX)
        and "failed to satisfy constraint" not in text
        and text.removeprefix(MOTO_PREFIX) == ours.message
    )


def _start_item(case: Case) -> Any:
    if case.start is None:
        return None
    return normal({**KEYS[case.schema].stored, **case.start})


DEVIATIONS: tuple[Deviation, ...] = (
    Deviation(
        "path in an IN list or as BETWEEN's upper bound",
        PATH_IN_LIST_OR_BOUND,
        DYNALITE,
        tagged(Tag.PATH_IN_LIST_OR_BOUND),
    ),
    Deviation(
        "ReturnValuesOnConditionCheckFailure outside its enum",
        ENUM,
        BOTH,
        tagged(Tag.BAD_OLD_ON_FAILURE),
        without_enum_message,
    ),
    Deviation(
        "ReturnValues of another operation",
        DELETE_RETURN_VALUES,
        DYNALITE,
        lambda case: case.op == "delete" and Tag.RV_FOR_OTHER_OP in case.tags,
        accepted_or_crashed,
    ),
    Deviation(
        "placeholders unused, undefined or empty",
        PLACEHOLDERS,
        MOTO,
        tagged(
            Tag.UNUSED_NAME,
            Tag.UNUSED_VALUE,
            Tag.UNDEFINED_NAME,
            Tag.UNDEFINED_VALUE,
            Tag.EMPTY_MAP,
        ),
        accepted_or_crashed,
    ),
    Deviation(
        "placeholders without expressions",
        ONLY_WITH_EXPRESSIONS,
        MOTO,
        placeholders_without_expressions,
        not_said_only_with_expressions,
    ),
    Deviation("nested function", NESTED_FUNCTION, MOTO, tagged(Tag.NESTED_FUNCTION), syntax_error),
    Deviation(
        "partial update", ATOMIC, MOTO, lambda case: case.op == "update", changed_though_refused
    ),
    Deviation("malformed expression", SYNTAX, MOTO, tagged(Tag.SYNTAX, Tag.BARE_RESERVED), crashed),
    Deviation(
        "no UpdateExpression", NO_EXPRESSION, MOTO, tagged(Tag.NO_UPDATE_EXPRESSION), crashed
    ),
    Deviation("invalid number", NUMBERS, MOTO, tagged(Tag.BAD_NUMBER), accepted_or_crashed),
    Deviation(
        "duplicate in a set", DUPLICATE_IN_SET, MOTO, tagged(Tag.BAD_SET), accepted_or_crashed
    ),
    Deviation("UPDATED_NEW with the key", UPDATED_NEW, MOTO, key_in_updated_new, returns_key),
    Deviation(
        "no Item on a false condition",
        OLD_ON_FAILURE,
        DYNALITE,
        lambda case: (
            case.params.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD"
            and case.start is not None
        ),
        old_item_kept_back,
    ),
    Deviation("internal error evaluating", EVALUATION, MOTO, anything, crashed),
    Deviation(
        "internal error on ddbtx's request", EVALUATION, MOTO, anything, crashed, side="ddbtx"
    ),
    Deviation(
        "'1 validation error detected' prefix", PREFIX, MOTO, anything, prefixed_only, "ddbtx"
    ),
)


def unsendable(emulator: str, case: Case) -> Deviation | None:
    """The emulator's deviation that keeps the case from being sent to it, if any."""
    for candidate in DEVIATIONS:
        if emulator in candidate.emulators and candidate.answer is None and candidate.request(case):
            return candidate
    return None


def deviation(
    emulator: str, case: Case, native: Observed, ours: Observed | None = None
) -> Deviation | None:
    """The emulator's deviation that keeps the case from being compared, if any: shown by its
    answer to the native request alone (``ours`` None), or with what ddbtx got from it."""
    side = "native" if ours is None else "ddbtx"
    for candidate in DEVIATIONS:
        if (
            emulator in candidate.emulators
            and candidate.side == side
            and candidate.answer is not None
            and candidate.request(case)
            and candidate.answer(case, native, ours)
        ):
            return candidate
    return None
