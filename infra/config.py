"""Deployment options, read from CDK context and checked before anything is built.

Every option is a context key (``cdk deploy -c sweepRateMinutes=10``, or the
``context`` block of ``cdk.json``). Values given with ``-c`` arrive as strings,
values from ``cdk.json`` as JSON, so every parser accepts both.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

AttributeType = Literal["S", "N", "B"]

#: Lambda advanced logging levels that Python's ``logging`` also understands.
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARN", "ERROR")
#: Retention periods CloudWatch Logs accepts (days) that this app offers.
LOG_RETENTION_DAYS: Final = (1, 3, 5, 7, 14, 30, 60, 90, 180, 365)

# One source of truth for the context key names: docs/operations.md and the tests use them.
KEY_STACK_NAME: Final = "stackName"
KEY_THROWAWAY: Final = "throwaway"
KEY_CREATE_KEY: Final = "customerManagedKey"
KEY_KEY_ARN: Final = "encryptionKeyArn"
KEY_DATA_TABLE_NAME: Final = "dataTableName"
KEY_DATA_PARTITION_KEY: Final = "dataPartitionKey"
KEY_DATA_SORT_KEY: Final = "dataSortKey"
KEY_DATA_TABLES: Final = "dataTables"
KEY_DATA_TABLES_KEY_ARN: Final = "dataTablesKeyArn"
KEY_SWEEP_RATE: Final = "sweepRateMinutes"
KEY_ROLLBACK_AFTER: Final = "rollbackAfterSeconds"
KEY_DELETE_AFTER: Final = "deleteAfterSeconds"
KEY_PAGE_BUDGET: Final = "sweepPageBudget"
KEY_PAGE_SIZE: Final = "sweepPageSize"
KEY_SAFETY_MARGIN: Final = "sweepSafetyMarginSeconds"
KEY_LOG_LEVEL: Final = "logLevel"
KEY_LOG_RETENTION: Final = "logRetentionDays"
KEY_RESERVE_SWEEPER: Final = "reserveSweeperConcurrency"
KEY_ALARM_EMAIL: Final = "alarmEmail"
KEY_POWERTOOLS_ARN: Final = "powertoolsLayerArn"
KEY_DATA_STREAM: Final = "dataTableStream"
KEY_CONSUMER_CODE: Final = "changeConsumerCode"
KEY_CONSUMER_FUNCTION: Final = "changeConsumerFunction"
CONTEXT_KEYS: Final = (
    KEY_STACK_NAME,
    KEY_THROWAWAY,
    KEY_CREATE_KEY,
    KEY_KEY_ARN,
    KEY_DATA_TABLE_NAME,
    KEY_DATA_PARTITION_KEY,
    KEY_DATA_SORT_KEY,
    KEY_DATA_TABLES,
    KEY_DATA_TABLES_KEY_ARN,
    KEY_SWEEP_RATE,
    KEY_ROLLBACK_AFTER,
    KEY_DELETE_AFTER,
    KEY_PAGE_BUDGET,
    KEY_PAGE_SIZE,
    KEY_SAFETY_MARGIN,
    KEY_LOG_LEVEL,
    KEY_LOG_RETENTION,
    KEY_RESERVE_SWEEPER,
    KEY_ALARM_EMAIL,
    KEY_POWERTOOLS_ARN,
    KEY_DATA_STREAM,
    KEY_CONSUMER_CODE,
    KEY_CONSUMER_FUNCTION,
)

_NAME = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")  # DynamoDB table name rules
_KMS_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+$")
_LAYER_ARN = re.compile(r"^arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:layer:[A-Za-z0-9_-]+:\d+$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_FUNCTION_SPEC = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
#: Where a relative ``changeConsumerCode`` is found: the project directory (``app.py``'s).
PROJECT_DIR: Final = Path(__file__).resolve().parent.parent

_T = TypeVar("_T")


class ContextError(ValueError):
    """Unusable context values: ``problems`` holds one message per bad key (or clash),
    and the exception's text is all of them on one line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("bad CDK context: " + "; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class KeyAttribute:
    """One attribute of a table's primary key."""

    name: str
    type: AttributeType = "S"


