"""Where the emulators depart from AWS, and where ddbtx is known to depart from DynamoDB.

Two lists, each entry named and decided by predicates:

- :data:`DEVIATIONS`: an emulator answers a case otherwise than AWS documents (the
  reasons are the oracle's own where it has one, :mod:`oracle.test_oracle`). Its native
  answer cannot be the reference there, so the case is not compared on that emulator
  (the run counts it, by deviation).
- :data:`KNOWN`: classes of differences ddbtx still has, each limited to the fields it
  may explain (messages, mostly). Each is strict: a full-budget run that never hits one
  fails, so that a fix shows and its entry is deleted.
"""

from __future__ import annotations

import re
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
    "in the item"
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


# --- ddbtx's known differences -------------------------------------------------------------

#: The errors ddbtx finds itself, before sending anything (``_base/requests.py``): each
#: in DynamoDB's words, but a ReturnValues the operation does not take, in ddbtx's own.
PRE_SEND: dict[str, re.Pattern[str]] = {
    "unused placeholder": re.compile(
        r"^Value provided in Expression\w+ unused in expressions: keys: \{"
    ),
    "undefined placeholder": re.compile(
        r"^Invalid (Condition|Update)Expression: An expression attribute (name|value) used in "
        r"(the document path|expression) is not defined"
    ),
    "empty placeholder map": re.compile(r"^Expression\w+ must not be empty$"),
    "placeholders without expressions": re.compile(
        r"^Expression\w+ can only be specified when using expressions$"
    ),
    "key attribute updated": re.compile(
        r"^One or more parameter values were invalid: Cannot update attribute (\w+)\. This "
        r"attribute is part of the key$"
    ),
    "ReturnValues": re.compile(r"^ReturnValues='[^']*' is not supported for \w+_item$"),
}
#: Those ddbtx words otherwise than DynamoDB.
OWN_WORDS = frozenset({"ReturnValues"})

#: DynamoDB's texts for the same errors, as the emulators word them.
DYNAMODB_TEXTS: dict[str, re.Pattern[str]] = {
    "unused placeholder": re.compile(r"Value provided in Expression\w+ unused in expressions"),
    "undefined placeholder": PRE_SEND["undefined placeholder"],
    "empty placeholder map": re.compile(r"Expression\w+ must not be empty"),
    "placeholders without expressions": re.compile(r"can only be specified when using expr"),
    "key attribute updated": re.compile(r"Cannot update attribute \w+\. This attribute is part"),
    "ReturnValues": re.compile(
        r"ReturnValues can only be|Return values set to invalid value|at 'returnValues'"
    ),
}


def pre_send_error(message: str | None) -> str | None:
    """The error of ddbtx's own checks the message reports, if it is one."""
    return next((e for e, p in PRE_SEND.items() if p.search(message or "")), None)


def dynamodb_error(message: str | None) -> str | None:
    """The error DynamoDB's text stands for, among those ddbtx checks itself."""
    return next((e for e, p in DYNAMODB_TEXTS.items() if p.search(message or "")), None)


@dataclass(frozen=True)
class Sides:
    """What the two sides did with a case, and, where a class needs it, DynamoDB's answer to
    the request's ConditionExpression alone (:func:`runner.condition_alone`)."""

    native: Observed
    ours: Observed
    condition_alone: Observed | None = None


@dataclass(frozen=True)
class Known:
    """A class of differences between ddbtx and DynamoDB, left to fix (or documented)."""

    name: str
    about: str
    #: The only fields a difference of this class may be in
    fields: frozenset[str]
    applies: Callable[[Case, Sides], bool]
    emulators: frozenset[str] = BOTH


MESSAGE = frozenset({"message"})


def has_error(error: str, case: Case, message: str | None) -> bool:
    """The request really has the error ddbtx reports (so ddbtx's check is right to)."""
    if error == "placeholders without expressions":
        return placeholders_without_expressions(case)
    if error == "key attribute updated":
        found = PRE_SEND[error].search(message or "")
        return found is not None and found.group(1) in case.key_names & _updated_names(case)
    tags = {
        "unused placeholder": {Tag.UNUSED_NAME, Tag.UNUSED_VALUE},
        "undefined placeholder": {Tag.UNDEFINED_NAME, Tag.UNDEFINED_VALUE},
        "empty placeholder map": {Tag.EMPTY_MAP},
        "ReturnValues": {Tag.RV_FOR_OTHER_OP, Tag.BAD_RETURN_VALUES},
    }[error]
    return bool(case.tags & tags)


def _updated_names(case: Case) -> set[str]:
    """The attribute names the UpdateExpression names, bare or behind a placeholder."""
    expression = case.params.get("UpdateExpression", "")
    names = case.params.get("ExpressionAttributeNames", {})
    bare = set(re.findall(r"(?<![#:\w])([A-Za-z_]\w*)", expression))
    return bare | {names[p] for p in re.findall(r"#\w+", expression) if p in names}


def _same_error_in_own_words(case: Case, sides: Sides) -> bool:
    error = pre_send_error(sides.ours.message)
    return error in OWN_WORDS and dynamodb_error(sides.native.message) == error


def _own_check_first(case: Case, sides: Sides) -> bool:
    error = pre_send_error(sides.ours.message)
    return (
        sides.native.code == "ValidationException"
        and error is not None
        and has_error(error, case, sides.ours.message)
        and dynamodb_error(sides.native.message) != error
    )


