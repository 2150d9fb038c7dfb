"""The read oracle's data: a table, a pending transaction on it, and the reads sent to it.

Three twin tables hold the same SEED. On ``ours`` a live transaction makes the
PENDING writes and stays pending; on ``after`` the same writes are made
natively; ``before`` keeps the seed. A committed read of ``ours`` through ddbtx
must answer what the same read answers natively on ``before``, and an
uncommitted one what it answers on ``after`` (see :mod:`test_reads`).

Key schema: hash ``pk`` (S), range ``sk`` (N). Indexes: ``by-g`` (GSI, hash
``g``, range ``sk``, ALL), ``by-g-keys`` (the same, KEYS_ONLY), ``by-v`` (LSI,
range ``v``, KEYS_ONLY) and ``by-v-all`` (LSI, range ``v``, ALL).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from helpers import GSI, GSI_KEYS, LSI_ALL, LSI_KEYS

Item = dict[str, Any]

#: Over 64 KB: an item this large keeps its saved image in the images table.
BIG = "x" * (70 * 1024)


def _item(pk: str, sk: int, **attributes: Any) -> Item:
    item: Item = {"pk": {"S": pk}, "sk": {"N": str(sk)}}
    for name, value in attributes.items():
        if isinstance(value, dict):
            item[name] = value
        elif isinstance(value, str):
            item[name] = {"S": value}
        else:
            item[name] = {"N": str(value)}
    return item


SEED: list[Item] = [
    _item("p", 1, g="a", v=10, n=1, tag="x"),
    _item("p", 2, g="a", v=20, n=2, tag="y"),
    _item("p", 3, g="b", v=30, n=3, tag="x"),
    _item("p", 4, g="a", v=40, n=4, tag="y"),
    _item("p", 5, g="b", v=50, n=5, tag="x", big=BIG),
    _item("p", 6, g="c", v=60, n=6, tag="x", m={"M": {"k": {"N": "1"}, "j": {"S": "z"}}}),
    _item("p", 7, v=70, n=7, tag="y", l={"L": [{"S": "e0"}, {"S": "e1"}, {"S": "e2"}]}),
    _item("p", 8, g="b", v=80, n=8),
    _item("q", 1, g="a", v=10, n=1),
    _item("q", 2, g="b", v=20, n=20, tag="x"),
    _item("q", 3, g="c", n=30),
    _item("p", 11, g="c", v=95, n=11, tag="y"),
]


def _update(pk: str, sk: int, expression: str, **values: Any) -> tuple[str, Item]:
    params: Item = {"Key": {"pk": {"S": pk}, "sk": {"N": str(sk)}}, "UpdateExpression": expression}
    if values:
        params["ExpressionAttributeValues"] = {f":{k}": v for k, v in values.items()}
    return "update", params


def _key(pk: str, sk: int) -> Item:
    return {"Key": {"pk": {"S": pk}, "sk": {"N": str(sk)}}}


#: The live transaction's requests, in order (op, params without TableName). Each is
#: one kind of pending state a read must see through.
PENDING: list[tuple[str, Item]] = [
    # an applied update: the filter on n and tag flips; the image is in the item
    _update("p", 1, "SET n = :v, tag = :t", v={"N": "100"}, t={"S": "y"}),
    ("delete", _key("p", 2)),  # a pending delete
    ("get", _key("p", 3)),  # a read lock
    _update("p", 4, "SET g = :g, v = :v", g={"S": "b"}, v={"N": "5"}),  # moves in both indexes
    _update("p", 5, "SET n = :v", v={"N": "0"}),  # image in the images table
    _update("p", 6, "SET n = :v, m.k = :k", v={"N": "100"}, k={"N": "2"}),  # stays in its index
    _update("p", 7, "SET g = :g", g={"S": "a"}),  # enters the GSI
    _update("p", 8, "REMOVE g"),  # leaves the GSI
    ("put", {"Item": _item("p", 9, g="a", v=90, n=9, tag="x")}),  # an insert
    ("get", _key("p", 10)),  # a read lock of a missing item: a bare lock holder
    _update("q", 1, "SET n = n + :one", one={"N": "1"}),
    ("put", {"Item": _item("q", 2, g="a", v=25, n=-1)}),  # a put over an item
    ("delete", _key("q", 4)),  # a delete of a missing item
    # several writes to one item: the image stays the one from before the transaction
    _update("p", 11, "SET n = :v", v={"N": "50"}),
    ("delete", _key("p", 11)),
    ("put", {"Item": _item("q", 3, g="c", n=-30)}),
    _update("q", 3, "SET tag = :t", t={"S": "x"}),
]


@dataclass(frozen=True)
class ReadShape:
    """One read: ``op`` is query, scan, get or batch; ``params`` lack table names."""

    id: str
    op: str
    params: Item
    #: The documented index phantom: items (pk, sk) whose committed value the read would
    #: return but whose pending value took them out of its index range, so a committed
    #: read through the index cannot find them.
    phantoms: tuple[tuple[str, int], ...] = ()


VALUES: dict[str, Item] = {
    ":p": {"S": "p"},
    ":q": {"S": "q"},
    ":a": {"S": "a"},
    ":b": {"S": "b"},
    ":c": {"S": "c"},
    ":x": {"S": "x"},
    ":y": {"S": "y"},
    ":e": {"S": "e"},
    ":zero": {"N": "0"},
    ":one": {"N": "1"},
    ":two": {"N": "2"},
    ":three": {"N": "3"},
    ":five": {"N": "5"},
    ":six": {"N": "6"},
    ":ten": {"N": "10"},
    ":25": {"N": "25"},
    ":30": {"N": "30"},
    ":50": {"N": "50"},
    ":55": {"N": "55"},
    ":100": {"N": "100"},
}
NAMES: dict[str, str] = {"#tag": "tag", "#n": "n", "#m": "m", "#k": "k", "#g": "g", "#l": "l"}
_PLACEHOLDER = re.compile(r"[#:][0-9A-Za-z_]+")
_EXPRESSIONS = ("KeyConditionExpression", "FilterExpression", "ProjectionExpression")


def _placeholders(params: Item) -> Item:
    """``params`` with the ExpressionAttributeNames/Values its expressions use."""
    used = set(_PLACEHOLDER.findall(" ".join(params.get(e, "") for e in _EXPRESSIONS)))
    out = dict(params)
    names = {p: NAMES[p] for p in sorted(used) if p in NAMES}
    values = {p: VALUES[p] for p in sorted(used) if p in VALUES}
    if names:
        out["ExpressionAttributeNames"] = names
    if values:
        out["ExpressionAttributeValues"] = values
    return out


def query(
    id: str, key: str, phantoms: tuple[tuple[str, int], ...] = (), **params: Any
) -> ReadShape:
    params = _placeholders({"KeyConditionExpression": key, **params})
    return ReadShape(f"query/{id}", "query", params, phantoms)


def scan(id: str, phantoms: tuple[tuple[str, int], ...] = (), **params: Any) -> ReadShape:
    return ReadShape(f"scan/{id}", "scan", _placeholders(params), phantoms)


#: p4's pending g=b moved it out of g=a (and its pending v=5 out of v 30..50).
PHANTOM_A = PHANTOM_V = (("p", 4),)
#: p8's pending REMOVE g took it out of the GSI; q2's pending put moved it from g=b to g=a.
PHANTOM_B = (("p", 8), ("q", 2))
PHANTOM_GONE = (("p", 8),)

P = "pk = :p"
READS: list[ReadShape] = [
    # the base table: every pending state, filters that flip, projections, counts
    query("all", P),
    query("descending", P, ScanIndexForward=False),
    query("range", f"{P} AND sk BETWEEN :two AND :six"),
    query("range-ge", "pk = :q AND sk >= :one"),
    query("filter-n", P, FilterExpression="n < :five"),
    query("filter-tag", P, FilterExpression="#tag = :x"),
    query("filter-not", P, FilterExpression="NOT #tag = :y"),
    # enclosed in parentheses already (as boto3's builder writes it): adding a pair would be
    # redundant, which DynamoDB refuses
    query("filter-parenthesized", P, FilterExpression="(n < :five OR #tag = :y)"),
    query("filter-exists", P, FilterExpression="attribute_exists(#tag) AND n <> :100"),
    query("filter-nested", P, FilterExpression="#m.#k = :one"),
    query("filter-size", P, FilterExpression="size(#l) > :two OR n = :zero"),
    query("projection", P, ProjectionExpression="sk, n"),
    query("projection-no-key", P, ProjectionExpression="n, #tag"),
    query("projection-nested", P, ProjectionExpression="#m.#k, #l[1], #l[0]"),
    query("projection-filter", P, ProjectionExpression="sk", FilterExpression="n < :five"),
    query("select-specific", P, Select="SPECIFIC_ATTRIBUTES", ProjectionExpression="n"),
    query("select-all", P, Select="ALL_ATTRIBUTES"),
    query("count", P, Select="COUNT"),
    query("count-filter", P, Select="COUNT", FilterExpression="n < :five"),
    query("limit-1", P, Limit=1),
    query("limit-3-filter", P, Limit=3, FilterExpression="#tag = :x"),
    query("limit-2-count", P, Limit=2, Select="COUNT"),
    query("consistent", P, ConsistentRead=True),
    query("other-partition", "pk = :q", FilterExpression="n >= :zero"),
    # a global index, ALL: re-checked against images; the phantoms are the documented caveat
    query("gsi-c", "g = :c", IndexName=GSI),
    query("gsi-c-filter", "g = :c", IndexName=GSI, FilterExpression="n < :ten"),
    query("gsi-c-projection", "g = :c", IndexName=GSI, ProjectionExpression="n, #m.#k"),
    query("gsi-c-count", "g = :c", IndexName=GSI, Select="COUNT"),
    query("gsi-a", "g = :a", PHANTOM_A, IndexName=GSI),
    query("gsi-b", "g = :b", PHANTOM_B, IndexName=GSI),
    query("gsi-a-range", "g = :a AND sk > :one", PHANTOM_A, IndexName=GSI),
    # the same, KEYS_ONLY: the base items are read to see their locks
    query("gsi-keys-c", "g = :c", IndexName=GSI_KEYS),
    query("gsi-keys-c-filter", "g = :c", IndexName=GSI_KEYS, FilterExpression="sk < :ten"),
    query("gsi-keys-c-count", "g = :c", IndexName=GSI_KEYS, Select="COUNT"),
    query("gsi-keys-a", "g = :a", PHANTOM_A, IndexName=GSI_KEYS),
    query("gsi-keys-b-limit", "g = :b", PHANTOM_B, IndexName=GSI_KEYS, Limit=1),
    # local indexes
    query("lsi-low", f"{P} AND v < :25", IndexName=LSI_KEYS),
    query("lsi-high", f"{P} AND v >= :55", IndexName=LSI_KEYS),
    query("lsi-middle", f"{P} AND v BETWEEN :30 AND :50", PHANTOM_V, IndexName=LSI_KEYS),
    query("lsi-all-low", f"{P} AND v < :25", IndexName=LSI_ALL),
    query(
        "lsi-all-high-filter", f"{P} AND v >= :55", IndexName=LSI_ALL, FilterExpression="n < :ten"
    ),
    query("lsi-all-projection", f"{P} AND v >= :55", IndexName=LSI_ALL, ProjectionExpression="n"),
    query("lsi-all-middle", f"{P} AND v BETWEEN :30 AND :50", PHANTOM_V, IndexName=LSI_ALL),
    # scans
    scan("all"),
    scan("filter-n", FilterExpression="n < :five"),
    scan("filter-or", FilterExpression="#tag = :y OR n >= :100"),
    scan("projection", ProjectionExpression="pk, sk, #tag"),
    scan("count", Select="COUNT"),
    scan("count-filter", Select="COUNT", FilterExpression="n < :ten"),
    scan("limit-2", Limit=2),
    scan(
        "limit-3-filter-projection", Limit=3, FilterExpression="n < :ten", ProjectionExpression="n"
    ),
    scan("segments", Segment=0, TotalSegments=1),
    scan("gsi-all", PHANTOM_GONE, IndexName=GSI),
    scan("gsi-filter", IndexName=GSI, FilterExpression="g = :c"),
    scan("gsi-keys", PHANTOM_GONE, IndexName=GSI_KEYS),
    # rejected by DynamoDB (ValidationException natively, InvalidRequestError through ddbtx)
    query("error-filter-on-key", P, FilterExpression="pk = :p"),
    query("error-syntax", P, FilterExpression="n = = :one"),
    query("error-select-all-on-keys-index", "g = :c", IndexName=GSI_KEYS, Select="ALL_ATTRIBUTES"),
]


def _keys(*pairs: tuple[str, int]) -> list[Item]:
    return [{"pk": {"S": pk}, "sk": {"N": str(sk)}} for pk, sk in pairs]


#: Every pending state, and items nobody holds.
BATCH_KEYS = _keys(*[("p", i) for i in range(1, 12)], ("q", 1), ("q", 2), ("q", 3), ("q", 4))
GETS: list[ReadShape] = [
    ReadShape("batch/all", "batch", {"Keys": BATCH_KEYS}),
    ReadShape("batch/projection", "batch", {"Keys": BATCH_KEYS, "ProjectionExpression": "n"}),
    ReadShape(
        "batch/projection-names",
        "batch",
        {
            "Keys": BATCH_KEYS,
            "ProjectionExpression": "#m.#k, #tag",
            "ExpressionAttributeNames": {"#m": "m", "#k": "k", "#tag": "tag"},
        },
    ),
    ReadShape("batch/consistent", "batch", {"Keys": BATCH_KEYS[:5], "ConsistentRead": True}),
    *[
        ReadShape(f"get/{pk}{sk}", "get", {"Key": key, "ProjectionExpression": "n, sk"})
        for key in BATCH_KEYS
        for pk, sk in [(key["pk"]["S"], key["sk"]["N"])]
    ],
]

SHAPES = READS + GETS
assert len({shape.id for shape in SHAPES}) == len(SHAPES), "shape ids must be unique"
