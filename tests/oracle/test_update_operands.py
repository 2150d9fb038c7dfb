"""An update's operands read the item as it was before the update, on each backend.

AWS documents it (Developer Guide, "Using update expressions in DynamoDB"): when an
update expression holds several actions, every action is evaluated against the item's
attribute values as they were before the update, so a right-hand operand always refers
to the pre-update value. Issue 22's folded write (lock and apply in one ``UpdateItem``)
rests on it: the same request that applies the caller's update copies the old value of
every top-level attribute the update touches into a protocol attribute, and a rollback
restores from those copies.

Each case copies an attribute and changes it in one request, then reads the copy: it must
hold the value before the request. Both emulators get some cases wrong (the copy shares
the value that a later action changes in place). Those are expected to fail there, naming
the deviation (strictly: an emulator that stops deviating fails the run, so the list stays
true), and the folded write must not rely on an emulator for them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from ddbtx.local import LocalDynamo
from ddbtx.tables import create_data_table

#: The item every case starts from.
SEED: dict[str, Any] = {
    "pk": {"S": "k"},
    "n": {"N": "1"},
    "m": {"M": {"x": {"S": "y"}}},
    "l": {"L": [{"N": "1"}]},
    "s": {"SS": ["a"]},
}

#: The AWS rule each skipped case breaks on an emulator, quoted once.
PRE_UPDATE = (
    "every action of an update expression is evaluated against the item as it was before "
    "the update (Developer Guide: Using update expressions in DynamoDB)"
)


@dataclass(frozen=True)
class Case:
    """``SET #o = #a`` plus ``actions`` on ``#a`` in one request; ``after``: ``a`` then."""

    attribute: str
    actions: str
    after: dict[str, Any] | None
    values: dict[str, Any] = field(default_factory=dict)
    deviates_on: tuple[str, ...] = ()

    def expression(self) -> str:
        clauses = self.actions.split(" | ")
        first = clauses[0]
        if first.startswith("SET "):
            return " ".join([f"SET #o = #a, {first[4:]}", *clauses[1:]])
        return " ".join(["SET #o = #a", *clauses])


CASES: dict[str, Case] = {
    "set a value": Case("n", "SET #a = :v", {"N": "5"}, {":v": {"N": "5"}}),
    "set a sum": Case("n", "SET #a = #a + :v", {"N": "6"}, {":v": {"N": "5"}}),
    "remove": Case("n", "REMOVE #a", None),
    "list_append": Case(
        "l",
        "SET #a = list_append(#a, :v)",
        {"L": [{"N": "1"}, {"N": "2"}]},
        {":v": {"L": [{"N": "2"}]}},
    ),
    # dynalite changes the number the copy shares in place.
    "add to a number": Case("n", "ADD #a :v", {"N": "6"}, {":v": {"N": "5"}}, ("dynalite",)),
    # Both emulators change the map, list or set the copy shares in place.
    "set a nested path": Case(
        "m",
        "SET #a.#x = :v",
        {"M": {"x": {"S": "new"}}},
        {":v": {"S": "new"}},
        ("moto", "dynalite"),
    ),
    "remove a nested path": Case("m", "REMOVE #a.#x", {"M": {}}, {}, ("moto", "dynalite")),
    "set a list index": Case(
        "l", "SET #a[0] = :v", {"L": [{"N": "9"}]}, {":v": {"N": "9"}}, ("moto", "dynalite")
    ),
    "add to a set": Case(
        "s", "ADD #a :v", {"SS": ["a", "b"]}, {":v": {"SS": ["b"]}}, ("moto", "dynalite")
    ),
    "delete from a set": Case(
        "s", "DELETE #a :v", None, {":v": {"SS": ["a"]}}, ("moto", "dynalite")
    ),
}


@pytest.fixture
def seeded(ddb: Any, table_name: Callable[[str], str]) -> str:
    """A data table holding :data:`SEED`."""
    name = table_name("operands")
    create_data_table(ddb, name)
    ddb.put_item(TableName=name, Item=SEED)
    return name


@pytest.mark.parametrize("case_id", list(CASES))
def test_given_an_attribute_copied_and_changed_in_one_update_then_the_copy_holds_the_old_value(
    request: pytest.FixtureRequest, backend: LocalDynamo, ddb: Any, seeded: str, case_id: str
) -> None:
    case = CASES[case_id]
    if backend.kind in case.deviates_on:
        reason = f"{backend.kind} deviates from AWS here; AWS: {PRE_UPDATE}"
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    names = {"#o": "copy", "#a": case.attribute}
    if "#x" in case.actions:
        names["#x"] = "x"
    # Given the seeded item
    # When one update copies an attribute into "copy" and changes the attribute
    ddb.update_item(
        TableName=seeded,
        Key={"pk": SEED["pk"]},
        UpdateExpression=case.expression(),
        ExpressionAttributeNames=names,
        **({"ExpressionAttributeValues": case.values} if case.values else {}),
    )
    # Then the copy holds the value before the update, and the attribute the new one
    item = ddb.get_item(TableName=seeded, Key={"pk": SEED["pk"]}, ConsistentRead=True)["Item"]
    assert item["copy"] == SEED[case.attribute]
    assert item.get(case.attribute) == case.after
