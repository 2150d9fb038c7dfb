"""Validation and normalisation of the requests a transaction accepts, before any write."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from botocore.exceptions import ParamValidationError
from botocore.validate import ParamValidator

from .. import schema
from ..errors import DynamoDBError, InvalidRequestError, TableNotFound
from .effects import Step, request
from .items import MAX_ITEM_BYTES, Item, canonical_key_value, item_size, probe_key, request_id
from .legacy import as_expressions

Op = Literal["put", "update", "delete", "get"]

_COMMON = {
    "TableName",
    "ConditionExpression",
    "ExpressionAttributeNames",
    "ReturnValuesOnConditionCheckFailure",
}
_ALLOWED: dict[str, set[str]] = {
    "put": _COMMON | {"Item", "ExpressionAttributeValues", "ReturnValues"},
    "update": _COMMON | {"Key", "UpdateExpression", "ExpressionAttributeValues", "ReturnValues"},
    "delete": _COMMON | {"Key", "ExpressionAttributeValues", "ReturnValues"},
    "get": {"TableName", "Key", "ConsistentRead"},
}
_RETURN_VALUES: dict[str, set[str]] = {
    "put": {"NONE", "ALL_OLD"},
    "update": {"NONE", "ALL_OLD", "UPDATED_OLD", "ALL_NEW", "UPDATED_NEW"},
    "delete": {"NONE", "ALL_OLD"},
}
_AV_TYPES = {"S", "N", "B", "BOOL", "NULL", "SS", "NS", "BS", "L", "M"}

#: Placeholders the protocol adds to user expressions; user placeholders may not use them.
PLACEHOLDER_PREFIX = "ddbtx"

#: Bytes of an item a lock takes: ``_tx:id`` = "<tx id, 29 characters>/<nonce, 8>".
LOCK_BYTES = len(schema.ATTR_LOCK) + 29 + 1 + 8
#: Bytes of the fence ``_tx:f``: a number of up to 20 digits (it starts below 2**48).
FENCE_BYTES = len(schema.ATTR_FENCE) + 11
#: Bytes a transaction adds to an item at most, besides an in-item image: the lock, the
#: fence, the applied flag, and ``_tx:new`` or ``_tx:ext`` (a delete: the lock, the fence
#: and ``_tx:del``).
PROTOCOL_OVERHEAD = (
    LOCK_BYTES
    + FENCE_BYTES
    + len(schema.ATTR_APPLIED)
    + 1
    + max(len(schema.ATTR_TRANSIENT), len(schema.ATTR_IMAGE_EXTERNAL))
    + 1
)

#: A table's key attributes, hash first, each with its type (S, N or B) or None.
KeyTypes = Mapping[str, str | None]


class KeySchemas:
    """Each data table's key attributes and types, read once and kept (or given: ``known``)."""

    def __init__(self, known: Mapping[str, Sequence[str] | KeyTypes] | None = None) -> None:
        self._known = {table: _key_types(keys) for table, keys in (known or {}).items()}

    def types(self, table: str) -> Step[KeyTypes]:
        """The step of ``table``'s key types (no request once known)."""
        keys = self._known.get(table)
        if keys is None:
            try:
                response = yield from request("describe_table", TableName=table)
            except TableNotFound as exc:
                # DynamoDB's own ResourceNotFoundException (TableNotFound), as natively
                exc.add_note(f"table {table!r} does not exist")
                raise
            desc = response["Table"]
            schema_ = sorted(desc["KeySchema"], key=lambda k: k["KeyType"] != "HASH")
            types = {a["AttributeName"]: a["AttributeType"] for a in desc["AttributeDefinitions"]}
            keys = {k["AttributeName"]: types.get(k["AttributeName"]) for k in schema_}
            self._known[table] = keys
        return keys


#: Placeholders in expressions: DynamoDB's grammar has no string literals, so a
#: ``#`` or ``:`` always starts one (no quoting can hide one).
_PLACEHOLDER = re.compile(r"[#:][0-9A-Za-z_]+")
_EXPRESSIONS = ("ConditionExpression", "UpdateExpression")

_CLAUSE = re.compile(r"(?<![#:\w.])(SET|REMOVE|ADD|DELETE)(?!\w)", re.IGNORECASE)


