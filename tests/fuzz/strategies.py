"""Hypothesis strategies for single-item writes, in boto3's low-level client shape.

:func:`cases` draws one :class:`Case`: a ``put_item``, ``update_item`` or ``delete_item``
with its expressions and placeholders (``Key``/``Item`` as AttributeValue maps, no
``TableName``: the runner names the native table or its twin), and the item the table
holds first (or none). Conditions are written by hand (:class:`Writer`: comparators,
AND/OR/NOT, parentheses, BETWEEN, IN, every function, nested paths, list indexes,
reserved words bare or behind ``#placeholders``) or built with boto3's own
``Attr(...)`` and ``ConditionExpressionBuilder``, as boto3's ``Table`` builds them.
Values are of every type, and a share of the requests is invalid on purpose; each such
choice is recorded in :attr:`Case.tags` (:class:`Tag`), so that where an emulator departs
from AWS the case is not compared there (:mod:`.deviations`).

Every choice is drawn, so Hypothesis shrinks a failing case to a small one; the rare
choices (an invalid request, a deep path) shrink towards the common ones.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any, Literal

from boto3.dynamodb.conditions import Attr, ConditionBase, ConditionExpressionBuilder
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from hypothesis import strategies as st

from oracle.runner import KEYS
from oracle.shapes import RETURN_VALUES, Item

Op = Literal["put", "update", "delete"]
Draw = Callable[[st.SearchStrategy[Any]], Any]


class Tag(StrEnum):
    """What a case does that an emulator may answer otherwise than AWS (or that is invalid)."""

    #: ``#x`` defined in ExpressionAttributeNames but used by no expression (likewise below)
    UNUSED_NAME = "unused-name"
    UNUSED_VALUE = "unused-value"
    #: a placeholder an expression uses that its map lacks
    UNDEFINED_NAME = "undefined-name"
    UNDEFINED_VALUE = "undefined-value"
    #: ExpressionAttributeNames/Values given but empty
    EMPTY_MAP = "empty-map"
    #: a reserved word (``name``, ``status``, ``size``, ``data``) written bare in a path
    BARE_RESERVED = "bare-reserved"
    #: a syntax error planted in an expression (doubled comparator, unknown function, ...)
    SYNTAX = "syntax"
    #: a number that is not one (``abc``), or beyond 38 digits or DynamoDB's range
    BAD_NUMBER = "bad-number"
    #: an empty set, or a set holding the same element twice
    BAD_SET = "bad-set"
    #: ReturnValues outside its enum
    BAD_RETURN_VALUES = "bad-return-values"
    #: ReturnValuesOnConditionCheckFailure outside its enum
    BAD_OLD_ON_FAILURE = "bad-old-on-failure"
    #: ReturnValues in the enum but not allowed for the operation (ALL_NEW on a put)
    RV_FOR_OTHER_OP = "rv-for-other-op"
    #: an update without UpdateExpression
    NO_UPDATE_EXPRESSION = "no-update-expression"
    #: the condition was built by boto3's ConditionExpressionBuilder
    BUILDER = "builder"
    #: a function in an update's function (``list_append(if_not_exists(l, :e), :v)``)
    NESTED_FUNCTION = "nested-function"
    #: a path, or a path's size, in an IN list or as BETWEEN's upper bound
    #: (``:v IN (m.a, size(s))``, ``:v BETWEEN :w AND s``)
    PATH_IN_LIST_OR_BOUND = "path-in-list-or-bound"


# --- values --------------------------------------------------------------------------

STRINGS = ("", "a", "ab", "abc", "b", "he", "hello", "x", "Z", "ü", "S", "N", "M", "L")
NUMBERS = (
    "0",
    "1",
    "2",
    "5",
    "10",
    "-3.25",
    "1.5",
    "1E+1",
    "1.50",
    "0001.500",
    "-0",
    "-1E+2",
    "12345678901234567890123456789012345678",
    "9.9999999999999999999999999999999999999E+125",
    "1E-130",
)
#: Numbers DynamoDB refuses: not a number, 39 significant digits, past the range.
BAD_NUMBERS = ("abc", "1.2.3", "123456789012345678901234567890123456789", "1E+126", "1E-131")
TYPES = ("S", "N", "B", "BOOL", "NULL", "SS", "NS", "BS", "L", "M")
#: attribute_type's operand: every type DynamoDB names, and one it does not.
TYPE_NAMES = (*TYPES, "XYZ")

strings = st.sampled_from(STRINGS) | st.text(alphabet="abehlo", max_size=5)
numbers = st.sampled_from(NUMBERS) | st.integers(-20, 20).map(str)
binaries = st.binary(max_size=3)
#: Set elements are never empty (DynamoDB refuses an empty string or binary in a set).
string_sets = st.sets(strings.filter(bool), min_size=1, max_size=3).map(sorted)
number_sets = st.sets(st.integers(-5, 12), min_size=1, max_size=3).map(
    lambda ns: [str(n) for n in sorted(ns)]
)
binary_sets = st.sets(st.binary(min_size=1, max_size=3), min_size=1, max_size=3).map(sorted)


@functools.cache
def attribute_values(kinds: tuple[str, ...] = TYPES, depth: int = 2) -> st.SearchStrategy[Item]:
    """A valid AttributeValue of one of ``kinds``; documents nest up to ``depth`` levels.

    Made once per arguments: Hypothesis validates each new strategy object, which costs
    more than drawing from it."""
    by_kind: dict[str, st.SearchStrategy[Item]] = {
        "S": strings.map(lambda v: {"S": v}),
        "N": numbers.map(lambda v: {"N": v}),
        "B": binaries.map(lambda v: {"B": v}),
        "BOOL": st.booleans().map(lambda v: {"BOOL": v}),
        "NULL": st.just({"NULL": True}),
        "SS": string_sets.map(lambda v: {"SS": v}),
        "NS": number_sets.map(lambda v: {"NS": v}),
        "BS": binary_sets.map(lambda v: {"BS": v}),
    }
    if depth > 0:
        inner = attribute_values(depth=depth - 1)
        by_kind["L"] = st.lists(inner, max_size=3).map(lambda v: {"L": v})
        by_kind["M"] = st.dictionaries(st.sampled_from(MEMBERS), inner, max_size=3).map(
            lambda v: {"M": v}
        )
    return st.one_of([by_kind[k] for k in kinds if k in by_kind])


# --- attribute names -------------------------------------------------------------------

#: The attributes items hold and expressions name, with the type each usually has.
ATTRIBUTES: dict[str, str] = {
    "n": "N",
    "s": "S",
    "l": "L",
    "m": "M",
    "ss": "SS",
    "ns": "NS",
    "bs": "BS",
    "b": "B",
    "t": "BOOL",
    "z": "NULL",
    "name": "S",
    "status": "S",
    "size": "N",
    "a.b": "S",
    "with space": "S",
}
#: Attributes no starting item holds (an update may create them).
NEW_ATTRIBUTES = ("v", "w", "data")
#: Map members that nested paths name (``m.a``), and the list indexes (``l[0]``).
MEMBERS = ("a", "b", "c", "name", "l")
INDEXES = (0, 1, 2, 5)
#: DynamoDB reserved words among the names above: invalid bare, fine behind ``#``.
RESERVED = frozenset({"name", "status", "size", "data"})
_BARE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
#: A path's elements: a name (bare or ``#placeholder``), or an index.
_ELEMENTS = re.compile(r"(#?\w+)|\[(\d+)\]")


def _nothing_to_dynalite(kind: str, inner: Any) -> bool:
    """A value dynalite takes for a missing one (JavaScript's falsy values)."""
    if kind in ("BOOL", "NULL"):
        return kind == "NULL" or not inner
    if kind in ("S", "B"):
        return len(inner) == 0
    return kind == "N" and Decimal(inner) == 0


# --- the case ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One request on one item, and the item the table holds before it."""

    op: Op
    #: The oracle's key schema (``runner.KEYS``): how the key is stored, sent and read.
    schema: str
    #: The request without ``TableName`` and ``Key`` (a put's ``Item`` without the key).
    params: Item
    start: Item | None
    tags: frozenset[Tag] = frozenset()
    #: Through ``ddbtx.aio`` rather than the sync API.
    aio: bool = False

    def request(self, table: str) -> Item:
        """The boto3 parameters for ``table`` (native or twin: the same but the name)."""
        key = KEYS[self.schema].sent
        params: Item = {"TableName": table, **self.params}
        if self.op == "put":
            params["Item"] = {**key, **self.params["Item"]}
        else:
            params["Key"] = dict(key)
        return params

    @property
    def key_names(self) -> frozenset[str]:
        return frozenset(KEYS[self.schema].stored)

    def __repr__(self) -> str:
        start = "absent" if self.start is None else self.start
        via = "aio" if self.aio else "sync"
        return (
            f"{self.op}_item({self.params}) on schema {self.schema} via {via}, "
            f"start {start}, tags {sorted(self.tags)}"
        )


_PERCENT = st.integers(0, 99)
ADD_KINDS = ("N", "N", "SS", "NS", "BS", "S", "L")
DELETE_KINDS = ("SS", "NS", "BS", "N")


@functools.cache
def _indexes(count: int) -> st.SearchStrategy[int]:
    return st.integers(0, count - 1)


class Writer:
    """Writes one request's expressions, drawing every choice, and keeps their placeholders.

    Names and values go behind placeholders ``#<prefix>N`` and ``:<prefix>N``; two
    writers of one request (the condition's and the update's) use different prefixes.
    """

    def __init__(self, draw: Draw, start: Item | None, prefix: str = "p") -> None:
        self.draw = draw
        self.prefix = prefix
        self.names: dict[str, str] = {}
        self.values: dict[str, Item] = {}
        self.tags: set[Tag] = set()
        self.start = start
        #: Values the starting item holds: conditions compare with them, to be true at times.
        self.known: list[Item] = _leaves(start or {})

    # -- choices
    def pick(self, options: tuple[Any, ...] | list[Any]) -> Any:
        return options[self.draw(_indexes(len(options)))]

    def rarely(self, percent: int) -> bool:
        """True ``percent`` times in 100; shrinks to False."""
        return bool(self.draw(_PERCENT) >= 100 - percent)

    def keyword(self, word: str) -> str:
        """DynamoDB's keywords are case-insensitive: mostly upper case, at times lower."""
        return word.lower() if self.rarely(15) else word

    # -- names and paths
    def element(self, name: str) -> str:
        """One name of a path: bare where DynamoDB allows it (or a reserved word, invalid),
        else behind a placeholder (a new one, or one this request already uses)."""
        bare = _BARE.fullmatch(name) is not None
        if bare and name not in RESERVED and self.draw(st.booleans()):
            return name
        if name in RESERVED and self.rarely(6):
            self.tags.add(Tag.BARE_RESERVED)
            return name
        mine = [p for p, n in self.names.items() if n == name]
        if mine and self.draw(st.booleans()):
            return str(self.pick(mine))
        placeholder = f"#{self.prefix}{len(self.names)}"
        self.names[placeholder] = name
        return placeholder

    def path(self, roots: tuple[str, ...] | None = None, key: tuple[str, ...] = ()) -> str:
        """A document path: an attribute, then map members and list indexes."""
        names = roots or tuple(ATTRIBUTES)
        root = self.pick(key) if key and self.rarely(5) else self.pick(names)
        text = self.element(root)
        for _ in range(self.draw(st.integers(0, 2)) if self.rarely(45) else 0):
            if self.draw(st.booleans()):
                text += f"[{self.pick(INDEXES)}]"
            else:
                text += "." + self.element(self.pick(MEMBERS))
        return text

    def names_something(self, operand: str) -> bool:
        """The operand is a value, or a path (or a path's size, not 0) naming something in
        the starting item."""
        if operand.startswith(":"):
            return True
        found: Item | None = {"M": self.start} if self.start is not None else None
        path = operand.removeprefix("size(").removesuffix(")")
        for name, index in _ELEMENTS.findall(path):
            if found is None:
                return False
            ((kind, inner),) = found.items()
            if name and kind == "M":
                found = inner.get(self.names.get(name, name))
            elif index and kind == "L" and int(index) < len(inner):
                found = inner[int(index)]
            else:
                return False
        if found is None:
            return False
        ((kind, inner),) = found.items()
        if path == operand:
            # dynalite's process exits on a value it takes for nothing there too: false,
            # NULL, an empty string or binary, a zero
            return not _nothing_to_dynalite(kind, inner)
        # A size is only of a string, binary, set, list or map; dynalite's process exits on
        # a size of 0 there too (it takes the 0 for nothing)
        return kind not in ("N", "BOOL", "NULL") and len(inner) > 0

    # -- values
    def value(self, kinds: tuple[str, ...] = TYPES) -> str:
        """A value placeholder: often one of the starting item's values, else a new one."""
        choices = [v for v in self.known if next(iter(v)) in kinds]
        if choices and self.rarely(40):
            value = self.pick(choices)
        else:
            value = self.draw(attribute_values(kinds))
        if self.rarely(3):
            value = self.draw(BAD_VALUES)
            self.tags.add(Tag.BAD_NUMBER if "N" in value or "NS" in value else Tag.BAD_SET)
        mine = [p for p, v in self.values.items() if v == value]
        if mine and self.draw(st.booleans()):
            return str(self.pick(mine))
        placeholder = f":{self.prefix}{len(self.values)}"
        self.values[placeholder] = value
        return placeholder

    # -- conditions
    def operand(self) -> str:
        kind = self.pick(("path", "path", "value", "value", "size"))
        if kind == "size":
            return f"size({self.path()})"
        return self.path() if kind == "path" else self.value()

    def function(self) -> str:
        name = self.pick(
            (
                "attribute_exists",
                "attribute_not_exists",
                "attribute_type",
                "begins_with",
                "contains",
            )
        )
        if name in ("attribute_exists", "attribute_not_exists"):
            # On the key, the commonest condition of all (an insert or an update only)
            path = self.element("pk") if self.rarely(30) else self.path()
            return f"{name}({path})"
        path = self.path(key=("pk",))
        if name == "attribute_type":
            type_name = self.pick(TYPE_NAMES)
            placeholder = f":{self.prefix}{len(self.values)}"
            self.values[placeholder] = {"S": type_name}
            return f"attribute_type({path}, {placeholder})"
        if name == "begins_with":
            return f"begins_with({path}, {self.value(('S', 'B', 'N'))})"
        return f"contains({path}, {self.operand()})"

    def condition(self, depth: int = 3) -> str:
        """A condition of at most ``depth`` levels of AND, OR, NOT and parentheses."""
        kinds = ["compare", "compare", "function", "function", "between", "in"]
        if depth > 0:
            kinds += ["and", "or", "not", "parens"]
        kind = self.pick(kinds)
        if kind == "compare":
            comparator = self.pick(("=", "<>", "<", "<=", ">", ">="))
            space = "" if self.rarely(10) else " "
            return f"{self.operand()}{space}{comparator}{space}{self.operand()}"
        if kind == "function":
            return self.function()
        if kind == "between":
            low, high = self.operand(), self.operand()
            if not self.names_something(high):
                self.tags.add(Tag.PATH_IN_LIST_OR_BOUND)
            between, and_ = self.keyword("BETWEEN"), self.keyword("AND")
            return f"{self.operand()} {between} {low} {and_} {high}"
        if kind == "in":
            count = self.draw(st.integers(1, 4))
            listed = [self.operand() for _ in range(count)]
            if not all(self.names_something(m) for m in listed):
                self.tags.add(Tag.PATH_IN_LIST_OR_BOUND)
            members = ", ".join(listed)
            return f"{self.operand()} {self.keyword('IN')} ({members})"
        if kind in ("and", "or"):
            left, right = self.condition(depth - 1), self.condition(depth - 1)
            return f"{left} {self.keyword(kind.upper())} {right}"
        if kind == "not":
            return f"{self.keyword('NOT')} {self.condition(depth - 1)}"
        inner = self.condition(depth - 1)
        # A redundant pair (a pair around a pair) is refused by DynamoDB: natively and so
        # through ddbtx.
        return f"(({inner}))" if self.rarely(4) else f"({inner})"

    # -- update expressions
    def update_operand(self, depth: int = 2) -> str:
        kinds = ["path", "value", "value"]
        if depth > 0:
            kinds += ["if_not_exists", "list_append"]
        kind = self.pick(kinds)
        if kind == "path":
            return self.path()
        if kind == "value":
            return self.value()
        if kind == "if_not_exists":
            inner = [self.path(), self.update_operand(depth - 1)]
        else:
            inner = [self.update_operand(depth - 1), self.update_operand(depth - 1)]
        if any("(" in operand for operand in inner):
            self.tags.add(Tag.NESTED_FUNCTION)
        return f"{kind}({', '.join(inner)})"

    def set_action(self, targets: tuple[str, ...]) -> str:
        target = self.path(targets, key=("pk",))
        operand = self.update_operand()
        kind = self.pick(("plain", "plain", "plus", "minus"))
        if kind == "plain":
            return f"{target} = {operand}"
        sign = "+" if kind == "plus" else "-"
        return f"{target} = {operand} {sign} {self.update_operand(1)}"

    def update_expression(self) -> str:
        """SET, REMOVE, ADD and DELETE clauses, each once, in any order (a clause twice at
        times: invalid)."""
        targets = (*ATTRIBUTES, *NEW_ATTRIBUTES)
        clauses = self.draw(
            st.lists(st.sampled_from(("SET", "REMOVE", "ADD", "DELETE")), min_size=1, max_size=4)
        )
        if not self.rarely(3):
            clauses = list(dict.fromkeys(clauses))
        parts = []
        for clause in clauses:
            count = self.draw(st.integers(1, 3))
            if clause == "SET":
                actions = [self.set_action(targets) for _ in range(count)]
            elif clause == "REMOVE":
                actions = [self.path(targets, key=("pk",)) for _ in range(count)]
            else:
                # ADD takes a number or a set, DELETE a set: the others are invalid
                kinds = ADD_KINDS if clause == "ADD" else DELETE_KINDS
                actions = [f"{self.path(targets)} {self.value(kinds)}" for _ in range(count)]
            parts.append(f"{self.keyword(clause)} {', '.join(actions)}")
        return " ".join(parts)

    def placeholders(self) -> Item:
        """ExpressionAttributeNames/Values for what the expressions use."""
        out: Item = {}
        if self.names:
            out["ExpressionAttributeNames"] = dict(self.names)
        if self.values:
            out["ExpressionAttributeValues"] = dict(self.values)
        return out


def _leaves(item: Item) -> list[Item]:
    """Every value in ``item``, nested ones too (each at most once)."""
    found: list[Item] = []
    for value in item.values():
        if value not in found:
            found.append(value)
        ((kind, raw),) = value.items()
        if kind == "M":
            found += [v for v in _leaves(raw) if v not in found]
        elif kind == "L":
            found += [v for v in _leaves({str(i): v for i, v in enumerate(raw)}) if v not in found]
    return found


@st.composite
def bad_values(draw: Draw) -> Item:
    """A value DynamoDB refuses: a bad number, an empty set, a set with a duplicate."""
    kind = draw(st.sampled_from(("N", "NS", "SS", "SS-dup", "NS-dup", "SS-empty-string")))
    if kind == "N":
        return {"N": draw(st.sampled_from(BAD_NUMBERS))}
    if kind == "NS":
        return {"NS": ["1", draw(st.sampled_from(BAD_NUMBERS))]}
    if kind == "SS":
        return {"SS": []}
    if kind == "SS-dup":
        return {"SS": ["a", "a"]}
    if kind == "SS-empty-string":
        return {"SS": ["a", ""]}
    return {"NS": ["1", "1.0"]}


BAD_VALUES = bad_values()


# --- boto3's condition builder -----------------------------------------------------------

_DESERIALIZE = TypeDeserializer()
_SERIALIZE = TypeSerializer()


def builder_condition(w: Writer, depth: int = 3) -> ConditionBase:
    """A condition as boto3 users write them: ``Attr(...)`` combined with ``&``, ``|``, ``~``."""
    kinds = ["compare", "compare", "function", "between", "in", "size"]
    if depth > 0:
        kinds += ["and", "or", "not"]
    kind = w.pick(kinds)
    if kind in ("and", "or"):
        left, right = builder_condition(w, depth - 1), builder_condition(w, depth - 1)
        return left & right if kind == "and" else left | right
    if kind == "not":
        return ~builder_condition(w, depth - 1)
    attr = Attr(_builder_path(w))
    value = _python_value(w)
    if kind == "compare":
        method = w.pick(("eq", "ne", "lt", "lte", "gt", "gte"))
        return getattr(attr, method)(value)  # type: ignore[no-any-return]
    if kind == "between":
        return attr.between(value, _python_value(w))
    if kind == "in":
        return attr.is_in([value, *(_python_value(w) for _ in range(w.draw(st.integers(0, 2))))])
    if kind == "size":
        method = w.pick(("eq", "lt", "lte", "gt", "gte"))  # Size has no ne
        return getattr(attr.size(), method)(_python_number(w))  # type: ignore[no-any-return]
    function = w.pick(("exists", "not_exists", "attribute_type", "begins_with", "contains"))
    if function in ("exists", "not_exists"):
        return getattr(attr, function)()  # type: ignore[no-any-return]
    if function == "attribute_type":
        return attr.attribute_type(w.pick(TYPES))
    return getattr(attr, function)(value)  # type: ignore[no-any-return]


def _builder_path(w: Writer) -> str:
    """A path as ``Attr`` takes it: names joined by dots, then indexes (``m.a``, ``l[0]``)."""
    names = tuple(n for n in ATTRIBUTES if "." not in n)
    text = w.pick(names)
    for _ in range(w.draw(st.integers(0, 2)) if w.rarely(40) else 0):
        text += f"[{w.pick(INDEXES)}]" if w.draw(st.booleans()) else "." + w.pick(MEMBERS)
    return str(text)


def _python_value(w: Writer) -> Any:
    """A value as boto3's resource layer takes it (str, Decimal, bytes, set, list, dict...)."""
    choices = w.known
    if choices and w.rarely(40):
        return _DESERIALIZE.deserialize(w.pick(choices))
    return _DESERIALIZE.deserialize(w.draw(attribute_values()))


def _python_number(w: Writer) -> Any:
    return _DESERIALIZE.deserialize({"N": str(w.draw(st.integers(0, 6)))})


def build_condition(condition: ConditionBase) -> Item:
    """What boto3's ``Table`` sends for ``ConditionExpression=condition``."""
    built = ConditionExpressionBuilder().build_expression(condition)
    params: Item = {"ConditionExpression": built.condition_expression}
    if built.attribute_name_placeholders:
        params["ExpressionAttributeNames"] = built.attribute_name_placeholders
    if built.attribute_value_placeholders:
        params["ExpressionAttributeValues"] = {
            k: _SERIALIZE.serialize(v) for k, v in built.attribute_value_placeholders.items()
        }
    return params


# --- invalid requests ------------------------------------------------------------------

#: Ways to break an expression's syntax (each keeps its placeholders in use).
SYNTAX_ERRORS: dict[str, Callable[[str], str]] = {
    "dangling-and": lambda e: f"{e} AND",
    "unclosed": lambda e: f"({e}",
    "doubled-comparator": lambda e: re.sub(r"(=|<>|<=|>=|<|>)", r"\1 =", e, count=1),
    "unknown-function": lambda e: f"no_such_function(s) AND {e}",
    "function-upper-case": lambda e: f"ATTRIBUTE_EXISTS(s) AND {e}",
    "empty-parens": lambda e: f"() AND {e}",
    "size-alone": lambda e: f"size(s) AND {e}",
}


def break_syntax(w: Writer, expression: str) -> str:
    broken = SYNTAX_ERRORS[w.pick(tuple(SYNTAX_ERRORS))](expression)
    if broken != expression:  # a BETWEEN alone has no comparator to double
        w.tags.add(Tag.SYNTAX)
    return broken


def spoil_placeholders(w: Writer, params: Item) -> None:
    """At times, an unused, undefined or empty placeholder map (ValidationException)."""
    names = params.get("ExpressionAttributeNames")
    values = params.get("ExpressionAttributeValues")
    if not w.rarely(12):
        return
    spoil = w.pick(("unused-name", "unused-value", "undefined-name", "undefined-value", "empty"))
    if spoil == "unused-name":
        params["ExpressionAttributeNames"] = {**(names or {}), "#unused": "q"}
        w.tags.add(Tag.UNUSED_NAME)
    elif spoil == "unused-value":
        params["ExpressionAttributeValues"] = {**(values or {}), ":unused": {"S": "q"}}
        w.tags.add(Tag.UNUSED_VALUE)
    elif spoil == "undefined-name" and names:
        dropped = w.pick(sorted(names))
        params["ExpressionAttributeNames"] = {k: v for k, v in names.items() if k != dropped}
        w.tags.add(Tag.UNDEFINED_NAME)
    elif spoil == "undefined-value" and values:
        dropped = w.pick(sorted(values))
        params["ExpressionAttributeValues"] = {k: v for k, v in values.items() if k != dropped}
        w.tags.add(Tag.UNDEFINED_VALUE)
    elif spoil == "empty":
        which = w.pick(("ExpressionAttributeNames", "ExpressionAttributeValues"))
        if not params.get(which):
            params[which] = {}
            w.tags.add(Tag.EMPTY_MAP)
    for which in ("ExpressionAttributeNames", "ExpressionAttributeValues"):
        if which in params and not params[which] and Tag.EMPTY_MAP not in w.tags:
            del params[which]  # dropping the only entry leaves none rather than an empty map


# --- the request ---------------------------------------------------------------------------

ALL_RETURN_VALUES = RETURN_VALUES["update"]


#: The usual ``m``: members ``a`` (a number), ``b`` (a map), ``name``, ``l`` (a list).
_MAPS = st.fixed_dictionaries(
    {},
    optional={
        "a": attribute_values(("N",)),
        "b": attribute_values(("M",), depth=1),
        "name": attribute_values(("S",)),
        "l": attribute_values(("L",), depth=1),
    },
).map(lambda v: {"M": v})
#: A put's attributes besides the key.
_PUT_ITEMS = st.dictionaries(
    st.sampled_from((*ATTRIBUTES, *NEW_ATTRIBUTES)), attribute_values(), max_size=5
)


def _start_value(name: str) -> st.SearchStrategy[Item]:
    """A starting item's value of ``name``: mostly of its usual type, at times of any."""
    usual = _MAPS if name == "m" else attribute_values((ATTRIBUTES[name],))
    return st.one_of(usual, attribute_values())


_ATTRIBUTE_SETS = st.fixed_dictionaries(
    {}, optional={name: _start_value(name) for name in ATTRIBUTES}
)


@st.composite
def starting_items(draw: Draw) -> Item | None:
    """None (no item) a quarter of the time, else attributes of every type, mostly each of
    its usual type."""
    if draw(st.integers(0, 99)) < 25:
        return None
    item: Item = draw(_ATTRIBUTE_SETS)
    return item


STARTING_ITEMS = starting_items()


def _return_values(w: Writer, op: Op, params: Item) -> None:
    choice = w.draw(st.integers(0, 99))
    if choice < 40:
        pass
    elif choice < 92:
        params["ReturnValues"] = w.pick(RETURN_VALUES[op])
    elif choice < 97 and op != "update":
        params["ReturnValues"] = w.pick(
            tuple(v for v in ALL_RETURN_VALUES if v not in RETURN_VALUES[op])
        )
        w.tags.add(Tag.RV_FOR_OTHER_OP)
    else:
        params["ReturnValues"] = w.pick(("BOGUS", "all_old"))
        w.tags.add(Tag.BAD_RETURN_VALUES)
    choice = w.draw(st.integers(0, 99))
    if choice < 55:
        pass
    elif choice < 97:
        params["ReturnValuesOnConditionCheckFailure"] = w.pick(("ALL_OLD", "NONE"))
    else:
        params["ReturnValuesOnConditionCheckFailure"] = "ALL_NEW"
        w.tags.add(Tag.BAD_OLD_ON_FAILURE)


@st.composite
def cases(draw: Draw) -> Case:
    """One write request on one item, and the item the table holds before it."""
    op: Op = draw(st.sampled_from(("update", "update", "put", "delete")))
    schema = draw(st.sampled_from(("S", "S", "S", "S", "SR", "N")))
    start = draw(STARTING_ITEMS)
    w = Writer(draw, start)
    params: Item = {}
    if op == "put":
        params["Item"] = draw(_PUT_ITEMS)
        if w.rarely(3):
            params["Item"]["v"] = draw(BAD_VALUES)
            w.tags.add(Tag.BAD_NUMBER if "N" in params["Item"]["v"] else Tag.BAD_SET)
    builder = None
    if op == "update":
        updates = Writer(draw, start, prefix="u")
        if updates.rarely(4):
            w.tags.add(Tag.NO_UPDATE_EXPRESSION)
        else:
            expression = updates.update_expression()
            params["UpdateExpression"] = expression
        w.tags |= updates.tags
        w.names.update(updates.names)
        w.values.update(updates.values)
    with_condition = draw(st.integers(0, 99))
    if with_condition < 30:
        w.tags.add(Tag.BUILDER)
        builder = build_condition(builder_condition(Writer(draw, start, prefix="b"), depth=3))
    elif with_condition < 80:
        params["ConditionExpression"] = w.condition()
        if w.rarely(8):
            params["ConditionExpression"] = break_syntax(w, params["ConditionExpression"])
    params.update(w.placeholders())
    if builder is not None:
        params["ConditionExpression"] = builder["ConditionExpression"]
        for which in ("ExpressionAttributeNames", "ExpressionAttributeValues"):
            if which in builder:
                params[which] = {**params.get(which, {}), **builder[which]}
    spoil_placeholders(w, params)
    _return_values(w, op, params)
    via_aio = draw(st.sampled_from((False, True)))  # drawn towards False: about one in four
    return Case(op, schema, params, start, frozenset(w.tags), via_aio)
