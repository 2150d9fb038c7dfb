"""Every Python example in the README runs as written, on both emulators.

The ``python`` code blocks are taken from README.md in order and run one after
the other in one namespace, as a reader pasting them into one session would,
with boto3 pointed at the emulator only through the environment (the examples
call ``boto3.client("dynamodb")`` as they would against AWS). A block that
raises, or a warning logged while they run, fails the test.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest

from ddbtx.local import LocalDynamo

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, code) of each ```python block."""
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in BLOCK.finditer(text)]


def test_given_the_readme_then_its_python_blocks_are_found() -> None:
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 6
    assert all(code.strip() for _, code in blocks)


@pytest.fixture
def readme_tables(endpoint_env: LocalDynamo) -> Any:
    """Delete the tables the examples create (they use fixed names) after the test."""
    client = endpoint_env.client()
    before = set(client.list_tables()["TableNames"])
    yield
    for name in set(client.list_tables()["TableNames"]) - before:
        client.delete_table(TableName=name)


def test_given_the_readme_when_its_examples_run_in_order_then_each_works_without_warnings(
    endpoint_env: LocalDynamo,
    readme_tables: Any,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given the README's Python examples and a DynamoDB reached through the environment
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    namespace: dict[str, Any] = {"__name__": "readme"}

    # When each runs in turn, as written
    with caplog.at_level(logging.WARNING):
        for line, code in blocks:
            try:
                exec(compile(code, f"README.md:{line}", "exec"), namespace)
            except Exception as exc:
                pytest.fail(f"the README example at line {line} fails: {exc!r}")

    # Then nothing was logged at warning level or above (a too-small connection pool...)
    assert [r.getMessage() for r in caplog.records] == []
    # And the examples did what they say: alice paid bob, the sweep completed
    assert "billing invoice-42" in capsys.readouterr().out
    assert namespace["report"].complete
    bob = namespace["tm"].get_item(TableName="Accounts", Key={"id": {"S": "bob"}})
    assert bob["Item"]["balance"] == {"N": "10"}
