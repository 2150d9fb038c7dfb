"""A ready Lambda handler that calls ``DDBTX_ON_CHANGE`` once per committed change.

Examples
--------
>>> # consumer.py, next to nothing else in the function's code directory
>>> def on_change(change):                                    # doctest: +SKIP
...     search.index(change.table, change.key, change.new)   # or delete on REMOVE
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any, Final

from .streams import Change, record_handler

__all__ = ["ON_CHANGE_ENV", "handler", "load_on_change"]

logger = logging.getLogger(__name__)

#: Names the user's function, ``module:function``; the module is imported from the code path.
ON_CHANGE_ENV: Final = "DDBTX_ON_CHANGE"

_loaded: dict[str, Callable[[Change], None]] = {}


def load_on_change(spec: str) -> Callable[[Change], None]:
    """Import the function ``spec`` names (``package.module:function``).

    Raises
    ------
    ValueError
        ``spec`` is not ``module:function``, or names nothing callable, saying which.

    Examples
    --------
    >>> load_on_change("json:dumps")  # doctest: +ELLIPSIS
    <function dumps at ...>
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"{ON_CHANGE_ENV}={spec!r}: expected 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{ON_CHANGE_ENV}={spec!r}: cannot import {module_name!r}: {exc}") from exc
    function = getattr(module, attribute, None)
    if not callable(function):
        raise ValueError(f"{ON_CHANGE_ENV}={spec!r}: {module_name} has no function {attribute!r}")
    on_change: Callable[[Change], None] = function
    return on_change


def handler(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """The Lambda handler: committed changes to ``$DDBTX_ON_CHANGE``, failures reported per record.

    Returns Lambda's partial batch response (``{"batchItemFailures": [...]}``); the event
    source mapping must have ``ReportBatchItemFailures`` on (the CDK option sets it).
    """
    from aws_lambda_powertools.utilities.batch import (
        BatchProcessor,
        EventType,
        process_partial_response,
    )

    spec = os.environ.get(ON_CHANGE_ENV, "")
    if spec not in _loaded:
        _loaded[spec] = load_on_change(spec)
    response = process_partial_response(
        event=dict(event),
        record_handler=record_handler(_loaded[spec]),
        processor=BatchProcessor(event_type=EventType.DynamoDBStreams),
        context=context,
    )
    return dict(response)
