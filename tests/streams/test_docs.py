"""Every Python example of docs/streams.md runs as written, each on its own, on moto
(``<!-- run: moto-only -->`` blocks need streams, which dynalite lacks)."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest

from ddbtx.local import LocalDynamo

PAGE = Path(__file__).resolve().parents[2] / "docs" / "streams.md"
#: A ```python block, and whether the line before marks it moto-only (with or without a reason).
BLOCK = re.compile(r"^(<!-- run: moto-only(?::[^\n]*?)? -->\n)?```python\n(.*?)^```$", re.S | re.M)


def blocks() -> list[tuple[int, bool, str]]:
    """(line number, moto only, code) of each ```python block of the page."""
    text = PAGE.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start()) + 1, bool(m.group(1)), m.group(2))
        for m in BLOCK.finditer(text)
    ]


def test_given_the_page_then_its_stream_examples_are_marked_moto_only() -> None:
    found = blocks()
    assert [moto_only for _, moto_only, _ in found] == [True, True, False]
    for _, moto_only, code in found:
        assert moto_only == ("StreamReader" in code)


@pytest.fixture
def fresh_tables(stream_backend: LocalDynamo, endpoint_env: LocalDynamo) -> Any:
    """Delete the tables the examples create (fixed names) afterwards."""
    client = endpoint_env.client()
    before = set(client.list_tables()["TableNames"])
    yield
    for name in set(client.list_tables()["TableNames"]) - before:
        client.delete_table(TableName=name)


@pytest.mark.parametrize("index", range(len(blocks())))
def test_given_an_example_when_run_alone_then_it_works_without_warnings(
    fresh_tables: Any, caplog: pytest.LogCaptureFixture, index: int
) -> None:
    # Given one example of the page and a DynamoDB (moto) reached through the environment
    line, _, code = blocks()[index]
    # When it runs in a namespace of its own
    with caplog.at_level(logging.WARNING):
        try:
            exec(compile(code, f"docs/streams.md:{line}", "exec"), {"__name__": "docs"})
        except Exception as exc:
            pytest.fail(f"the example at docs/streams.md:{line} fails: {exc!r}")
    # Then (its own asserts held and) nothing was logged at warning level or above
    assert [r.getMessage() for r in caplog.records] == []
