"""The oracle's request shapes, as data: one row per request a user can send.

A shape is one write (put, update or delete) with its expressions, the item it
starts from (or none), and the key schema of its table. Placeholders are
filled in from :data:`VALUES` and :data:`NAMES` by what the expressions use,
so every row states only what matters; rows that test placeholder errors give
theirs explicitly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

Item = dict[str, Any]

OPS = ("put", "update", "delete")
RETURN_VALUES = {
    "put": ("NONE", "ALL_OLD"),
    "update": ("NONE", "ALL_OLD", "UPDATED_OLD", "ALL_NEW", "UPDATED_NEW"),
    "delete": ("NONE", "ALL_OLD"),
}


def _nested(depth: int) -> Item:
    value: Item = {"S": "bottom"}
    for _ in range(depth):
        value = {"M": {"d": value}}
    return value


#: Values by placeholder. Shapes use them by name in their expressions.
VALUES: dict[str, Item] = {
    ":v": {"S": "new"},
    ":w": {"S": "other"},
    ":one": {"N": "1"},
    ":zero": {"N": "0"},
    ":two": {"N": "2"},
    ":five": {"N": "5"},
    ":ten": {"N": "10"},
    ":neg": {"N": "-3.25"},
    ":more": {"L": [{"N": "9"}, {"S": "z"}]},
    ":emptylist": {"L": []},
    ":emptymap": {"M": {}},
    ":ss": {"SS": ["b", "c"]},
    ":ss_a": {"SS": ["a"]},
    ":ss_ab": {"SS": ["a", "b"]},
    ":ns": {"NS": ["2", "3"]},
    ":ns_1": {"NS": ["1"]},
    ":bs": {"BS": [b"\x02", b"\x03"]},
    ":bs_1": {"BS": [b"\x01"]},
    ":he": {"S": "he"},
    ":hello": {"S": "hello"},
    ":ell": {"S": "ell"},
    ":a": {"S": "a"},
    ":x": {"S": "x"},
    ":t": {"BOOL": True},
    ":f": {"BOOL": False},
    ":null": {"NULL": True},
    ":estr": {"S": ""},
    ":ebin": {"B": b""},
    ":n38": {"N": "12345678901234567890123456789012345678"},
    ":n38neg": {
        "N": "-0.00000000000000000000000000000000000012345678901234567890123456789012345678"
    },
    ":exp": {"N": "1.5E+5"},
    ":pad": {"N": "0001.500"},
    ":huge": {"N": "9.9999999999999999999999999999999999999E+125"},
    ":tiny": {"N": "1E-130"},
    ":n39": {"N": "123456789012345678901234567890123456789"},
    ":e38": {"N": "1E+38"},
    ":nan": {"N": "abc"},
    ":bin": {"B": b"\x00\xff\x10"},
    ":map": {"M": {"k": {"S": "v"}, "n": {"N": "2"}, "l": {"L": [{"NULL": True}]}}},
    ":listmaps": {"L": [{"M": {"id": {"N": "1"}}}, {"M": {"id": {"N": "2"}}}]},
    ":deep": _nested(20),
    ":deep33": _nested(33),
    ":typeS": {"S": "S"},
    ":typeN": {"S": "N"},
    ":typeSS": {"S": "SS"},
    ":typeM": {"S": "M"},
    ":typeX": {"S": "XYZ"},
    ":g1": {"S": "g1"},
    ":g2": {"S": "g2"},
    ":gnum": {"N": "7"},
}

#: Attribute names by placeholder; several are DynamoDB reserved words.
NAMES: dict[str, str] = {
    "#name": "name",
    "#status": "status",
    "#size": "size",
    "#data": "data",
    "#n": "n",
    "#s": "s",
    "#m": "m",
    "#l": "l",
    "#dot": "a.b",
    "#sp": "with space",
    "#pk": "pk",
    "#g": "g",
}

#: The item most shapes start from (besides its key): every attribute type.
BASE: Item = {
    "n": {"N": "5"},
    "s": {"S": "hello"},
    "e": {"S": ""},
    "l": {"L": [{"N": "1"}, {"S": "a"}, {"M": {"x": {"N": "1"}}}]},
    "m": {"M": {"a": {"N": "1"}, "b": {"M": {"c": {"S": "x"}}}}},
    "ss": {"SS": ["a", "b"]},
    "ns": {"NS": ["1", "2"]},
    "bs": {"BS": [b"\x01", b"\x02"]},
    "bin": {"B": b"\x00\x01"},
    "t": {"BOOL": True},
    "z": {"NULL": True},
    "name": {"S": "alice"},
    "status": {"S": "open"},
    "a.b": {"S": "dotted"},
    "with space": {"S": "spaced"},
}

_PLACEHOLDER = re.compile(r"[#:][0-9A-Za-z_]+")


@dataclass(frozen=True)
class Shape:
    """One request; ``params`` lack ``TableName`` and ``Key`` (and a put's key attributes)."""

    id: str
    op: str
    params: Item
    start: Item | None = field(default_factory=lambda: dict(BASE))
    schema: str = "S"
    #: A key to send instead of the schema's (to provoke key errors).
    key: Item | None = None
    #: ReturnValues to try; by default every one boto3 allows for the operation.
    return_values: tuple[str, ...] | None = None

    def rvs(self) -> tuple[str, ...]:
        return self.return_values or RETURN_VALUES[self.op]

    @property
    def about_return_values(self) -> bool:
        """The shape is about a ReturnValues the operation does not allow."""
        return any(rv not in RETURN_VALUES[self.op] for rv in self.rvs())


def _with_placeholders(params: Item, explicit: bool) -> Item:
    if explicit:
        return params
    text = " ".join(str(params.get(p, "")) for p in ("UpdateExpression", "ConditionExpression"))
    used = set(_PLACEHOLDER.findall(text))
    names = {p: NAMES[p] for p in sorted(used) if p in NAMES}
    values = {p: VALUES[p] for p in sorted(used) if p in VALUES}
    out = dict(params)
    if names:
        out["ExpressionAttributeNames"] = names
    if values:
        out["ExpressionAttributeValues"] = values
    return out


def update(
    id: str,
    expression: str | None,
    condition: str | None = None,
    *,
    explicit: bool = False,
    **extra: Any,
) -> Shape:
    params: Item = {}
    if expression is not None:
        params["UpdateExpression"] = expression
    if condition is not None:
        params["ConditionExpression"] = condition
    params.update(extra.pop("params", {}))
    return Shape(f"update/{id}", "update", _with_placeholders(params, explicit), **extra)


def put(
    id: str, item: Item, condition: str | None = None, *, explicit: bool = False, **extra: Any
) -> Shape:
    params: Item = {"Item": item}
    if condition is not None:
        params["ConditionExpression"] = condition
    params.update(extra.pop("params", {}))
    return Shape(f"put/{id}", "put", _with_placeholders(params, explicit), **extra)


def delete(id: str, condition: str | None = None, *, explicit: bool = False, **extra: Any) -> Shape:
    params: Item = {}
    if condition is not None:
        params["ConditionExpression"] = condition
    params.update(extra.pop("params", {}))
    return Shape(f"delete/{id}", "delete", _with_placeholders(params, explicit), **extra)


ABSENT: Item | None = None

UPDATES = [
    # SET: literals, arithmetic, functions
    update("set-literal", "SET v = :v"),
    update("set-two", "SET v = :v, w = :w"),
    update("set-overwrite-type", "SET s = :one"),
    update("arith-plus", "SET n = n + :one"),
    update("arith-minus", "SET n = n - :neg"),
    update("arith-two-attrs", "SET v = n + n"),
    update("arith-missing-attr", "SET q = q + :one"),
    update("arith-on-string", "SET s = s + :one"),
    update("arith-38-digits", "SET n = n + :n38"),
    update("arith-past-38-digits", "SET v = :e38 + :one"),
    update("if-not-exists-present", "SET n = if_not_exists(n, :zero)"),
    update("if-not-exists-absent", "SET q = if_not_exists(q, :zero)"),
    update("if-not-exists-plus", "SET q = if_not_exists(q, :zero) + :one"),
    update("list-append-end", "SET l = list_append(l, :more)"),
    update("list-append-front", "SET l = list_append(:more, l)"),
    update("list-append-new", "SET q = list_append(if_not_exists(q, :emptylist), :more)"),
    update("list-append-to-string", "SET s = list_append(s, :more)"),
    update("copy-attr", "SET v = s"),
    update("copy-missing-attr", "SET v = q"),
    # nested paths and list indexes
    update("map-set", "SET m.a = :v"),
    update("map-deep-set", "SET m.b.c = :v"),
    update("map-new-key", "SET m.newkey = :v"),
    update("map-missing-parent", "SET nomap.a = :v"),
    update("map-on-string", "SET s.a = :v"),
    update("list-index-set", "SET l[0] = :v"),
    update("list-index-past-end", "SET l[7] = :v"),
    update("list-index-nested", "SET l[2].x = :v"),
    update("list-index-on-map", "SET m[0] = :v"),
    update("list-of-maps", "SET q = :listmaps"),
    update("map-value", "SET q = :map"),
    update("deep-map", "SET q = :deep"),
    update("nesting-past-32", "SET q = :deep33"),
    # REMOVE
    update("remove", "REMOVE s"),
    update("remove-two", "REMOVE s, n"),
    update("remove-nested", "REMOVE m.a"),
    update("remove-deep", "REMOVE m.b.c"),
    update("remove-list-index", "REMOVE l[0]"),
    update("remove-list-indexes", "REMOVE l[0], l[2]"),
    update("remove-missing", "REMOVE nope"),
    update("remove-missing-nested", "REMOVE nomap.a"),
    # ADD and DELETE
    update("add-number", "ADD n :one"),
    update("add-negative", "ADD n :neg"),
    update("add-missing-number", "ADD q :five"),
    update("add-ss", "ADD ss :ss"),
    update("add-ns", "ADD ns :ns"),
    update("add-bs", "ADD bs :bs"),
    update("add-new-set", "ADD q :ss"),
    update("add-set-wrong-type", "ADD ss :ns"),
    update("add-to-string", "ADD s :one"),
    update("add-list", "ADD l :more"),
    update("delete-ss", "DELETE ss :ss_a"),
    update("delete-ns", "DELETE ns :ns_1"),
    update("delete-bs", "DELETE bs :bs_1"),
    update("delete-all-elements", "DELETE ss :ss_ab"),
    update("delete-missing-element", "DELETE ss :ss"),
    update("delete-from-missing", "DELETE q :ss"),
    update("delete-from-string", "DELETE s :ss_a"),
    # several clauses, overlaps, keys and reserved words
    update("all-clauses", "SET v = :v REMOVE s ADD n :one DELETE ss :ss_a"),
    update("clauses-reordered", "REMOVE s SET v = :v"),
    update("lowercase-keywords", "set v = :v remove s"),
    update("overlapping-paths", "SET s = :v REMOVE s"),
    update("same-path-twice", "SET v = :v, v = :w"),
    update("parent-and-child", "SET m = :map, m.a = :v"),
    update("set-key", "SET pk = :v"),
    update("remove-key", "REMOVE pk"),
    update("reserved-behind-name", "SET #name = :v, #status = :w"),
    update("reserved-unescaped", "SET name = :v"),
    update("dotted-name", "SET #dot = :v"),
    update("name-with-space", "SET #sp = :v"),
    update("names-both-sides", "SET #data = #s"),
    update("syntax-error", "SET v = = :v"),
    # values of every kind
    update("empty-string", "SET v = :estr"),
    update("empty-binary", "SET v = :ebin"),
    update("bool-null", "SET v = :t, w = :null"),
    update("number-38-digits", "SET v = :n38, w = :n38neg"),
    update("number-exponent", "SET v = :exp"),
    update("number-padded", "SET v = :pad"),
    update("number-extremes", "SET v = :huge, w = :tiny"),
    update("number-39-digits", "SET v = :n39"),
    update("number-invalid", "SET v = :nan"),
    update("binary", "SET v = :bin"),
    update("empty-list-and-map", "SET v = :emptylist, w = :emptymap"),
    # conditions on updates
    update("cond-true", "SET v = :v", "n = :five"),
    update("cond-false", "SET v = :v", "n = :ten"),
    update("cond-syntax-error", "SET v = :v", "n = = :five"),
    update("cond-on-updated-attr", "SET n = n + :one", "n < :ten"),
    update("cond-key-exists", "SET v = :v", "attribute_exists(pk)"),
    update("cond-key-not-exists", "SET v = :v", "attribute_not_exists(pk)"),
    update("cond-reserved", "SET v = :v", "#status = :x"),
    # upserts: the item does not exist
    update("upsert-set", "SET v = :v", start=ABSENT),
    update("upsert-add", "ADD n :one", start=ABSENT),
    update("upsert-add-set", "ADD ss :ss", start=ABSENT),
    update("upsert-if-not-exists", "SET n = if_not_exists(n, :zero) + :one", start=ABSENT),
    update("upsert-arith-missing", "SET n = n + :one", start=ABSENT),
    update("upsert-remove-only", "REMOVE s", start=ABSENT),
    update("upsert-remove-nested", "REMOVE m.a", start=ABSENT),
    update("upsert-delete-only", "DELETE ss :ss_a", start=ABSENT),
    update("upsert-nested-set", "SET m.a = :v", start=ABSENT),
    update("upsert-cond-exists", "SET v = :v", "attribute_exists(pk)", start=ABSENT),
    update("upsert-cond-not-exists", "SET v = :v", "attribute_not_exists(pk)", start=ABSENT),
    update("upsert-cond-compare", "SET v = :v", "n < :ten", start=ABSENT),
    update("upsert-cond-not", "SET v = :v", "NOT n = :ten", start=ABSENT),
    # no UpdateExpression (class 5)
    update("no-expression", None),
    update("no-expression-absent", None, start=ABSENT),
    update("no-expression-cond", None, "attribute_exists(n)"),
    update("no-expression-cond-false", None, "attribute_not_exists(n)"),
]

#: Conditions (on ``SET v = :v`` of BASE, whose n is 5 and s is "hello"), true and false.
#: Each returns the old item: what a write whose condition was skipped would wrongly return.
CONDITIONS = {
    "exists": ("attribute_exists(s)", "attribute_exists(nope)"),
    "not-exists": ("attribute_not_exists(nope)", "attribute_not_exists(s)"),
    "nested-exists": ("attribute_exists(m.b.c)", "attribute_exists(m.b.q)"),
    "index-exists": ("attribute_exists(l[2])", "attribute_exists(l[3])"),
    "type-s": ("attribute_type(s, :typeS)", "attribute_type(s, :typeN)"),
    "type-set": ("attribute_type(ss, :typeSS)", "attribute_type(ns, :typeSS)"),
    "type-map": ("attribute_type(m, :typeM)", "attribute_type(m.a, :typeM)"),
    "begins-with": ("begins_with(s, :he)", "begins_with(s, :ell)"),
    "contains-string": ("contains(s, :ell)", "contains(s, :x)"),
    "contains-set": ("contains(ss, :a)", "contains(ss, :x)"),
    "contains-list": ("contains(l, :one)", "contains(l, :five)"),
    "size-string": ("size(s) = :five", "size(s) > :five"),
    "size-list": ("size(l) > :one", "size(l) < :one"),
    "size-map": ("size(m) = :two", "size(m) = :one"),
    "in": ("n IN (:one, :five)", "n IN (:one, :ten)"),
    "between": ("n BETWEEN :one AND :ten", "n BETWEEN :zero AND :one"),
    "eq": ("n = :five", "n = :one"),
    "ne": ("n <> :one", "n <> :five"),
    "lt": ("n < :ten", "n < :five"),
    "le": ("n <= :five", "n <= :one"),
    "gt": ("n > :one", "n > :five"),
    "ge": ("n >= :five", "n >= :ten"),
    "string-compare": ("s < :x", "s > :x"),
    "mixed-types": ("NOT s = :five", "s = :five"),
    "missing-attr": ("NOT (q = :one)", "q = :one"),
    "bool": ("t = :t", "t = :f"),
    "nested-compare": ("m.b.c = :x", "m.b.c = :a"),
    "index-compare": ("l[0] = :one", "l[0] = :five"),
    "and-or": ("n = :five AND (s = :x OR t = :t)", "n = :five AND (s = :x OR t = :f)"),
    "not-paren": ("NOT (n = :one OR s = :x)", "NOT (n = :five)"),
    "reserved": ("#size = :one OR #name = :hello OR #status = :x", "#name = :a"),
}

CONDITION_SHAPES = [
    update(f"cond-{name}-{truth}", "SET v = :v", condition, return_values=("ALL_OLD",))
    for name, pair in CONDITIONS.items()
    for truth, condition in zip(("true", "false"), pair, strict=True)
]

CONDITION_ERRORS = [
    update("cond-type-invalid", "SET v = :v", "attribute_type(s, :typeX)"),
    update("cond-between-reversed", "SET v = :v", "n BETWEEN :ten AND :one"),
    update("cond-unknown-function", "SET v = :v", "no_such_function(s)"),
    update("cond-size-on-number", "SET v = :v", "size(n) = :one"),
    update("cond-reserved-unescaped", "SET v = :v", "size = :one"),
]

PUTS = [
    put("new", {"v": {"S": "x"}}, start=ABSENT),
    put("replace", {"v": {"S": "x"}}),
    put("key-only", {}),
    put("key-only-new", {}, start=ABSENT),
    put("all-types", dict(BASE)),
    put("different-attributes", {"other": {"N": "1"}, "more": {"L": []}}),
    put("cond-not-exists-absent", {"v": {"S": "x"}}, "attribute_not_exists(pk)", start=ABSENT),
    put("cond-not-exists-present", {"v": {"S": "x"}}, "attribute_not_exists(pk)"),
    put("cond-exists-absent", {"v": {"S": "x"}}, "attribute_exists(pk)", start=ABSENT),
    put("cond-compare-true", {"v": {"S": "x"}}, "n = :five"),
    put("cond-compare-false", {"v": {"S": "x"}}, "n = :ten"),
    put("cond-reserved", {"v": {"S": "x"}}, "#status = :x OR #name = :hello"),
    put("cond-syntax-error", {"v": {"S": "x"}}, "n = = :five"),
    put("empty-string", {"v": {"S": ""}, "w": {"L": [{"S": ""}]}}),
    put("empty-binary", {"v": {"B": b""}}),
    put("empty-set", {"v": {"SS": []}}),
    put("duplicate-set-elements", {"v": {"SS": ["a", "a"]}}),
    put("number-spellings", {"a": {"N": "1E+2"}, "b": {"N": "010.50"}, "c": {"N": "-0"}}),
    put("number-38-digits", {"v": VALUES[":n38"], "w": VALUES[":n38neg"]}),
    put("number-39-digits", {"v": VALUES[":n39"]}),
    put("number-invalid", {"v": {"N": "1.2.3"}}),
    put("number-set-spellings", {"v": {"NS": ["1", "2.50", "3E+1"]}}),
    put("binary-and-sets", {"v": {"B": b"\x00\xff"}, "w": {"BS": [b"\x00", b"\xff"]}}),
    put("bool-null", {"v": {"BOOL": False}, "w": {"NULL": True}}),
    put("deep-map", {"v": _nested(20)}),
    put("nesting-past-32", {"v": _nested(33)}),
    put("odd-names", {"a.b": {"S": "1"}, "with space": {"S": "2"}, "ünï": {"S": "3"}}),
    put("large-10kb", {"v": {"S": "x" * 10_000}}),
    put("return-updated-new", {"v": {"S": "x"}}, return_values=("UPDATED_NEW",)),
]

DELETES = [
    delete("present"),
    delete("absent", start=ABSENT),
    delete("cond-true", "n = :five"),
    delete("cond-false", "n = :ten"),
    delete("cond-exists-absent", "attribute_exists(pk)", start=ABSENT),
    delete("cond-not-exists-absent", "attribute_not_exists(pk)", start=ABSENT),
    delete("cond-function", "begins_with(s, :he) AND contains(ss, :a)"),
    delete("cond-syntax-error", "n = = :five"),
    delete("cond-reserved", "#status = :x"),
    delete("return-all-new", return_values=("ALL_NEW",)),
]

#: Every placeholder error a user can make (DynamoDB: ValidationException).
PLACEHOLDER_ERRORS = [
    put("values-without-condition", {}, params={"ExpressionAttributeValues": {":v": VALUES[":v"]}}),
    put("names-without-condition", {}, params={"ExpressionAttributeNames": {"#s": "s"}}),
    delete("values-without-condition", params={"ExpressionAttributeValues": {":v": VALUES[":v"]}}),
    update(
        "values-without-expressions",
        None,
        explicit=True,
        params={"ExpressionAttributeValues": {":v": VALUES[":v"]}},
    ),
    put(
        "unused-value",
        {},
        "attribute_exists(s)",
        explicit=True,
        params={"ExpressionAttributeValues": {":v": VALUES[":v"]}},
    ),
    delete(
        "unused-name",
        "attribute_exists(s)",
        explicit=True,
        params={"ExpressionAttributeNames": {"#n": "n"}},
    ),
    update(
        "unused-value",
        "SET v = :v",
        explicit=True,
        params={"ExpressionAttributeValues": {":v": VALUES[":v"], ":w": VALUES[":w"]}},
    ),
    update(
        "unused-name-with-condition",
        "SET #s = :v",
        "attribute_exists(#n)",
        explicit=True,
        params={
            "ExpressionAttributeNames": {"#s": "s", "#n": "n", "#m": "m"},
            "ExpressionAttributeValues": {":v": VALUES[":v"]},
        },
    ),
    update(
        "name-only-in-condition",
        "SET v = :v",
        "attribute_exists(#n)",
        explicit=True,
        params={
            "ExpressionAttributeNames": {"#n": "n"},
            "ExpressionAttributeValues": {":v": VALUES[":v"]},
        },
    ),
    update("undefined-value", "SET v = :v", explicit=True),
    update(
        "undefined-name",
        "SET #nope = :v",
        explicit=True,
        params={"ExpressionAttributeValues": {":v": VALUES[":v"]}},
    ),
    delete("undefined-name-in-condition", "attribute_exists(#nope)", explicit=True),
    update(
        "empty-values",
        "SET v = s",
        explicit=True,
        params={"ExpressionAttributeValues": {}},
    ),
    put(
        "empty-names",
        {},
        "attribute_exists(s)",
        explicit=True,
        params={"ExpressionAttributeNames": {}},
    ),
    update(
        "bad-placeholder-name",
        "SET v = :v",
        explicit=True,
        params={"ExpressionAttributeValues": {":v": VALUES[":v"], ":bad-name": VALUES[":w"]}},
    ),
    update(
        "value-invalid-in-condition",
        "SET v = :v",
        "n = :nan",
        explicit=True,
        params={"ExpressionAttributeValues": {":v": VALUES[":v"], ":nan": VALUES[":nan"]}},
    ),
]

#: Keys against the schema (table S has a string hash key ``pk``).
KEY_ERRORS = [
    delete("key-wrong-type", key={"pk": {"N": "1"}}),
    update("key-wrong-type", "SET v = :v", key={"pk": {"B": b"item-1"}}),
    put("key-wrong-type", {}, key={"pk": {"N": "1"}}),
    delete("key-extra-attribute", key={"pk": {"S": "item-1"}, "sk": {"S": "x"}}),
    update("key-missing-attribute", "SET v = :v", key={"other": {"S": "item-1"}}),
    put("key-empty-string", {}, key={"pk": {"S": ""}}),
]

#: The same requests on the other key schemas; each key is sent in another
#: spelling than the one it is stored and read under (see ``runner.KEYS``).
ACROSS_SCHEMAS = [
    shape
    for schema in ("N", "B", "SR")
    for shape in [
        put(f"{schema}/replace", {"v": {"S": "x"}}, schema=schema),
        put(f"{schema}/new", {"v": {"S": "x"}}, start=ABSENT, schema=schema),
        put(f"{schema}/cond-false", {"v": {"S": "x"}}, "attribute_not_exists(pk)", schema=schema),
        update(f"{schema}/arith", "SET n = n + :one", schema=schema),
        update(f"{schema}/upsert", "ADD n :one", start=ABSENT, schema=schema),
        update(f"{schema}/cond-false", "SET v = :v", "n = :ten", schema=schema),
        update(f"{schema}/set-key", "SET pk = :v", schema=schema),
        delete(f"{schema}/present", schema=schema),
        delete(f"{schema}/absent", start=ABSENT, schema=schema),
        delete(f"{schema}/cond-false", "n = :ten", schema=schema),
    ]
] + [
    delete("N/key-39-digits", schema="N", key={"pk": {"N": "1" * 39}}),
    delete("N/key-invalid-number", schema="N", key={"pk": {"N": "1e"}}),
    delete("N/key-overflow", schema="N", key={"pk": {"N": "1E+126"}}),
    put("B/key-empty", {}, schema="B", key={"pk": {"B": b""}}),
    delete("SR/key-missing-range", schema="SR", key={"pk": {"S": "h"}}),
    update("SR/set-range-key", "SET sk = :one", schema="SR"),
]

#: A table with a global secondary index on ``g`` (string); queried after each case.
GSI = [
    put("G/new-in-index", {"g": {"S": "g1"}}, start=ABSENT, schema="G"),
    put("G/move-in-index", {"g": {"S": "g2"}}, schema="G"),
    put("G/out-of-index", {"v": {"S": "x"}}, schema="G"),
    put("G/cond-false", {"g": {"S": "g2"}}, "attribute_not_exists(pk)", schema="G"),
    put("G/index-key-wrong-type", {"g": {"N": "1"}}, schema="G"),
    put("G/index-key-empty-string", {"g": {"S": ""}}, schema="G"),
    update("G/set-index-key", "SET g = :g2", schema="G"),
    update("G/remove-index-key", "REMOVE g", schema="G"),
    update("G/cond-false", "SET g = :g2", "n = :ten", schema="G"),
    update("G/index-key-wrong-type", "SET g = :gnum", schema="G"),
    update("G/upsert-into-index", "SET g = :g1", start=ABSENT, schema="G"),
    delete("G/present", schema="G"),
    delete("G/cond-false", "n = :ten", schema="G"),
]


def _blob_item(total: int) -> Item:
    """BASE-free attributes making the whole item (key ``pk``=``item-1``) ``total`` bytes.

    DynamoDB counts each attribute as its name's bytes plus its value's.
    """
    key_bytes = len("pk") + len("item-1")
    return {"blob": {"S": "x" * (total - key_bytes - len("blob"))}}


OLD = ("ALL_OLD",)

#: The 400 KB frontier: items of these sizes (bytes, as DynamoDB counts them).
SIZES = {"250kb": 250 * 1024, "399kb": 399 * 1024, "400kb-96": 400 * 1024 - 96, "400kb": 400 * 1024}

#: Each returns the old item, the largest thing a request can return.
FRONTIER = [
    shape
    for label, size in SIZES.items()
    for shape in [
        put(f"size/{label}-new", _blob_item(size), start=ABSENT, return_values=OLD),
        put(
            f"size/{label}-replace",
            _blob_item(size),
            start={"v": {"S": "small"}},
            return_values=OLD,
        ),
        update(
            f"size/{label}-update", "SET n = :one", start=_blob_item(size - 4), return_values=OLD
        ),
        delete(f"size/{label}-delete", start=_blob_item(size), return_values=OLD),
    ]
]

#: Conditions with an outer pair of parentheses, as every compound condition boto3's builder
#: makes has (``Attr("n").eq(5) & Attr("s").eq("hello")`` is ``(#n0 = :v0 AND #n1 = :v1)``):
#: ddbtx ANDs its own condition in without a second pair, which DynamoDB refuses as redundant.
#: A redundant pair of the user's own is refused natively, and so through ddbtx.
PARENTHESIZED = [
    shape
    for op, make in (
        ("update", lambda i, c, **k: update(i, "SET v = :v", c, **k)),
        ("put", lambda i, c, **k: put(i, {"v": {"S": "x"}}, c, **k)),
        ("delete", lambda i, c, **k: delete(i, c, **k)),
    )
    for shape in (
        make("paren-and-true", "(n = :five AND s = :hello)"),
        make("paren-and-false", "(n = :five AND s = :x)"),
        make("paren-or-not", "(NOT n = :ten OR begins_with(s, :he))"),
        make("paren-exists", "(attribute_exists(pk))"),
        make("paren-exists-absent", "(attribute_exists(pk))", start=ABSENT),
        make("paren-not-exists-absent", "(attribute_not_exists(pk))", start=ABSENT),
        make("paren-not-exists-present", "(attribute_not_exists(pk))"),
        make("paren-two-groups", "(n = :five) AND (s = :hello)"),
        make("paren-redundant", "((n = :five))"),
    )
]

#: ReturnValuesOnConditionCheckFailure: a false condition hands back the item as it was.
_OLD = {"ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
OLD_ON_FAILURE = [
    update("old-on-failure-false", "SET v = :v", "n = :ten", params=_OLD),
    update("old-on-failure-true", "SET v = :v", "n = :five", params=_OLD),
    update(
        "old-on-failure-absent", "SET v = :v", "attribute_exists(pk)", params=_OLD, start=ABSENT
    ),
    update("old-on-failure-paren", "SET v = :v", "(n = :five AND s = :x)", params=_OLD),
    update(
        "old-on-failure-none",
        "SET v = :v",
        "n = :ten",
        params={"ReturnValuesOnConditionCheckFailure": "NONE"},
    ),
    update(
        "old-on-failure-bogus",
        "SET v = :v",
        "n = :ten",
        params={"ReturnValuesOnConditionCheckFailure": "BOGUS"},
    ),
    put("old-on-failure-false", {"v": {"S": "x"}}, "attribute_not_exists(pk)", params=_OLD),
    put("old-on-failure-true", {"v": {"S": "x"}}, "n = :five", params=_OLD),
    delete("old-on-failure-false", "n = :ten", params=_OLD),
    delete("old-on-failure-absent", "attribute_exists(pk)", params=_OLD, start=ABSENT),
    delete("old-on-failure-function", "begins_with(s, :x)", params=_OLD),
]

#: The legacy parameters, translated to expressions in a transaction (DynamoDB defines each
#: as an expression: Developer Guide, Legacy conditional parameters).
_N = {"N": "5"}
LEGACY = [
    update(
        "au-put",
        None,
        params={"AttributeUpdates": {"v": {"Value": {"S": "x"}, "Action": "PUT"}}},
        explicit=True,
    ),
    update(
        "au-put-default",
        None,
        params={"AttributeUpdates": {"v": {"Value": {"S": "x"}}}},
        explicit=True,
    ),
    update(
        "au-add-number",
        None,
        params={"AttributeUpdates": {"n": {"Value": _N, "Action": "ADD"}}},
        explicit=True,
    ),
    update(
        "au-add-set",
        None,
        params={"AttributeUpdates": {"ss": {"Value": {"SS": ["c"]}, "Action": "ADD"}}},
        explicit=True,
    ),
    update(
        "au-delete-attr",
        None,
        params={"AttributeUpdates": {"s": {"Action": "DELETE"}}},
        explicit=True,
    ),
    update(
        "au-delete-elements",
        None,
        params={"AttributeUpdates": {"ss": {"Value": {"SS": ["a"]}, "Action": "DELETE"}}},
        explicit=True,
    ),
    update(
        "au-mixed",
        None,
        params={
            "AttributeUpdates": {
                "v": {"Value": {"S": "x"}},
                "n": {"Value": _N, "Action": "ADD"},
                "s": {"Action": "DELETE"},
            }
        },
        explicit=True,
    ),
    update(
        "au-upsert",
        None,
        params={"AttributeUpdates": {"v": {"Value": {"S": "x"}}}},
        explicit=True,
        start=ABSENT,
    ),
    update(
        "au-put-no-value",
        None,
        params={"AttributeUpdates": {"v": {"Action": "PUT"}}},
        explicit=True,
    ),
    update(
        "au-with-expression",
        "SET w = :v",
        params={
            "AttributeUpdates": {"v": {"Value": {"S": "x"}}},
            "ExpressionAttributeValues": {":v": {"S": "y"}},
        },
        explicit=True,
    ),
    update(
        "expected-value-true",
        None,
        params={"AttributeUpdates": {"v": {"Value": {"S": "x"}}}, "Expected": {"n": {"Value": _N}}},
        explicit=True,
    ),
    update(
        "expected-value-false",
        None,
        params={
            "AttributeUpdates": {"v": {"Value": {"S": "x"}}},
            "Expected": {"n": {"Value": {"N": "6"}}},
        },
        explicit=True,
    ),
    update(
        "expected-not-exists-absent",
        None,
        params={
            "AttributeUpdates": {"v": {"Value": {"S": "x"}}},
            "Expected": {"pk": {"Exists": False}},
        },
        explicit=True,
        start=ABSENT,
    ),
    update(
        "expected-not-exists-present",
        None,
        params={
            "AttributeUpdates": {"v": {"Value": {"S": "x"}}},
            "Expected": {"pk": {"Exists": False}},
        },
        explicit=True,
    ),
    update(
        "expected-comparisons",
        None,
        params={
            "AttributeUpdates": {"v": {"Value": {"S": "x"}}},
            "Expected": {
                "n": {
                    "ComparisonOperator": "BETWEEN",
                    "AttributeValueList": [{"N": "1"}, {"N": "9"}],
                },
                "s": {"ComparisonOperator": "BEGINS_WITH", "AttributeValueList": [{"S": "he"}]},
                "ss": {"ComparisonOperator": "CONTAINS", "AttributeValueList": [{"S": "a"}]},
                "name": {
                    "ComparisonOperator": "IN",
                    "AttributeValueList": [{"S": "bob"}, {"S": "alice"}],
                },
                "t": {"ComparisonOperator": "NOT_NULL"},
                "q": {"ComparisonOperator": "NULL"},
            },
        },
        explicit=True,
    ),
    update(
        "expected-or",
        None,
        params={
            "AttributeUpdates": {"v": {"Value": {"S": "x"}}},
            "Expected": {
                "n": {"ComparisonOperator": "GT", "AttributeValueList": [{"N": "9"}]},
                "s": {"ComparisonOperator": "EQ", "AttributeValueList": [{"S": "hello"}]},
            },
            "ConditionalOperator": "OR",
        },
        explicit=True,
    ),
    update(
        "expected-or-false",
        None,
        params={
            "AttributeUpdates": {"v": {"Value": {"S": "x"}}},
            "Expected": {
                "n": {"ComparisonOperator": "LT", "AttributeValueList": [{"N": "1"}]},
                "s": {"ComparisonOperator": "NE", "AttributeValueList": [{"S": "hello"}]},
            },
            "ConditionalOperator": "OR",
        },
        explicit=True,
    ),
    update(
        "expected-exists-no-value",
        None,
        params={
            "AttributeUpdates": {"v": {"Value": {"S": "x"}}},
            "Expected": {"n": {"Exists": True}},
        },
        explicit=True,
    ),
    update(
        "expected-between-one-value",
        None,
        params={
            "AttributeUpdates": {"v": {"Value": {"S": "x"}}},
            "Expected": {
                "n": {"ComparisonOperator": "BETWEEN", "AttributeValueList": [{"N": "1"}]}
            },
        },
        explicit=True,
    ),
    put(
        "expected-true",
        {"v": {"S": "x"}},
        params={"Expected": {"s": {"Value": {"S": "hello"}}}},
        explicit=True,
    ),
    put(
        "expected-false",
        {"v": {"S": "x"}},
        params={"Expected": {"s": {"Value": {"S": "bye"}}}},
        explicit=True,
    ),
    put(
        "expected-not-exists-absent",
        {"v": {"S": "x"}},
        params={"Expected": {"pk": {"Exists": False}}},
        explicit=True,
        start=ABSENT,
    ),
    delete(
        "expected-true",
        params={"Expected": {"n": {"ComparisonOperator": "GE", "AttributeValueList": [_N]}}},
        explicit=True,
    ),
    delete(
        "expected-false",
        params={"Expected": {"n": {"ComparisonOperator": "LT", "AttributeValueList": [_N]}}},
        explicit=True,
    ),
]

SHAPES: list[Shape] = [
    *UPDATES,
    *CONDITION_SHAPES,
    *CONDITION_ERRORS,
    *PUTS,
    *DELETES,
    *PARENTHESIZED,
    *OLD_ON_FAILURE,
    *LEGACY,
    *PLACEHOLDER_ERRORS,
    *KEY_ERRORS,
    *ACROSS_SCHEMAS,
    *GSI,
    *FRONTIER,
]

assert len({s.id for s in SHAPES}) == len(SHAPES), "shape ids must be unique"