@dataclass(frozen=True)
class DeployConfig:
    """Everything the stack needs to know that is not a fixed protocol constant.

    Examples
    --------
    >>> cfg = DeployConfig.from_context({"sweepRateMinutes": "10", "throwaway": "true"})
    >>> (cfg.sweep_rate_minutes, cfg.retain)
    (10, False)
    """

    stack_name: str = "ddbtx"
    retain: bool = True
    create_key: bool = False
    key_arn: str | None = None
    data_table_name: str | None = None
    data_partition_key: KeyAttribute = KeyAttribute("pk")
    data_sort_key: KeyAttribute | None = None
    data_tables: tuple[str, ...] = ()
    data_tables_key_arn: str | None = None
    sweep_rate_minutes: int = 5
    rollback_after_seconds: int = 60
    delete_after_seconds: int = 86_400
    sweep_page_budget: int = 50
    sweep_page_size: int = 100
    #: Seconds before a janitor's timeout at which a sweep stops taking new work.
    sweep_safety_margin_seconds: int = 20
    log_level: str = "INFO"
    log_retention_days: int = 30
    reserve_sweeper_concurrency: bool = True
    alarm_email: str | None = None
    powertools_layer_arn: str | None = None
    #: A NEW_AND_OLD_IMAGES stream on the data table this stack creates.
    data_table_stream: bool = False
    #: Directory of a user's function that gets the table's committed changes (absolute).
    change_consumer_code: Path | None = None
    #: ``module:function`` in that directory, called once per committed change.
    change_consumer_function: str = "consumer:on_change"

    @property
    def imports_data_tables(self) -> bool:
        """True when the janitors serve existing tables instead of a table this stack owns."""
        return bool(self.data_tables)

    @property
    def uses_customer_managed_key(self) -> bool:
        """True when the stack's tables are encrypted with a customer-managed KMS key."""
        return self.create_key or self.key_arn is not None

    @classmethod
    def from_context(cls, context: Mapping[str, Any]) -> DeployConfig:
        """Build the configuration from CDK context values.

        Parameters
        ----------
        context
            Context key to value; missing keys take the defaults above.

        Raises
        ------
        ContextError
            Naming every context key whose value is unusable and every two keys that
            contradict each other, all at once.

        Examples
        --------
        >>> DeployConfig.from_context({"dataTables": "orders,customers"}).data_tables
        ('orders', 'customers')
        """
        d = cls()
        get = _Reader(context)
        get.problems.extend(_unknown_keys(context))
        data_tables = get(KEY_DATA_TABLES, _parse_names, d.data_tables)
        key_arn = get(KEY_KEY_ARN, _pattern(_KMS_KEY_ARN, "a KMS key ARN"), None)
        create_key = get(KEY_CREATE_KEY, _parse_bool, d.create_key)
        describes_own_table = any(
            context.get(key) not in (None, "")
            for key in (KEY_DATA_TABLE_NAME, KEY_DATA_PARTITION_KEY, KEY_DATA_SORT_KEY)
        )
        if data_tables and describes_own_table:
            get.problems.append(
                f"context {KEY_DATA_TABLES!r} imports existing tables, so "
                f"{KEY_DATA_TABLE_NAME!r}/{KEY_DATA_PARTITION_KEY!r}/{KEY_DATA_SORT_KEY!r} "
                "(which describe a table this stack creates) cannot be set with it"
            )
        if create_key and key_arn:
            get.problems.append(
                f"context {KEY_CREATE_KEY!r} creates a key and {KEY_KEY_ARN!r} names one: "
                "set only one of them"
            )
        partition_key = get(KEY_DATA_PARTITION_KEY, _parse_key_attribute, d.data_partition_key)
        sort_key = get(KEY_DATA_SORT_KEY, _parse_key_attribute, None)
        if sort_key is not None and sort_key.name == partition_key.name:
            get.problems.append(
                f"context {KEY_DATA_SORT_KEY!r} must differ from {KEY_DATA_PARTITION_KEY!r} "
                f"(both are {sort_key.name!r})"
            )
        config = cls(
            stack_name=get(KEY_STACK_NAME, _parse_stack_name, d.stack_name),
            retain=not get(KEY_THROWAWAY, _parse_bool, False),
            create_key=create_key,
            key_arn=key_arn,
            data_table_name=get(KEY_DATA_TABLE_NAME, _parse_table_name, None),
            data_partition_key=partition_key,
            data_sort_key=sort_key,
            data_tables=data_tables,
            data_tables_key_arn=get(
                KEY_DATA_TABLES_KEY_ARN, _pattern(_KMS_KEY_ARN, "a KMS key ARN"), None
            ),
            sweep_rate_minutes=get(KEY_SWEEP_RATE, _int_between(1, 1440), d.sweep_rate_minutes),
            rollback_after_seconds=get(
                KEY_ROLLBACK_AFTER, _int_between(1, 7 * 86_400), d.rollback_after_seconds
            ),
            delete_after_seconds=get(
                KEY_DELETE_AFTER, _int_between(60, 365 * 86_400), d.delete_after_seconds
            ),
            sweep_page_budget=get(KEY_PAGE_BUDGET, _int_between(1, 10_000), d.sweep_page_budget),
            # A Query or Scan page holds at most 1 MB whatever its Limit; 1,000 keeps pages small.
            sweep_page_size=get(KEY_PAGE_SIZE, _int_between(1, 1_000), d.sweep_page_size),
            # Both janitors sweep, and the recovery function runs for at most 60 s:
            # a larger margin would leave its sweeps no time at all.
            sweep_safety_margin_seconds=get(
                KEY_SAFETY_MARGIN, _int_between(1, 50), d.sweep_safety_margin_seconds
            ),
            log_level=get(KEY_LOG_LEVEL, _parse_log_level, d.log_level),
            log_retention_days=get(KEY_LOG_RETENTION, _parse_retention, d.log_retention_days),
            reserve_sweeper_concurrency=get(
                KEY_RESERVE_SWEEPER, _parse_bool, d.reserve_sweeper_concurrency
            ),
            alarm_email=get(KEY_ALARM_EMAIL, _pattern(_EMAIL, "an email address"), None),
            powertools_layer_arn=get(
                KEY_POWERTOOLS_ARN, _pattern(_LAYER_ARN, "a Lambda layer version ARN"), None
            ),
            data_table_stream=get(KEY_DATA_STREAM, _parse_bool, d.data_table_stream),
            change_consumer_code=get(KEY_CONSUMER_CODE, _parse_directory, None),
            change_consumer_function=get(
                KEY_CONSUMER_FUNCTION,
                _pattern(_FUNCTION_SPEC, "'module:function' (a Python module and function)"),
                d.change_consumer_function,
            ),
        )
        function_ok = not any(repr(KEY_CONSUMER_FUNCTION) in p for p in get.problems)
        get.problems.extend(_stream_problems(config, context, check_module=function_ok))
        if get.problems:
            raise ContextError(get.problems)
        return config