#: DynamoDB's texts for an UpdateExpression it refuses whatever the item holds.
UPDATE_REFUSED = re.compile(
    r"^(1 validation error detected: )?(Invalid UpdateExpression: |One or more parameter "
    r"values were invalid: Cannot update attribute \w+\. This attribute is part of the key)"
)


def wants_condition_alone(case: Case, native: Observed) -> bool:
    """An update DynamoDB refused for its UpdateExpression, with a condition: the classes
    below ask DynamoDB what it says of the condition alone."""
    return (
        case.op == "update"
        and "ConditionExpression" in case.params
        and native.code == "ValidationException"
        and bool(UPDATE_REFUSED.search(native.message or ""))
    )


def _condition_before_update(case: Case, sides: Sides) -> bool:
    """ddbtx reports what DynamoDB says of the condition alone."""
    alone, ours = sides.condition_alone, sides.ours
    return (
        alone is not None
        and alone.code == ours.code == "ValidationException"
        and alone.message == ours.message
    )


def _false_condition_before_update(case: Case, sides: Sides) -> bool:
    """The condition alone is false on the item (DynamoDB says so), and ddbtx's Item is the
    item as it was, where asked for (dynalite itself never returns one)."""
    alone, ours = sides.condition_alone, sides.ours
    asked = case.params.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD"
    return (
        alone is not None
        and alone.code == ours.code == "ConditionalCheckFailedException"
        and ours.old == (_start_item(case) if asked else None)
    )


#: DynamoDB's texts for an invalid value (a number out of range, a set with a duplicate or
#: empty, ...), as an item's attribute: without ExpressionAttributeValues' frame
#: ("ExpressionAttributeValues contains invalid value: ... for key :x").
ITEM_VALUE = re.compile(
    r"^(1 validation error detected: )?(One or more parameter values were invalid: |Input "
    r"collection contains duplicates|Number overflow|Number underflow|The parameter cannot be "
    r"converted to a numeric value)"
)


def _value_in_record(case: Case, sides: Sides) -> bool:
    return (
        sides.native.code == "ValidationException"
        and bool(case.tags & {Tag.BAD_NUMBER, Tag.BAD_SET})
        and bool(ITEM_VALUE.search(sides.ours.message or ""))
    )


KNOWN: tuple[Known, ...] = (
    Known(
        "own words for ReturnValues",
        "ddbtx refuses a ReturnValues the operation does not take (or outside the enum) "
        "itself, before any write, in words of its own: \"ReturnValues='ALL_NEW' is not "
        "supported for put_item\"; DynamoDB says 'ReturnValues can only be ALL_OLD or NONE' "
        "(or, outside the enum, '1 validation error detected: Value ... at 'returnValues' "
        "failed to satisfy constraint ...')",
        MESSAGE,
        _same_error_in_own_words,
    ),
    Known(
        "own checks first",
        "a request with several errors: ddbtx reports the one its own checks find before "
        "sending anything (placeholders unused, undefined or empty, a key attribute in the "
        "UpdateExpression, ReturnValues), where DynamoDB reports another first (a syntax "
        "error, a reserved word, an operand of the wrong type)",
        MESSAGE,
        _own_check_first,
    ),
    Known(
        "invalid value refused in ddbtx's record",
        "an invalid value in ExpressionAttributeValues (a number out of range, a set with a "
        "duplicate or empty): ddbtx writes the request into its TX record before sending it, "
        "and DynamoDB refuses that write in its words for an item's attribute ('Input "
        "collection contains duplicates'), not in those for the parameter ('"
        "ExpressionAttributeValues contains invalid value: Input collection contains "
        "duplicates for key :x'); or refuses it before an error DynamoDB reports first",
        MESSAGE,
        _value_in_record,
        # moto stores a duplicate in a set (its deviation): no case shows it there
        DYNALITE,
    ),
    Known(
        "condition checked before the update expression",
        "an update with a ConditionExpression and an UpdateExpression both invalid: ddbtx "
        "sends the condition first (with the lock) and reports DynamoDB's complaint about it, "
        "DynamoDB reports the UpdateExpression's",
        MESSAGE,
        _condition_before_update,
        # moto checks an UpdateExpression only after the condition: no case shows it there
        DYNALITE,
    ),
    Known(
        "false condition before an invalid update expression",
        "NOT ONLY A MESSAGE: an update whose UpdateExpression DynamoDB refuses whatever the item "
        "(a syntax error, overlapping paths, ADD or DELETE with an operand of the wrong type, "
        "a key attribute) "
        "and whose ConditionExpression is false on the item: natively ValidationException, "
        "through ddbtx ConditionalCheckFailedException (with the item as Item when asked): "
        "ddbtx evaluates the condition with the lock, and the UpdateExpression reaches "
        "DynamoDB only at apply",
        frozenset({"code", "message", "old"}),
        _false_condition_before_update,
        # moto checks an UpdateExpression only after the condition: no case shows it there
        DYNALITE,
    ),
)


def known(emulator: str, case: Case, sides: Sides, differing: set[str]) -> Known | None:
    """The known class that explains every differing field, if one does."""
    for candidate in KNOWN:
        if (
            emulator in candidate.emulators
            and differing <= candidate.fields
            and candidate.applies(case, sides)
        ):
            return candidate
    return None
