"""The client-side evaluator against DynamoDB itself, on both emulators.

Committed reads apply filter, key condition and projection expressions to
saved images on the client (:mod:`ddbtx._base.conditions`). Here each expression of
the grammar is run by DynamoDB (a ``Scan`` with that ``FilterExpression``, a
``Query`` with that ``KeyConditionExpression``, a ``GetItem`` with that
``ProjectionExpression``) and by the evaluator on the same items as DynamoDB
returns them, and the answers must be the same.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from ddbtx._base.conditions import Condition, ExpressionError, parse_projection, project
from ddbtx.local import KINDS, LocalDynamo
from ddbtx.tables import create_table_if_missing
from helpers import scan
from oracle.runner import normal

Item = dict[str, Any]

#: Items of every type, and pairs that tell the rules apart (a number stored as a
#: string, a missing attribute, nested documents, an empty string).
ITEMS: list[Item] = [
    {
        "pk": {"S": "i1"},
        "n": {"N": "5"},
        "s": {"S": "hello"},
        "b": {"B": b"\x01\x02\x03"},
        "t": {"BOOL": True},
        "z": {"NULL": True},
        "l": {"L": [{"N": "1"}, {"S": "a"}, {"M": {"x": {"N": "1"}}}, {"B": b"\x07"}]},
        "m": {"M": {"a": {"N": "1"}, "b": {"M": {"c": {"S": "x"}}}}},
        "ss": {"SS": ["a", "b"]},
        "ns": {"NS": ["1", "2.5"]},
        "bs": {"BS": [b"\x01", b"\x02"]},
        "name": {"S": "alice"},
        "a.b": {"S": "dotted"},
        "e": {"S": "e"},
    },
    {
        "pk": {"S": "i2"},
        "n": {"N": "10"},
        "s": {"S": "help"},
        "b": {"B": b"\x01"},
        "l": {"L": []},
        "m": {"M": {}},
        "ss": {"SS": ["c"]},
        "ns": {"NS": ["10"]},
        "name": {"S": "bob"},
        "o": {"N": "10"},
    },
    {
        "pk": {"S": "i3"},
        "n": {"N": "-1.5"},
        "s": {"S": "Zeta"},
        "b": {"B": b"\xff"},
        "t": {"BOOL": False},
        "l": {"L": [{"N": "5"}, {"L": [{"S": "deep"}]}]},
        "m": {"M": {"b": {"M": {"c": {"S": "y"}}}, "a": {"L": [{"N": "1"}, {"N": "2"}]}}},
        "o": {"N": "-1.5"},
    },
    {"pk": {"S": "i4"}},
    {
        "pk": {"S": "i6"},
        "n": {"N": "1E+1"},
        "s": {"S": "hello world"},
        "l": {"L": [{"N": "1"}, {"S": "a"}, {"M": {"x": {"N": "1"}}}, {"B": b"\x07"}]},
        "m": {"M": {"b": {"M": {"c": {"S": "x"}}}, "a": {"N": "1"}}},
        "ss": {"SS": ["b", "a"]},
        "ns": {"NS": ["2.50", "1"]},
        "t": {"BOOL": True},
        "name": {"S": "Alice"},
        "e": {"S": "\u00e9t\u00e9"},
    },
]

#: Attributes of other types than in ITEMS, under the same names (a table of their own:
#: moto fails with an internal error on some comparisons across types).
MIXED: list[Item] = [
    {
        "pk": {"S": "x1"},
        "n": {"S": "5"},
        "s": {"N": "5"},
        "b": {"S": "\u0001"},
        "t": {"N": "1"},
        "l": {"M": {"0": {"N": "1"}}},
        "m": {"L": [{"N": "1"}]},
        "ss": {"NS": ["1"]},
        "ns": {"SS": ["1"]},
        "bs": {"B": b"\x01"},
        "o": {"S": "-1.5"},
    },
    {"pk": {"S": "x2"}, "n": {"BOOL": True}, "s": {"NULL": True}, "z": {"S": "NULL"}},
]

VALUES: dict[str, Item] = {
    ":one": {"N": "1"},
    ":five": {"N": "5"},
    ":ten": {"N": "10"},
    ":neg": {"N": "-2"},
    ":n5s": {"S": "5"},
    ":s5n": {"N": "5"},
    ":he": {"S": "he"},
    ":hel": {"S": "hel"},
    ":hello": {"S": "hello"},
    ":ell": {"S": "ell"},
    ":zeta": {"S": "Zeta"},
    ":a": {"S": "a"},
    ":c": {"S": "c"},
    ":x": {"S": "x"},
    ":alice": {"S": "alice"},
    ":b1": {"B": b"\x01"},
    ":b2": {"B": b"\x02"},
    ":b23": {"B": b"\x02\x03"},
    ":b7": {"B": b"\x07"},
    ":bff": {"B": b"\xff"},
    ":t": {"BOOL": True},
    ":f": {"BOOL": False},
    ":null": {"NULL": True},
    ":ss_ab": {"SS": ["b", "a"]},
    ":ns_12": {"NS": ["2.5", "1"]},
    ":bs_12": {"BS": [b"\x02", b"\x01"]},
    ":list": {"L": [{"N": "1"}, {"S": "a"}, {"M": {"x": {"N": "1"}}}, {"B": b"\x07"}]},
    ":map": {"M": {"a": {"N": "1"}, "b": {"M": {"c": {"S": "x"}}}}},
    ":emptylist": {"L": []},
    ":two": {"N": "2"},
    ":three": {"N": "3"},
    ":four": {"N": "4"},
    ":zero": {"N": "0"},
    ":ten_spelled": {"N": "10.00"},
    ":typeS": {"S": "S"},
    ":typeN": {"S": "N"},
    ":typeB": {"S": "B"},
    ":typeBOOL": {"S": "BOOL"},
    ":typeNULL": {"S": "NULL"},
    ":typeL": {"S": "L"},
    ":typeM": {"S": "M"},
    ":typeSS": {"S": "SS"},
    ":typeNS": {"S": "NS"},
    ":typeBS": {"S": "BS"},
}
NAMES = {"#name": "name", "#dot": "a.b", "#size": "size", "#n": "n", "#m": "m"}

#: Filter expressions, each with an id; together they cover the grammar.
FILTERS: dict[str, str] = {
    # comparisons on every orderable type, type mismatches and missing attributes
    "eq-n": "n = :five",
    "eq-n-spelled": "n = :ten_spelled",
    "ne-n": "n <> :five",
    "ne-missing": "q <> :five",
    "lt-n": "n < :five",
    "le-n": "n <= :five",
    "gt-n": "n > :one",
    "ge-n": "n >= :ten",
    "lt-negative": "n < :neg",
    "eq-s": "s = :hello",
    "lt-s": "s < :hel",
    "gt-s": "s > :he",
    "ge-s-case": "s >= :zeta",
    "lt-b": "b < :b2",
    "ge-b": "b >= :b1",
    "mismatch-n-s": "n = :n5s",
    "mismatch-lt": "s < :s5n",
    "mismatch-ne": "n <> :n5s",
    "eq-bool": "t = :t",
    "ne-bool": "t <> :t",
    "eq-null": "z = :null",
    "eq-list": "l = :list",
    "eq-map": "m = :map",
    "eq-ss-order": "ss = :ss_ab",
    "eq-ns-spelling": "ns = :ns_12",
    "eq-bs-order": "bs = :bs_12",
    "eq-empty-list": "l = :emptylist",
    "path-vs-path": "n = o",
    "path-vs-path-lt": "n < o",
    "path-ne-missing-both": "q <> r",
    "path-eq-missing-both": "q = r",
    "value-on-left": ":five = n",
    # BETWEEN and IN
    "between-n": "n BETWEEN :one AND :five",
    "between-s": "s BETWEEN :he AND :hello",
    "between-b": "b BETWEEN :b1 AND :b2",
    "between-mismatch": "n BETWEEN :one AND :ten AND s = :hello",
    "between-missing": "q BETWEEN :one AND :ten",
    "in-n": "n IN (:one, :five, :ten)",
    "in-mixed": "n IN (:n5s, :ten)",
    "in-s": "s IN (:hello, :zeta)",
    "in-list-values": "l IN (:list, :emptylist)",
    "in-missing": "q IN (:one)",
    # functions
    "exists": "attribute_exists(t)",
    "not-exists": "attribute_not_exists(t)",
    "exists-nested": "attribute_exists(m.b.c)",
    "exists-index": "attribute_exists(l[1])",
    "exists-index-past": "attribute_exists(l[3])",
    "exists-index-on-map": "attribute_exists(m.a[1])",
    "not-exists-nested": "attribute_not_exists(m.a)",
    "exists-dotted-name": "attribute_exists(#dot)",
    "type-S": "attribute_type(n, :typeS)",
    "type-N": "attribute_type(n, :typeN)",
    "type-B": "attribute_type(b, :typeB)",
    "type-BOOL": "attribute_type(t, :typeBOOL)",
    "type-NULL": "attribute_type(z, :typeNULL)",
    "type-L": "attribute_type(l, :typeL)",
    "type-M": "attribute_type(m, :typeM)",
    "type-SS": "attribute_type(ss, :typeSS)",
    "type-NS": "attribute_type(ss, :typeNS)",
    "type-BS": "attribute_type(bs, :typeBS)",
    "type-nested": "attribute_type(m.a, :typeL)",
    "begins-s": "begins_with(s, :hel)",
    "begins-s-whole": "begins_with(s, :hello)",
    "begins-b": "begins_with(b, :b1)",
    "begins-mismatch": "begins_with(s, :b1)",
    "begins-nested": "begins_with(m.b.c, :x)",
    "contains-s": "contains(s, :ell)",
    "contains-ss": "contains(ss, :a)",
    "contains-ns": "contains(ns, :one)",
    "contains-bs": "contains(bs, :b2)",
    "contains-b": "contains(b, :b23)",
    "contains-list-s": "contains(l, :a)",
    "contains-list-n": "contains(l, :five)",
    "contains-list-b": "contains(l, :b7)",
    "contains-missing": "contains(q, :a)",
    "contains-number": "contains(n, :five)",
    "contains-path-operand": "contains(s, e)",
    "size-s": "size(s) = :five",
    "size-s-lt": "size(s) < :five",
    "size-s-accent": "size(e) = :two",
    "size-b": "size(b) = :three",
    "size-ss": "size(ss) = :two",
    "size-ns": "size(ns) = :two",
    "size-bs": "size(bs) > :one",
    "size-l": "size(l) = :four",
    "size-l-empty": "size(l) = :zero",
    "size-m": "size(m) = :two",
    "size-nested": "size(m.a) = :two",
    "size-missing": "size(q) >= :zero",
    "size-between": "size(s) BETWEEN :four AND :five",
    "size-in": "size(s) IN (:four, :ten)",
    "size-vs-path": "size(ss) < n",
    # nested paths
    "nested-eq": "m.b.c = :x",
    "index-eq": "l[0] = :one",
    "index-nested": "l[2].x = :one",
    "index-in-index": "l[1][0] = :x",
    "map-index-eq": "m.a[1] = :two",
    # placeholders and reserved words
    "names": "#name = :alice",
    "names-case": "#name = :alice OR #name > :alice",
    "dotted-name": "#dot = :x OR attribute_exists(#dot)",
    "reserved-name": "attribute_not_exists(#size)",
    "name-in-path": "#m.#n = :one",
    # logic: precedence, parentheses, case of keywords
    "and": "n > :one AND t = :t",
    "or": "n = :ten OR t = :f",
    "not": "NOT n = :five",
    "not-of-not": "NOT (NOT n = :five OR t = :t)",
    "and-over-or": "n = :ten OR n = :five AND t = :t",
    "parens": "(n = :ten OR n = :five) AND t = :t",
    "not-binds-tight": "NOT n = :five AND attribute_exists(n)",
    "not-parens": "NOT (n = :five AND t = :t)",
    "nested-parens": "(n = :five OR (s = :zeta AND (t = :f OR n < :one)))",
    "lowercase-keywords": "n between :one and :ten or not s in (:hello)",
    "spaces": "  n   =   :five  ",
    "between-in-and": "n BETWEEN :one AND :five AND size(s) > :four",
}

MOTO_SIZE = (
    "size() is a filter function (Developer Guide: Condition and filter expressions, "
    "functions); moto refuses it in a FilterExpression ('Invalid attribute name')"
)
MOTO_TYPES = (
    "operands of different types are never equal nor ordered (ComparisonOperator reference: "
    "an attribute of another type than the value does not match); moto fails with an "
    "internal error or compares Python values (True = 1, a string with a number)"
)
MOTO_NULL = "NULL equals only NULL (ComparisonOperator reference, EQ); moto matches any item"
MOTO_BINARY = (
    "begins_with and contains take binary operands (ComparisonOperator reference: "
    "BEGINS_WITH and CONTAINS support Binary); moto never matches a binary"
)
MOTO_LIST_PROJECTION = (
    "a projection returns every element a path names, in index order, closed up "
    "(Developer Guide: Projection expressions); moto keeps only the first, or fails with "
    "an internal error on a path under a scalar or nested lists"
)
DYNALITE_DOCUMENTS = (
    "= and IN compare lists and maps by value (ComparisonOperator reference: EQ is "
    "supported for all data types, including lists and maps); dynalite never matches them"
)
DYNALITE_FALSE = "attribute_type(t, :BOOL) holds on false too; dynalite takes false as missing"
DYNALITE_INDEX_ON_MAP = (
    "[n] dereferences a list element (Developer Guide: Document paths), so on a map it leads "
    "nowhere; dynalite reads the map's key 'n'"
)

#: Where an emulator departs from AWS's documented behaviour:
#: (id, emulator[, item set]) -> what AWS does.
DEVIATIONS: dict[tuple[str, ...], str] = {
    **{(fid, "moto"): MOTO_SIZE for fid in FILTERS if "size(" in FILTERS[fid]},
    **{
        (fid, "moto", "mixed"): MOTO_TYPES
        for fid in (
            "and",
            "between-b",
            "between-in-and",
            "between-mismatch",
            "between-n",
            "between-s",
            "eq-bool",
            "ge-b",
            "ge-n",
            "ge-s-case",
            "gt-n",
            "gt-s",
            "in-n",
            "le-n",
            "lowercase-keywords",
            "lt-b",
            "lt-n",
            "lt-negative",
            "lt-s",
            "ne-bool",
        )
    },
    ("mismatch-lt", "moto"): MOTO_TYPES,
    ("eq-null", "moto"): MOTO_NULL,
    ("begins-b", "moto"): MOTO_BINARY,
    ("contains-b", "moto"): MOTO_BINARY,
    **{
        (pid, "moto"): MOTO_LIST_PROJECTION
        for pid in ("index-then-key-mixed", "indexes-reordered", "key-under-scalar", "nested-list")
    },
    **{(fid, "dynalite"): DYNALITE_DOCUMENTS for fid in ("eq-list", "eq-map", "in-list-values")},
    ("type-BOOL", "dynalite"): DYNALITE_FALSE,
    **{
        (case, "dynalite", "mixed"): DYNALITE_INDEX_ON_MAP
        for case in ("index-eq", "index", "index-then-key-mixed", "indexes-reordered")
    },
}

#: Projection expressions (with their own placeholders where they use any).
PROJECTIONS: dict[str, str] = {
    "top-level": "n",
    "several": "n, s, t",
    "missing": "q",
    "nested": "m.b.c",
    "nested-siblings": "m.a, m.b",
    "nested-missing": "m.zz",
    "index": "l[0]",
    "indexes-reordered": "l[2], l[0]",
    "index-past-end": "l[9]",
    "index-then-key": "l[2].x",
    "index-then-key-mixed": "l[2].x, l[0]",
    "key-under-scalar": "n.x",
    "index-on-map": "m[0]",
    "sets": "ss, ns, bs",
    "names": "#name, #dot",
    "name-in-path": "#m.#n",
    "key-and-nested": "pk, m.b",
    "nested-list": "l[1][0]",
}


@pytest.fixture(scope="module", params=KINDS)
def filled(request: pytest.FixtureRequest, emulators: dict[str, LocalDynamo]) -> Iterator[Filled]:
    """Per emulator, a table for ITEMS and one for MIXED, and the items as DynamoDB returns them."""
    client = emulators[request.param].client()
    run = uuid.uuid4().hex[:8]
    tables = {"typed": f"conditions-{run}", "mixed": f"conditions-mixed-{run}"}
    stored: dict[str, dict[str, Item]] = {}
    for label, items in (("typed", ITEMS), ("mixed", MIXED)):
        create_table_if_missing(
            client,
            tables[label],
            None,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        )
        for item in items:
            client.put_item(TableName=tables[label], Item=item)
        stored[label] = {item["pk"]["S"]: item for item in scan(client, tables[label])}
    yield Filled(request.param, client, tables, stored)
    for table in tables.values():
        client.delete_table(TableName=table)


@dataclass
class Filled:
    kind: str
    client: Any
    tables: dict[str, str]
    stored: dict[str, dict[str, Item]]


def _in(placeholder: str, expression: str) -> bool:
    return re.search(re.escape(placeholder) + r"(?![0-9A-Za-z_])", expression) is not None


def _placeholders(expression: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    names = {p: n for p, n in NAMES.items() if _in(p, expression)}
    values = {p: v for p, v in VALUES.items() if _in(p, expression)}
    if names:
        out["ExpressionAttributeNames"] = names
    if values:
        out["ExpressionAttributeValues"] = values
    return out


def _skip_deviation(case: str, kind: str, items: str = "typed") -> None:
    reason = DEVIATIONS.get((case, kind)) or DEVIATIONS.get((case, kind, items))
    if reason:
        pytest.skip(f"{kind} departs from AWS here; AWS: {reason}")


@pytest.mark.parametrize("items", ["typed", "mixed"])
@pytest.mark.parametrize("fid", sorted(FILTERS))
def test_given_items_when_a_filter_is_evaluated_client_side_then_dynamodb_agrees(
    filled: Filled, fid: str, items: str
) -> None:
    _skip_deviation(fid, filled.kind, items)
    expression = FILTERS[fid]
    params = _placeholders(expression)
    # Given the items as DynamoDB returns them
    stored = filled.stored[items]
    # When DynamoDB filters them, and the evaluator does
    native = filled.client.scan(
        TableName=filled.tables[items], FilterExpression=expression, ConsistentRead=True, **params
    )
    condition = Condition(expression, params.get("ExpressionAttributeNames"))
    values = params.get("ExpressionAttributeValues")
    ours = {pk for pk, item in stored.items() if condition.matches(item, values)}
    # Then they pick the same items
    assert {item["pk"]["S"] for item in native["Items"]} == ours


@pytest.mark.parametrize("items", ["typed", "mixed"])
@pytest.mark.parametrize("pid", sorted(PROJECTIONS))
def test_given_items_when_projected_client_side_then_dynamodb_agrees(
    filled: Filled, pid: str, items: str
) -> None:
    _skip_deviation(pid, filled.kind, items)
    expression = PROJECTIONS[pid]
    params = _placeholders(expression)
    paths = parse_projection(expression, params.get("ExpressionAttributeNames"))
    for pk, item in filled.stored[items].items():
        # When one item is projected by DynamoDB, and by the evaluator
        native = filled.client.get_item(
            TableName=filled.tables[items],
            Key={"pk": {"S": pk}},
            ProjectionExpression=expression,
            **params,
        )
        # Then both return the same attributes
        assert normal(native.get("Item", {})) == normal(project(item, paths)), pk


def test_given_a_malformed_expression_then_the_evaluator_refuses_it() -> None:
    for text in ("n = ", "n == :a", "(n = :a", "n = :a)", "n BETWEEN :a", "n IN ()", "l[x] = :a"):
        with pytest.raises(ExpressionError):
            Condition(text)
    with pytest.raises(ExpressionError):
        Condition("#missing = :a")
    with pytest.raises(ExpressionError):
        Condition("n = :missing").matches({"n": {"N": "1"}}, {})
    with pytest.raises(ExpressionError):
        parse_projection("a,, b")


#: Key conditions on a table with hash ``pk`` and range ``sk`` (both strings).
KEY_CONDITIONS: dict[str, str] = {
    "hash": "pk = :p",
    "eq": "pk = :p AND sk = :ab",
    "lt": "pk = :p AND sk < :b",
    "le": "pk = :p AND sk <= :b",
    "gt": "pk = :p AND sk > :ab",
    "ge": "pk = :p AND sk >= :ab",
    "between": "pk = :p AND sk BETWEEN :ab AND :c",
    "begins": "pk = :p AND begins_with(sk, :a)",
    "names-reversed": "#s > :a AND #p = :p",
    "parens": "(pk = :p) AND (sk < :c)",
}
KEY_VALUES = {
    ":p": {"S": "p"},
    ":a": {"S": "a"},
    ":ab": {"S": "ab"},
    ":b": {"S": "b"},
    ":c": {"S": "c"},
}
KEY_NAMES = {"#p": "pk", "#s": "sk"}


@pytest.fixture(scope="module", params=KINDS)
def ranged(request: pytest.FixtureRequest, emulators: dict[str, LocalDynamo]) -> Iterator[Filled]:
    client = emulators[request.param].client()
    table = f"conditions-range-{uuid.uuid4().hex[:8]}"
    create_table_if_missing(
        client,
        table,
        None,
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
    )
    for pk, sk in [("p", "a"), ("p", "ab"), ("p", "b"), ("p", "c"), ("p", "\u00e9"), ("q", "a")]:
        client.put_item(TableName=table, Item={"pk": {"S": pk}, "sk": {"S": sk}})
    stored = {f"{i['pk']['S']}/{i['sk']['S']}": i for i in scan(client, table)}
    yield Filled(request.param, client, {"range": table}, {"range": stored})
    client.delete_table(TableName=table)


@pytest.mark.parametrize("kid", sorted(KEY_CONDITIONS))
def test_given_items_when_a_key_condition_is_evaluated_client_side_then_a_query_agrees(
    ranged: Filled, kid: str
) -> None:
    expression = KEY_CONDITIONS[kid]
    values = {p: v for p, v in KEY_VALUES.items() if _in(p, expression)}
    names = {p: n for p, n in KEY_NAMES.items() if _in(p, expression)}
    extra = {"ExpressionAttributeNames": names} if names else {}
    # When DynamoDB queries, and the evaluator checks every item
    native = ranged.client.query(
        TableName=ranged.tables["range"],
        KeyConditionExpression=expression,
        ExpressionAttributeValues=values,
        **extra,
    )
    condition = Condition(expression, names)
    ours = [key for key, item in ranged.stored["range"].items() if condition.matches(item, values)]
    # Then both find the same items
    assert sorted(f"{i['pk']['S']}/{i['sk']['S']}" for i in native["Items"]) == sorted(ours)