#: What an option's key looks like; CDK's own keys have ``:``, ``/`` or ``@`` in them.
_OPTION_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


def _unknown_keys(context: Mapping[str, Any]) -> list[str]:
    """A problem for each key that looks like an option of this app but is none: CDK
    passes any ``-c key=value`` through, so a misspelt key (``throwAway``) would
    otherwise be ignored without a word and its default deployed."""
    known = {key.lower(): key for key in CONTEXT_KEYS}
    problems = []
    for key in context:
        if key in CONTEXT_KEYS or not _OPTION_LIKE.match(key):
            continue
        guess = known.get(key.lower()) or next(
            iter(difflib.get_close_matches(key, CONTEXT_KEYS, n=1)), None
        )
        hint = f" (did you mean {guess!r}?)" if guess else ""
        problems.append(f"unknown context key {key!r}{hint}")
    return problems


class _Reader:
    """Reads one context key with a parser; a bad value is noted in ``problems``, naming
    its key, and the default stands in so that every other key is still checked."""

    def __init__(self, context: Mapping[str, Any]) -> None:
        self._context = context
        self.problems: list[str] = []

    def __call__(self, key: str, parse: Callable[[Any], _T], default: _T) -> _T:
        raw = self._context.get(key)
        if raw is None or raw == "":
            return default
        try:
            return parse(raw)
        except ValueError as exc:
            self.problems.append(f"context {key!r}: {exc} (got {raw!r})")
            return default


