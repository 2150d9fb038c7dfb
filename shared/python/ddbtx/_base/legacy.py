"""DynamoDB's legacy conditional parameters in their expression forms, as DynamoDB defines
them: ``AttributeUpdates`` as an ``UpdateExpression``, ``Expected`` (with
``ConditionalOperator``) as a ``ConditionExpression``. The protocol only speaks
expressions, so a transaction translates a legacy request before anything else."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InvalidRequestError

LEGACY = ("AttributeUpdates", "Expected", "ConditionalOperator")
_EXPRESSION_PARAMS = (
    "UpdateExpression",
    "ConditionExpression",
    "ExpressionAttributeNames",
    "ExpressionAttributeValues",
)
#: Legacy comparison operators: the expression each becomes, and its number of values.
_COMPARISONS: dict[str, tuple[str, int | None]] = {
    "EQ": ("{a} = {v0}", 1),
    "NE": ("{a} <> {v0}", 1),
    "LE": ("{a} <= {v0}", 1),
    "LT": ("{a} < {v0}", 1),
    "GE": ("{a} >= {v0}", 1),
    "GT": ("{a} > {v0}", 1),
    "NOT_NULL": ("attribute_exists({a})", 0),
    "NULL": ("attribute_not_exists({a})", 0),
    "CONTAINS": ("contains({a}, {v0})", 1),
    "NOT_CONTAINS": ("NOT contains({a}, {v0})", 1),
    "BEGINS_WITH": ("begins_with({a}, {v0})", 1),
    "BETWEEN": ("{a} BETWEEN {v0} AND {v1}", 2),
    "IN": ("{a} IN ({values})", None),
}


def _refused(message: str) -> InvalidRequestError:
    """DynamoDB's own ValidationException text for a legacy request it refuses."""
    return InvalidRequestError(message, dynamodb_message=message)


def _invalid_parameter(detail: str) -> InvalidRequestError:
    return _refused(f"One or more parameter values were invalid: {detail}")


class _Placeholders:
    """Names ``#legacyN`` and values ``:legacyN``: no user placeholder can clash, since
    DynamoDB refuses legacy and expression parameters in one request."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {}

    def name(self, attribute: str) -> str:
        placeholder = f"#legacy{len(self.names)}"
        self.names[placeholder] = attribute
        return placeholder

    def value(self, value: Any) -> str:
        placeholder = f":legacy{len(self.values)}"
        self.values[placeholder] = value
        return placeholder


def as_expressions(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with ``AttributeUpdates`` and ``Expected`` in their expression forms.

    A request without them comes back unchanged; one that also has an expression parameter
    is refused with DynamoDB's own message.
    """
    legacy = [p for p in LEGACY if params.get(p) is not None]
    if not legacy:
        return dict(params)
    expressions = [p for p in _EXPRESSION_PARAMS if params.get(p) is not None]
    if expressions:
        raise _refused(
            "Can not use both expression and non-expression parameters in the same request: "
            f"Non-expression parameters: {{{', '.join(legacy)}}} "
            f"Expression parameters: {{{', '.join(expressions)}}}"
        )
    out = {k: v for k, v in params.items() if k not in LEGACY}
    marks = _Placeholders()
    updates = params.get("AttributeUpdates")
    if updates is not None:
        update = _update_expression(updates, marks)
        if update:
            out["UpdateExpression"] = update
    expected = params.get("Expected")
    if expected:
        operator = params.get("ConditionalOperator") or "AND"
        if operator not in ("AND", "OR"):
            raise _refused(
                f"1 validation error detected: Value '{operator}' at 'conditionalOperator' "
                "failed to satisfy constraint: Member must satisfy enum value set: [AND, OR]"
            )
        parts = [_condition(name, spec, marks) for name, spec in expected.items()]
        out["ConditionExpression"] = f" {operator} ".join(parts)
    if marks.names:
        out["ExpressionAttributeNames"] = marks.names
    if marks.values:
        out["ExpressionAttributeValues"] = marks.values
    return out


def _update_expression(updates: Mapping[str, Any], marks: _Placeholders) -> str:
    """AttributeUpdates: PUT sets, ADD adds, DELETE removes (or takes a set's elements out)."""
    clauses: dict[str, list[str]] = {"SET": [], "ADD": [], "DELETE": [], "REMOVE": []}
    for attribute, spec in updates.items():
        action = spec.get("Action") or "PUT"
        value = spec.get("Value")
        if value is None and action != "DELETE":
            raise _invalid_parameter(
                "Only DELETE action is allowed when no attribute value is specified"
            )
        name = marks.name(attribute)
        if action == "PUT":
            clauses["SET"].append(f"{name} = {marks.value(value)}")
        elif action == "ADD":
            clauses["ADD"].append(f"{name} {marks.value(value)}")
        elif action == "DELETE" and value is not None:
            clauses["DELETE"].append(f"{name} {marks.value(value)}")
        elif action == "DELETE":
            clauses["REMOVE"].append(name)
        else:
            raise _refused(
                f"1 validation error detected: Value '{action}' at "
                f"'attributeUpdates.{attribute}.member.action' failed to satisfy constraint: "
                "Member must satisfy enum value set: [ADD, PUT, DELETE]"
            )
    return " ".join(f"{verb} {', '.join(parts)}" for verb, parts in clauses.items() if parts)


def _condition(attribute: str, spec: Mapping[str, Any], marks: _Placeholders) -> str:
    """One Expected entry: Value/Exists, or ComparisonOperator with its AttributeValueList."""
    operator = spec.get("ComparisonOperator")
    if operator is None:
        exists = spec.get("Exists", True)
        if "Value" in spec and not exists:
            raise _invalid_parameter(
                f"Value cannot be used when Exists is false for Attribute: {attribute}"
            )
        if exists and "Value" not in spec:
            raise _invalid_parameter(
                f"Value must be provided when Exists is true for Attribute: {attribute}"
            )
        name = marks.name(attribute)
        if not exists:
            return f"attribute_not_exists({name})"
        return f"{name} = {marks.value(spec['Value'])}"
    if operator not in _COMPARISONS:
        raise _refused(
            f"1 validation error detected: Value '{operator}' at "
            f"'expected.{attribute}.member.comparisonOperator' failed to satisfy constraint: "
            f"Member must satisfy enum value set: [{', '.join(_COMPARISONS)}]"
        )
    template, count = _COMPARISONS[operator]
    given = list(spec.get("AttributeValueList") or [])
    if (count is None and not given) or (count is not None and len(given) != count):
        raise _invalid_parameter(
            f"Invalid number of argument(s) for the {operator} ComparisonOperator"
        )
    name = marks.name(attribute)
    placeholders = [marks.value(v) for v in given]
    fields = {f"v{i}": p for i, p in enumerate(placeholders)}
    return template.format(a=name, values=", ".join(placeholders), **fields)
