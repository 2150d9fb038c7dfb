"""Every Python example in the README and the guides in docs/ runs as written, on both emulators.

Each page's ``python`` code blocks run one after the other in one namespace, as a reader
pasting them into one session would; every page starts afresh, so each defines its own
client. boto3 reaches the emulator only through the environment (the examples call
``boto3.client("dynamodb")`` as they would against AWS). A block that raises, a warning
logged while a page runs, or a lock client the page leaves open fails the test.

The line before a block may say how it runs (docs/about.md):
``<!-- run: moto-only: <reason> -->`` runs it on moto only, and
``<!-- run: no: <reason> -->`` does not run it; either way the reason is shown in a skip.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ddbtx.local import LocalDynamo
from ddbtx.locks import LockClient

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(
    r"^(?:<!-- run: (?P<mode>[a-z-]+)(?::\s*(?P<reason>.*?))? -->\n)?```python\n(?P<code>.*?)^```$",
    re.S | re.M,
)
MODES = ("moto-only", "no")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    code: str
    mode: str | None
    reason: str | None


def python_blocks(path: Path) -> list[Block]:
    """Each ```python block of ``path`` with the run marker on the line before it, if any."""
    text = path.read_text(encoding="utf-8")
    name = str(path.relative_to(ROOT))
    return [
        Block(name, text.count("\n", 0, m.start("code")) + 1, m["code"], m["mode"], m["reason"])
        for m in BLOCK.finditer(text)
    ]


PAGES_WITH_CODE = [p for p in PAGES if python_blocks(p)]
MARKED = [b for p in PAGES for b in python_blocks(p) if b.mode is not None]


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def bob(namespace: dict[str, Any]) -> Any:
    return namespace["tm"].table("Accounts").get_item(Key={"id": "bob"})["Item"]["balance"]


#: What each page's examples must have done, beyond running without an error.
EXPECTED: dict[str, Callable[[dict[str, Any], str], bool]] = {
    "README.md": lambda ns, out: bob(ns) == 6 and "billing invoice-42" in out,
    # Its own example checks bob's balance; on moto the page then stops its emulator.
    "docs/getting-started.md": lambda ns, out: ns["accounts"].name == "Accounts",
    "docs/transactions.md": lambda ns, out: bob(ns) == 10 and "then AlreadyCommitted" in out,
    "docs/locks.md": lambda ns, out: "billing invoice-42" in out and "updating Moe" in out,
    "docs/operations.md": lambda ns, out: ns["report"].exhausted is True,
}


def test_given_the_docs_then_their_python_blocks_and_markers_are_found() -> None:
    # Given the README and the pages
    # Then the README and the guides hold examples, each with code
    names = {page_id(p) for p in PAGES_WITH_CODE}
    assert {"README.md", "docs/transactions.md", "docs/locks.md", "docs/operations.md"} <= names
    assert all(b.code.strip() for p in PAGES_WITH_CODE for b in python_blocks(p))
    # And every marker is a known one and gives its reason
    assert all(b.mode in MODES and b.reason for b in MARKED), MARKED
    # And every page whose examples run has its outcome checked
    assert set(EXPECTED) <= names


@pytest.fixture
def docs_tables(endpoint_env: LocalDynamo) -> Iterator[None]:
    """Delete the tables the examples create (they use fixed names) after the test."""
    client = endpoint_env.client()
    before = set(client.list_tables()["TableNames"])
    yield
    for name in set(client.list_tables()["TableNames"]) - before:
        client.delete_table(TableName=name)


def run_page(path: Path, backend: str) -> dict[str, Any]:
    """Run the page's blocks in order in one namespace (as ``backend`` allows); return it."""
    namespace: dict[str, Any] = {"__name__": "docs"}
    for block in python_blocks(path):
        if block.mode == "no" or (block.mode == "moto-only" and backend != "moto"):
            continue  # shown as a skip by test_docs_block_not_run
        try:
            exec(compile(block.code, f"{block.page}:{block.line}", "exec"), namespace)
        except Exception as exc:
            pytest.fail(f"the example at {block.page}:{block.line} fails: {exc!r}")
    return namespace


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=page_id)
def test_given_a_page_when_its_examples_run_in_order_then_each_works_without_warnings(
    page: Path,
    endpoint_env: LocalDynamo,
    docs_tables: None,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a page's Python examples and a DynamoDB reached through the environment
    # When each runs in turn, as written
    with caplog.at_level(logging.WARNING):
        namespace = run_page(page, endpoint_env.kind)

    # Then nothing was logged at warning level or above (a too-small connection pool...)
    assert [r.getMessage() for r in caplog.records] == []
    # And every lock client the page made is closed (its heartbeat thread stopped)
    assert not [v for v in namespace.values() if isinstance(v, LockClient) and not v.closed]
    # And the examples did what they say
    check = EXPECTED.get(page_id(page))
    assert check is None or check(namespace, capsys.readouterr().out)


@pytest.mark.parametrize(
    ("block", "backend_name"),
    [(b, "dynalite") for b in MARKED if b.mode == "moto-only"]
    + [(b, "any") for b in MARKED if b.mode == "no"],
    ids=lambda v: f"{v.page}:{v.line}" if isinstance(v, Block) else v,
)
def test_docs_block_not_run(block: Block, backend_name: str) -> None:
    """One skip per block a page's test leaves out, with the page's reason."""
    pytest.skip(f"{block.page}:{block.line} not run on {backend_name}: {block.reason}")


def test_given_no_aws_settings_when_the_getting_started_recipe_runs_then_its_examples_work(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given a shell with no AWS region, credentials, endpoint or profile at all (each
    # variable set, then removed: monkeypatch then also undoes what the recipe sets)
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_ACCESS_KEY_ID",
                 "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
                 "AWS_ENDPOINT_URL_DYNAMODB"):  # fmt: skip
        monkeypatch.setenv(name, "-")
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    # When the getting-started page runs as written: its recipe starts the embedded
    # DynamoDB and sets the variables it names, and the first transaction follows
    namespace = run_page(ROOT / "docs" / "getting-started.md", "moto")

    # Then the first transaction (which checks its own outcome) ran on the recipe's
    # embedded DynamoDB, reached through the variables the page sets
    assert namespace["client"].meta.endpoint_url == namespace["db"].endpoint_url
    assert namespace["accounts"].name == "Accounts"


def tables(path: Path) -> list[tuple[int, list[str]]]:
    """(first line, rows) of each run of table lines outside code fences."""
    runs: list[tuple[int, list[str]]] = []
    fenced, previous_was_row = False, False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        is_row = not fenced and line.startswith("|")
        if is_row and previous_was_row:
            runs[-1][1].append(line)
        elif is_row:
            runs.append((number, [line]))
        previous_was_row = is_row
    return runs


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_given_a_page_then_every_table_starts_with_a_header_and_its_delimiter_row(
    page: Path,
) -> None:
    # Given every table of the page (a paragraph inside one splits it in two)
    # Then each has a header row, then a delimiter row, then at least one row
    broken = [
        f"{page_id(page)}:{line}"
        for line, rows in tables(page)
        if len(rows) < 3 or not re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", rows[1].replace(" ", ""))
    ]
    assert broken == []