@dataclass(frozen=True)
class Request:
    """One validated request on one item."""

    op: Op
    table: str
    key: Item
    params: dict[str, Any] = field(repr=False)
    rid: str = ""
    #: The parameters as the user wrote them (legacy ones untranslated), where known
    written: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def on_probe_key(self) -> tuple[dict[str, Any], Item]:
        """The request as the user wrote it, on a key no item has; that key."""
        return on_probe_key(self.op, self.written or self.params, tuple(self.key))

    @property
    def return_values(self) -> str:
        return str(self.params.get("ReturnValues", "NONE"))

    @property
    def old_on_failure(self) -> bool:
        """Whether a false condition hands back the item as it was (as DynamoDB does)."""
        return self.params.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD"

    @property
    def condition(self) -> str | None:
        cond = self.params.get("ConditionExpression")
        return str(cond) if cond else None


def invalid(message: str, table: str | None, key: Item | None = None) -> InvalidRequestError:
    return InvalidRequestError(message, table=table, key=key)


class NativeRefusal(InvalidRequestError):
    """A refusal DynamoDB makes too, in its words, found before sending anything.

    A request with another error besides may get that one from DynamoDB, which checks in an
    order of its own: ``probe`` is the request as the user wrote it on a key no item has
    (:func:`ddbtx._base.items.probe_key`), for the coordinator to ask DynamoDB which.
    """

    def __init__(
        self, refusal: InvalidRequestError, op: Op, probe: dict[str, Any], probe_key: Item
    ) -> None:
        super().__init__(str(refusal.detail), table=refusal.table)
        self.op = op
        self.probe = probe
        self.probe_key = probe_key


def _check_av(name: str, value: Any, table: str) -> None:
    if not (isinstance(value, dict) and len(value) == 1 and next(iter(value)) in _AV_TYPES):
        raise invalid(f"attribute {name!r} is not a low-level AttributeValue: {value!r:.80}", table)
    ((kind, raw),) = value.items()
    _check_serializable(kind, raw)


#: What each AttributeValue member holds, as DynamoDB's JSON protocol reads it.
_MEMBER = {"S": "String", "N": "String", "B": "Blob", "BOOL": "Boolean", "NULL": "Boolean"}
_SETS = {"SS": "String", "NS": "String", "BS": "Blob"}


def _serialization(message: str) -> DynamoDBError:
    """DynamoDB's SerializationException: a value of the wrong JSON type (sent as it is by a
    client without parameter validation)."""
    return DynamoDBError(message, code="SerializationException", operation="")


def _check_serializable(kind: str, raw: Any) -> None:
    """A member holding a value DynamoDB cannot read as its type: DynamoDB's own answer."""
    if kind in _MEMBER:
        _check_scalar(_MEMBER[kind], raw)
    elif kind in _SETS or kind == "L":
        if isinstance(raw, dict):
            raise _serialization("Start of structure or map found where not expected")
        if not isinstance(raw, list | tuple):
            raise _serialization("Unexpected field type")
        for element in raw:
            if kind == "L":
                if not (isinstance(element, dict) and len(element) == 1):
                    raise _serialization("Start of structure or map found where not expected")
                ((inner, value),) = element.items()
                _check_serializable(inner, value)
            else:
                _check_scalar(_SETS[kind], element)
    elif kind == "M":
        if not isinstance(raw, dict):
            raise _serialization("Unexpected field type")
        for element in raw.values():
            if isinstance(element, dict) and len(element) == 1:
                ((inner, value),) = element.items()
                _check_serializable(inner, value)


def _check_scalar(expected: str, raw: Any) -> None:
    if isinstance(raw, dict):
        raise _serialization("Start of structure or map found where not expected")
    if isinstance(raw, list | tuple):
        java = "java.nio.ByteBuffer" if expected == "Blob" else f"java.lang.{expected}"
        raise _serialization(f"Unrecognized collection type class {java}")
    if expected == "Blob":
        if isinstance(raw, bool | int | float):
            raise _serialization("only base-64-encoded strings are convertible to bytes")
        return
    if isinstance(raw, bool):
        if expected == "String":
            raise _serialization(
                f"{'TRUE' if raw else 'FALSE'}_VALUE cannot be converted to String"
            )
        return
    if isinstance(raw, int | float):
        what = "NUMBER_VALUE" if isinstance(raw, int) or raw.is_integer() else "DECIMAL_VALUE"
        raise _serialization(f"{what} cannot be converted to {expected}")
    spelled = ("TRUE", "1", "YES", "FALSE", "0", "NO")
    if expected == "Boolean" and isinstance(raw, str) and raw.upper() not in spelled:
        raise _serialization("Unexpected token received from parser")


