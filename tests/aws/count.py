"""pytest plugin (``-p aws.count``): count every DynamoDB API call the session makes.

Registered on boto3's default session before any test runs, so every client
made with ``boto3.client`` afterwards carries it. At the end the count is written
to the file named by ``DDBTX_REQUEST_COUNT_FILE`` (JSON: calls by operation).
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from typing import Any

import pytest

COUNT_FILE_VARIABLE = "DDBTX_REQUEST_COUNT_FILE"
_counts: Counter[str] = Counter()
_lock = threading.Lock()


def _on_call(model: Any, **_: Any) -> None:
    with _lock:
        _counts[model.name] += 1


def pytest_configure(config: pytest.Config) -> None:
    import boto3

    boto3.setup_default_session()
    boto3.DEFAULT_SESSION.events.register("before-call.dynamodb", _on_call)  # type: ignore[union-attr]


def pytest_unconfigure(config: pytest.Config) -> None:
    path = os.environ.get(COUNT_FILE_VARIABLE)
    if path:
        with open(path, "w") as out:
            json.dump(dict(_counts), out)