def _stream_problems(
    config: DeployConfig, context: Mapping[str, Any], *, check_module: bool
) -> list[str]:
    """Stream options that contradict each other or the data table options, and a consumer
    module that is not in the consumer's directory (``check_module``: its name parsed)."""
    problems = []
    if config.data_table_stream and config.imports_data_tables:
        problems.append(
            f"context {KEY_DATA_STREAM!r} turns on the stream of the data table this stack "
            f"creates; the tables {KEY_DATA_TABLES!r} imports keep the stream settings they "
            "are deployed with"
        )
    given = [
        key
        for key in (KEY_CONSUMER_CODE, KEY_CONSUMER_FUNCTION)
        if context.get(key) not in (None, "")
    ]
    if given and not config.data_table_stream:
        problems.append(
            f"context {KEY_DATA_STREAM!r} must be true for {'/'.join(map(repr, given))}, "
            "which wire a function to the data table's stream"
        )
    code = config.change_consumer_code
    if code is not None and check_module:
        module = config.change_consumer_function.partition(":")[0].replace(".", "/")
        if not (code / f"{module}.py").is_file() and not (code / module / "__init__.py").is_file():
            problems.append(
                f"context {KEY_CONSUMER_FUNCTION!r}: no module {module!r} in {str(code)!r} "
                f"(from {KEY_CONSUMER_CODE!r})"
            )
    return problems


def _parse_directory(raw: Any) -> Path:
    path = Path(str(raw).strip()).expanduser()
    path = path if path.is_absolute() else PROJECT_DIR / path
    if not path.is_dir():
        raise ValueError(
            f"expected a directory (relative to {str(PROJECT_DIR)!r}): none at {str(path)!r}"
        )
    return path.resolve()


def _parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "yes", "1"):
        return True
    if text in ("false", "no", "0"):
        return False
    raise ValueError("expected true or false")


def _int_between(low: int, high: int) -> Callable[[Any], int]:
    def parse(raw: Any) -> int:
        if isinstance(raw, bool):  # bool is an int subclass; True is not a number of minutes
            raise ValueError("expected an integer")
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise ValueError("expected an integer") from None
        if not low <= value <= high:
            raise ValueError(f"expected an integer from {low} to {high}")
        return value

    return parse


def _pattern(regex: re.Pattern[str], what: str) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        text = str(raw).strip()
        if not regex.match(text):
            raise ValueError(f"expected {what}")
        return text

    return parse


def _parse_table_name(raw: Any) -> str:
    return _pattern(_NAME, "a DynamoDB table name (3-255 of A-Z a-z 0-9 _ . -)")(raw)


def _parse_names(raw: Any) -> tuple[str, ...]:
    items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
    names = tuple(_parse_table_name(item) for item in (str(i).strip() for i in items) if item)
    if len(set(names)) != len(names):
        raise ValueError("expected distinct table names")
    return names


def _parse_key_attribute(raw: Any) -> KeyAttribute:
    name, _, kind = str(raw).strip().partition(":")
    kind = kind or "S"
    if not name or len(name) > 255:
        raise ValueError("expected an attribute name, optionally followed by :S, :N or :B")
    if kind not in ("S", "N", "B"):
        raise ValueError("the attribute type after ':' must be S, N or B")
    return KeyAttribute(name, kind)  # type: ignore[arg-type]  # checked against the Literal above


def _parse_stack_name(raw: Any) -> str:
    text = str(raw).strip()
    if not re.match(r"^[A-Za-z][A-Za-z0-9-]{0,127}$", text):
        raise ValueError("expected a CloudFormation stack name (letter, then letters, digits, -)")
    return text


def _parse_log_level(raw: Any) -> str:
    text = str(raw).strip().upper()
    if text not in LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}")
    return text


def _parse_retention(raw: Any) -> int:
    value = _int_between(1, 3653)(raw)
    if value not in LOG_RETENTION_DAYS:
        raise ValueError(f"expected one of {', '.join(map(str, LOG_RETENTION_DAYS))}")
    return value