def check_placeholders(params: Mapping[str, Any], table: str) -> None:
    """``ExpressionAttributeNames`` and ``...Values`` well formed, none reserved by ddbtx."""
    names = params.get("ExpressionAttributeNames")
    for placeholder, real in _entries(names, "ExpressionAttributeNames", "#", table):
        if not isinstance(real, str) or real.startswith(schema.RESERVED_PREFIX):
            raise invalid(
                f"attribute name {real!r} (behind {placeholder}) uses the reserved prefix "
                f"{schema.RESERVED_PREFIX!r}",
                table,
            )
    values = params.get("ExpressionAttributeValues")
    for placeholder, value in _entries(values, "ExpressionAttributeValues", ":", table):
        _check_av(placeholder, value, table)


def _entries(mapping: Any, param: str, sigil: str, table: str) -> Iterator[tuple[str, Any]]:
    """A placeholder map's entries, each placeholder checked as it comes."""
    if mapping is None:
        return
    if not isinstance(mapping, dict):
        raise invalid(f"{param} must be a dict", table)
    for placeholder, value in mapping.items():
        if not (isinstance(placeholder, str) and _PLACEHOLDER.fullmatch(placeholder)):
            odd = f"placeholder {placeholder!r} is not '{sigil}' and letters, digits or _"
            raise invalid(odd, table)
        if not placeholder.startswith(sigil):
            raise invalid(f"placeholder {placeholder!r} must start with '{sigil}'", table)
        if placeholder[1:].startswith(PLACEHOLDER_PREFIX):
            raise invalid(f"placeholder {placeholder!r} is reserved by ddbtx", table)
        yield placeholder, value


def check_table(table: Any) -> str:
    if not isinstance(table, str) or not table:
        raise invalid("TableName is missing", None)
    return table


def check_expressions(
    params: Mapping[str, Any], table: str, expression_params: Sequence[str] = _EXPRESSIONS
) -> None:
    """Expressions non-empty or absent; each placeholder defined is used, each used defined."""
    for name in expression_params:
        value = params.get(name)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise invalid(f"Invalid {name}: The expression can not be empty;", table)
    given = {p: str(params[p]) for p in expression_params if params.get(p) is not None}
    used = set(_PLACEHOLDER.findall(" ".join(given.values())))
    for param, sigil in (("ExpressionAttributeNames", "#"), ("ExpressionAttributeValues", ":")):
        mine = {t for t in used if t.startswith(sigil)}
        _check_defined(param, params.get(param), mine, used, given, table)


#: DynamoDB's words for a placeholder an expression uses but no map defines.
_UNDEFINED = {
    "ExpressionAttributeNames": "An expression attribute name used in the document path is not "
    "defined; attribute name: {}",
    "ExpressionAttributeValues": "An expression attribute value used in expression is not "
    "defined; attribute value: {}",
}


def _check_defined(
    param: str,
    defined: Any,
    mine: set[str],
    used: set[str],
    expressions: Mapping[str, str],
    table: str,
) -> None:
    """One placeholder map against ``mine`` (used, of its kind) and ``used`` (both kinds),
    refused in DynamoDB's words."""
    if defined is not None and not defined:
        raise invalid(f"{param} must not be empty", table)
    if defined is not None and not expressions:
        raise invalid(f"{param} can only be specified when using expressions", table)
    undefined = sorted(mine - set(defined or {}))
    if undefined:
        where = next(e for e, text in expressions.items() if undefined[0] in text)
        raise invalid(f"Invalid {where}: {_UNDEFINED[param].format(undefined[0])}", table)
    unused = sorted(set(defined or {}) - used)
    if unused:
        keys = ", ".join(unused)
        raise invalid(f"Value provided in {param} unused in expressions: keys: {{{keys}}}", table)


def _key_types(key_names: Sequence[str] | KeyTypes) -> KeyTypes:
    return key_names if isinstance(key_names, Mapping) else dict.fromkeys(key_names)


#: DynamoDB's words for a ``Key`` that is not the table's.
NOT_THE_SCHEMA = "The provided key element does not match the schema"


