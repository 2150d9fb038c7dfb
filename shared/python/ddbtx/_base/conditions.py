"""Client-side evaluation of DynamoDB expressions on saved images, which DynamoDB cannot
filter or project; it must agree with DynamoDB (``tests/test_conditions.py``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from .items import as_bytes, comparable

Item = dict[str, Any]
#: A document path: attribute and map-key names, and list indexes.
Path = tuple[str | int, ...]


class ExpressionError(ValueError):
    """The expression could not be parsed (DynamoDB would have rejected it first)."""


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<cmp><>|<=|>=|=|<|>)
    | (?P<punct>[(),.\[\]])
    | (?P<name>\#[0-9A-Za-z_]+)
    | (?P<value>:[0-9A-Za-z_]+)
    | (?P<int>[0-9]+(?![A-Za-z_]))
    | (?P<word>[A-Za-z_][0-9A-Za-z_]*)
    )""",
    re.X,
)
_KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN"})
_FUNCTIONS = frozenset(
    {"attribute_exists", "attribute_not_exists", "attribute_type", "begins_with", "contains"}
)


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise ExpressionError(f"unexpected text at {pos}: {text[pos : pos + 20]!r}")
        kind = match.lastgroup
        assert kind is not None
        token = match.group(kind)
        if kind == "word" and token.upper() in _KEYWORDS:
            kind, token = "keyword", token.upper()
        out.append(_Token(kind, token))
        pos = match.end()
    return out