def _check_key(key: Any, key_types: KeyTypes, table: str, *, in_item: bool = False) -> Item:
    """The key in canonical form (hash first), after checking it against the key schema;
    refused in DynamoDB's words (a put's key, ``in_item``, in PutItem's)."""
    if not isinstance(key, dict) or not key or set(key) != set(key_types):
        raise invalid(NOT_THE_SCHEMA, table)
    canonical: Item = {}
    for name, expected in key_types.items():
        value = key[name]
        _check_av(name, value, table)
        ((kind, raw),) = value.items()
        if raw in ("", b"") and kind in ("S", "B"):
            what = "string" if kind == "S" else "binary"
            raise invalid(
                "One or more parameter values are not valid. The AttributeValue for a key "
                f"attribute cannot contain an empty {what} value. Key: {name}",
                table,
            )
        if (expected is not None and kind != expected) or kind not in ("S", "N", "B"):
            if not in_item:
                raise invalid(NOT_THE_SCHEMA, table)
            raise invalid(
                "One or more parameter values were invalid: Type mismatch for key "
                f"{name} expected: {expected or 'S, N or B'} actual: {kind}",
                table,
            )
        try:
            canonical[name] = canonical_key_value(value)
        except ValueError as exc:
            raise invalid(f"key attribute {name!r}: {exc}", table) from None
    return canonical


#: The API of each operation a transaction takes.
OPERATIONS: dict[str, str] = {
    "put": "PutItem",
    "update": "UpdateItem",
    "delete": "DeleteItem",
    "get": "GetItem",
}


def check_shape(client: Any, op: Op, params: Mapping[str, Any]) -> None:
    """The request as the client checks it before sending, when it does (botocore's
    ``parameter_validation``, on by default): botocore's own ``ParamValidationError``."""
    meta = getattr(client, "meta", None)
    if meta is None or not getattr(meta.config, "parameter_validation", True):
        return
    model = meta.service_model.operation_model(OPERATIONS[op])
    report = ParamValidator().validate(params, model.input_shape)
    if report.has_errors():
        raise ParamValidationError(report=report.generate_report())


def check_enum(params: Mapping[str, Any], name: str, allowed: Collection[str]) -> None:
    """A parameter outside its enum is refused in DynamoDB's own words (botocore does
    not check enums)."""
    value = params.get(name)
    if value is not None and value not in allowed:
        member = name[0].lower() + name[1:]
        raise invalid(
            f"1 validation error detected: Value '{value}' at '{member}' failed to satisfy "
            f"constraint: Member must satisfy enum value set: [{', '.join(sorted(allowed))}]",
            None,
        )


def build(op: Op, params: dict[str, Any], key_names: Sequence[str] | KeyTypes) -> Request:
    """Validate boto3-style ``params`` for ``op``; its key made canonical (one id per item)."""
    table = check_table(params.get("TableName"))
    original = params
    params = as_expressions(params) if op != "get" else params
    unknown = set(params) - _ALLOWED[op]
    if unknown:
        raise invalid(f"{op}_item does not support {sorted(unknown)} in a transaction", table)
    key_types = _key_types(key_names)
    check_placeholders(params, table)
    try:
        _check_natively(op, params, table)
    except InvalidRequestError as refusal:
        # DynamoDB may name another error of the request first: asked on a probe key, if
        # the key is one (a key error is said as it is, the probe needing a key).
        _check_key_of(op, dict(params), key_types, table)
        raise NativeRefusal(refusal, op, *on_probe_key(op, original, tuple(key_types))) from None
    params = dict(params)
    key = _check_key_of(op, params, key_types, table)
    rid = request_id(table, key)
    return Request(op=op, table=table, key=key, params=params, rid=rid, written=original)


def _check_natively(op: Op, params: Mapping[str, Any], table: str) -> None:
    """The checks DynamoDB makes itself, each refused in its words."""
    if op in _RETURN_VALUES:
        check_enum(params, "ReturnValues", _RETURN_VALUES["update"])
        if params.get("ReturnValues", "NONE") not in _RETURN_VALUES[op]:
            raise invalid("ReturnValues can only be ALL_OLD or NONE", table)
    check_enum(params, "ReturnValuesOnConditionCheckFailure", ("ALL_OLD", "NONE"))
    check_expressions(params, table)


def _check_key_of(op: Op, params: dict[str, Any], key_types: KeyTypes, table: str) -> Item:
    """The request's key, canonical (made so in ``params`` too), once checked."""
    if op == "put":
        return _check_item(params, key_types, table)
    key = _check_key(params.get("Key"), key_types, table)
    params["Key"] = key
    return key


def on_probe_key(
    op: str, params: Mapping[str, Any], key_names: Sequence[str]
) -> tuple[dict[str, Any], Item]:
    """A request (its key valid) on a key no item has; that key."""
    if op == "put":
        item = params["Item"]
        probe = probe_key({k: item[k] for k in key_names})
        return {**params, "Item": {**item, **probe}}, probe
    probe = probe_key(params["Key"])
    return {**params, "Key": probe}, probe


def _check_item(params: dict[str, Any], key_types: KeyTypes, table: str) -> Item:
    """A put's key in canonical form, after checking its item (whose key it becomes)."""
    item = params.get("Item")
    if not isinstance(item, dict) or not item:
        raise invalid("Item is missing or empty", table)
    for name, value in item.items():
        if name.startswith(schema.RESERVED_PREFIX):
            raise invalid(
                f"attribute name {name!r} uses the reserved prefix {schema.RESERVED_PREFIX!r}",
                table,
            )
        _check_av(name, value, table)
    missing = [k for k in key_types if k not in item]
    if missing:
        raise invalid(
            f"One or more parameter values were invalid: Missing the key {missing[0]} in the item",
            table,
        )
    key = _check_key({k: item[k] for k in key_types}, key_types, table, in_item=True)
    params["Item"] = {**item, **key}
    size = item_size(item)
    if size + PROTOCOL_OVERHEAD > MAX_ITEM_BYTES:
        raise invalid(too_large(size), table, key)
    return key


def too_large(size: int | None = None) -> str:
    """Why an item cannot take part in a transaction."""
    what = f"the item is {size} bytes" if size is not None else "the item is too large"
    return (
        f"{what}: in a transaction it must also hold its lock and flags ({PROTOCOL_OVERHEAD} "
        f"bytes at most) within the {MAX_ITEM_BYTES}-byte DynamoDB limit (docs/limits.md: items "
        "within about 80 bytes of 400 KB); write it natively instead"
    )


def update_shape(req: Request) -> tuple[Any, ...] | None:
    """What DynamoDB's checks of an update's UpdateExpression that do not read the item
    depend on (syntax, overlapping paths, key attributes, operand types): the expression,
    its names, and each value's type; None for a request without one."""
    update = req.params.get("UpdateExpression")
    if req.op != "update" or not update:
        return None
    names = req.params.get("ExpressionAttributeNames") or {}
    values = req.params.get("ExpressionAttributeValues") or {}
    types = tuple(sorted((placeholder, next(iter(v))) for placeholder, v in values.items()))
    return (req.table, update, tuple(sorted(names.items())), types)


def merge_set(update_expression: str, assignments: str) -> str:
    """Add ``assignments`` to the user's SET clause (DynamoDB allows each clause once)."""
    if not update_expression:
        return f"SET {assignments}"
    matches = [m for m in _CLAUSE.finditer(update_expression) if m.group(1).upper() == "SET"]
    if not matches:
        return f"{update_expression} SET {assignments}"
    start = matches[0].end()
    following = [m.start() for m in _CLAUSE.finditer(update_expression) if m.start() > start]
    end = following[0] if following else len(update_expression)
    clause = update_expression[start:end].rstrip()
    return f"{update_expression[:start]}{clause}, {assignments} {update_expression[end:]}".strip()


def used_placeholders(
    names: dict[str, str], values: dict[str, Any], *expressions: str
) -> dict[str, Any]:
    """The placeholder maps, only what ``expressions`` use (DynamoDB rejects unused ones)."""
    tokens = set(_PLACEHOLDER.findall(" ".join(expressions)))
    out: dict[str, Any] = {}
    for param, given in (
        ("ExpressionAttributeNames", names),
        ("ExpressionAttributeValues", values),
    ):
        used = {k: v for k, v in given.items() if k in tokens}
        if used:
            out[param] = used
    return out


def grouped(expression: str) -> str:
    """``expression`` in parentheses, unless one pair already encloses it all (DynamoDB
    refuses redundant parentheses, and boto3's condition builder adds a pair of its own)."""
    text = expression.strip()
    depth = 0
    for position, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            # Expressions hold no string literals, so parentheses always pair up.
            enclosed = position == len(text) - 1 and text.startswith("(")
            return text if enclosed else f"({text})"
    return f"({text})"


def with_user_condition(req: Request, protocol_condition: str) -> str:
    """A protocol condition with the request's own condition ANDed in, if it has one."""
    if not req.condition:
        return protocol_condition
    return f"{grouped(req.condition)} AND {protocol_condition}"