class _Parser:
    """Recursive descent (precedence: comparisons and functions, NOT, AND, OR)."""

    def __init__(self, text: str, names: Mapping[str, str]) -> None:
        self.tokens = _tokens(text)
        self.pos = 0
        self.names = names

    def peek(self, offset: int = 0) -> _Token | None:
        index = self.pos + offset
        return self.tokens[index] if index < len(self.tokens) else None

    def take(self) -> _Token:
        token = self.peek()
        if token is None:
            raise ExpressionError("the expression ends too early")
        self.pos += 1
        return token

    def at(self, kind: str, text: str | None = None) -> bool:
        token = self.peek()
        return token is not None and token.kind == kind and (text is None or token.text == text)

    def accept(self, kind: str, text: str | None = None) -> bool:
        """Take the next token if it is ``kind`` (and ``text``)."""
        if self.at(kind, text):
            self.pos += 1
            return True
        return False

    def expect(self, kind: str, text: str | None = None) -> _Token:
        if not self.at(kind, text):
            raise ExpressionError(f"expected {text or kind}, found {self.peek()}")
        return self.take()

    def done(self) -> None:
        if self.peek() is not None:
            raise ExpressionError(f"unexpected {self.peek()}")

    def name(self) -> str:
        token = self.take()
        if token.kind == "name":
            if token.text not in self.names:
                raise ExpressionError(f"{token.text} is not in ExpressionAttributeNames")
            return self.names[token.text]
        if token.kind == "word":
            return token.text
        raise ExpressionError(f"expected an attribute name, found {token}")

    def path(self) -> Path:
        steps: list[str | int] = [self.name()]
        while True:
            if self.accept("punct", "."):
                steps.append(self.name())
            elif self.accept("punct", "["):
                steps.append(int(self.expect("int").text))
                self.expect("punct", "]")
            else:
                return tuple(steps)

    def condition(self) -> tuple[Any, ...]:
        return self.chain("OR", lambda: self.chain("AND", self.negation))

    def chain(self, keyword: str, operand: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
        left = operand()
        while self.accept("keyword", keyword):
            left = (keyword.lower(), left, operand())
        return left

    def negation(self) -> tuple[Any, ...]:
        return ("not", self.negation()) if self.accept("keyword", "NOT") else self.primary()

    def primary(self) -> tuple[Any, ...]:
        if self.accept("punct", "("):
            inner = self.condition()
            self.expect("punct", ")")
            return inner
        if self.at_call(_FUNCTIONS):
            return self.function()
        left = self.operand()
        if self.at("cmp"):
            return ("cmp", self.take().text, left, self.operand())
        if self.accept("keyword", "BETWEEN"):
            low = self.operand()
            self.expect("keyword", "AND")
            return ("between", left, low, self.operand())
        if self.accept("keyword", "IN"):
            self.expect("punct", "(")
            options = [self.operand()]
            while self.accept("punct", ","):
                options.append(self.operand())
            self.expect("punct", ")")
            return ("in", left, tuple(options))
        raise ExpressionError(f"expected a comparison after an operand, found {self.peek()}")

    def function(self) -> tuple[Any, ...]:
        name = self.take().text
        self.expect("punct", "(")
        args = [("path", self.path())]
        if name not in ("attribute_exists", "attribute_not_exists"):
            self.expect("punct", ",")
            args.append(self.operand())
        self.expect("punct", ")")
        return ("fn", name, tuple(args))

    def at_call(self, names: Collection[str]) -> bool:
        """At a call of a function in ``names``: its name, then an opening parenthesis."""
        token = self.peek()
        opens = self.peek(1) == _Token("punct", "(")
        return token is not None and token.kind == "word" and token.text in names and opens

    def operand(self) -> tuple[Any, ...]:
        if self.at("value"):
            return ("value", self.take().text)
        if self.at_call(("size",)):
            self.take()
            self.take()
            inner = self.path()
            self.expect("punct", ")")
            return ("size", inner)
        return ("path", self.path())


def _kind(value: Item | None) -> str | None:
    return next(iter(value)) if value else None


def equal(a: Item | None, b: Item | None) -> bool:
    """DynamoDB's ``=`` on two AttributeValues (a missing one equals nothing)."""
    return bool(a) and bool(b) and bool(comparable(a) == comparable(b))


def _ordered(value: Item) -> Any:
    kind = _kind(value)
    raw = value[kind]  # type: ignore[index]
    if kind == "N":
        return Decimal(raw)
    if kind == "S":
        return raw  # code point order, which is the UTF-8 byte order DynamoDB uses
    return as_bytes(raw)


def _compare(op: str, a: Item | None, b: Item | None) -> bool:
    if op in ("=", "<>"):
        # Two missing operands are equal (both emulators agree; AWS documents nothing).
        same = (a is None and b is None) or equal(a, b)
        return same if op == "=" else not same
    if a is None or b is None or _kind(a) != _kind(b) or _kind(a) not in ("N", "S", "B"):
        return False
    x, y = _ordered(a), _ordered(b)
    return bool({"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op])


def _size(value: Item | None) -> Item | None:
    kind = _kind(value)
    if value is None or kind in ("N", "BOOL", "NULL"):
        return None
    raw = value[kind]  # type: ignore[index]
    return {"N": str(len(as_bytes(raw) if kind == "B" else raw))}


def _contains(container: Item | None, operand: Item | None) -> bool:
    kind, wanted = _kind(container), _kind(operand)
    if container is None or operand is None or wanted not in ("S", "N", "B"):
        return False
    raw, needle = container[kind], operand[wanted]  # type: ignore[index]
    if kind == wanted == "S":
        return bool(needle in raw)
    if kind == wanted == "B":
        return as_bytes(needle) in as_bytes(raw)
    if kind == wanted + "S":
        return any(equal({wanted: member}, operand) for member in raw)
    if kind == "L":
        return any(equal(element, operand) for element in raw)
    return False


def _begins_with(value: Item | None, prefix: Item | None) -> bool:
    kind = _kind(value)
    if value is None or prefix is None or kind != _kind(prefix) or kind not in ("S", "B"):
        return False
    if kind == "S":
        return bool(value["S"].startswith(prefix["S"]))
    return as_bytes(value["B"]).startswith(as_bytes(prefix["B"]))


def resolve(item: Item, path: Path) -> Item | None:
    """The AttributeValue at ``path`` in ``item``, or None where the path leads nowhere."""
    first, *rest = path
    value: Item | None = item.get(first) if isinstance(first, str) else None
    for step in rest:
        if value is None:
            return None
        kind = _kind(value)
        if isinstance(step, int):
            elements = value["L"] if kind == "L" else None
            value = elements[step] if elements is not None and step < len(elements) else None
        else:
            value = value["M"].get(step) if kind == "M" else None
    return value


class Condition:
    """A parsed condition, key condition or filter expression, to evaluate on items."""

    def __init__(self, text: str, names: Mapping[str, str] | None = None) -> None:
        parser = _Parser(text, names or {})
        self.tree = parser.condition()
        parser.done()

    def matches(self, item: Item, values: Mapping[str, Item] | None = None) -> bool:
        """Whether the condition holds on ``item`` (low-level AttributeValues)."""
        return self._eval(self.tree, item, values or {})

    def _operand(self, node: tuple[Any, ...], item: Item, values: Mapping[str, Item]) -> Any:
        kind, arg = node
        if kind == "value":
            if arg not in values:
                raise ExpressionError(f"{arg} is not in ExpressionAttributeValues")
            return values[arg]
        if kind == "size":
            return _size(resolve(item, arg))
        return resolve(item, arg)

    def _eval(self, node: tuple[Any, ...], item: Item, values: Mapping[str, Item]) -> bool:
        op = node[0]
        if op == "or":
            return self._eval(node[1], item, values) or self._eval(node[2], item, values)
        if op == "and":
            return self._eval(node[1], item, values) and self._eval(node[2], item, values)
        if op == "not":
            return not self._eval(node[1], item, values)
        return self._test(node, item, values)

    def _test(self, node: tuple[Any, ...], item: Item, values: Mapping[str, Item]) -> bool:
        op = node[0]
        if op == "cmp":
            left, right = (self._operand(n, item, values) for n in node[2:])
            return _compare(node[1], left, right)
        if op == "between":
            x, low, high = (self._operand(n, item, values) for n in node[1:])
            return _compare(">=", x, low) and _compare("<=", x, high)
        if op == "in":
            x = self._operand(node[1], item, values)
            return any(equal(x, self._operand(n, item, values)) for n in node[2])
        name, args = node[1], node[2]
        return _TESTS[name](*[self._operand(n, item, values) for n in args])


#: What each function says of its operands: the value at its path, then its second
#: operand (the attribute_* functions but attribute_type have none).
_TESTS: dict[str, Callable[..., bool]] = {
    "attribute_exists": lambda target: target is not None,
    "attribute_not_exists": lambda target: target is None,
    "attribute_type": lambda target, type_name: (
        target is not None and type_name is not None and type_name.get("S") == _kind(target)
    ),
    "begins_with": _begins_with,
    "contains": _contains,
}


def parse_projection(text: str, names: Mapping[str, str] | None = None) -> list[Path]:
    """The document paths of a ``ProjectionExpression``, names resolved."""
    parser = _Parser(text, names or {})
    paths = [parser.path()]
    while parser.accept("punct", ","):
        paths.append(parser.path())
    parser.done()
    return paths


_CLAUSES = frozenset({"SET", "REMOVE", "ADD", "DELETE"})


def updated_paths(text: str, names: Mapping[str, str] | None = None) -> list[Path]:
    """The document paths an ``UpdateExpression`` writes, names resolved: what
    ``UPDATED_OLD`` and ``UPDATED_NEW`` answer with (projected as DynamoDB projects them)."""
    parser = _Parser(text, names or {})
    paths: list[Path] = []
    while parser.peek() is not None:
        clause = parser.take()
        if clause.kind != "word" or clause.text.upper() not in _CLAUSES:
            raise ExpressionError(f"expected SET, REMOVE, ADD or DELETE, found {clause}")
        while True:
            paths.append(parser.path())
            depth = 0
            # The rest of the action (an operand, a function's arguments) up to the next
            # action of the clause (a comma outside parentheses) or the next clause.
            while (token := parser.peek()) is not None:
                if depth == 0 and token.kind == "word" and token.text.upper() in _CLAUSES:
                    break
                if depth == 0 and token.kind == "punct" and token.text == ",":
                    break
                depth += {"(": 1, ")": -1}.get(token.text, 0) if token.kind == "punct" else 0
                parser.take()
            if not parser.accept("punct", ","):
                break
    return paths


def project(item: Item, paths: list[Path]) -> Item:
    """``item`` with only ``paths``, as DynamoDB projects it (list elements keep their
    order and close up: ``l[3], l[1]`` gives ``l[1]`` then ``l[3]``)."""
    tree: dict[Any, Any] = {}
    for path in paths:
        node: Any = tree
        for step in path[:-1]:
            node = node.setdefault(step, {})
            if node is _WHOLE:  # a parent path takes it all (DynamoDB refuses overlaps)
                break
        else:
            node[path[-1]] = _WHOLE
    picked = _pick_map(item, tree)
    return picked["M"] if picked is not None else {}


_WHOLE: Any = object()


def _pick(value: Item, tree: Any) -> Item | None:
    if tree is _WHOLE:
        return value
    if _kind(value) == "M":
        return _pick_map(value["M"], tree)
    if _kind(value) == "L":
        elements = value["L"]
        indexes = sorted(k for k in tree if isinstance(k, int) and k < len(elements))
        chosen = [p for i in indexes if (p := _pick(elements[i], tree[i])) is not None]
        return {"L": chosen} if chosen else None
    return None


def _pick_map(members: Item, tree: Any) -> Item | None:
    picked = {k: p for k, sub in tree.items() if k in members if (p := _pick(members[k], sub))}
    return {"M": picked} if picked else None
