"""``python -m benchmarks.sweep --stray-locks`` on a tiny size: the indexed table's stray-lock
pass reads each stray lock's index entry and item only; the scan reads every item."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # benchmarks/ is a top-level package, not installed

from benchmarks import stray_locks  # noqa: E402

from ddbtx.local import LocalDynamo  # noqa: E402


def test_given_stray_locks_in_a_larger_table_then_only_the_indexed_pass_reads_just_them(
    ddb: Any, backend: LocalDynamo, table_name: Callable[[str], str]
) -> None:
    # Given 300 items with 3 stray locks, and a janitor allowed 5 pages of 20 per run
    result = stray_locks.measure(ddb, backend.kind, 300, 3, table_name, page_budget=5, page_size=20)

    # Then with the index one run releases them, reading each lock's index entry and item
    assert (result.indexed.runs, result.indexed.released) == (1, 3)
    assert result.indexed.items_read == [2 * 3]
    # And without it the runs scan the table on the page budget until every item was read
    assert result.scanned.released == 3
    # (run 1: the empty images table's page, then 4 data pages; runs 2 and 3: 5 data
    # pages; run 4 the last 20 items; from run 2 on, +1 for the cursor row)
    assert result.scanned.items_read == [80, 1 + 100, 1 + 100, 1 + 20]
    text = stray_locks.report(result)
    assert "6 with the index vs 303 without (50x), in 1 run(s) vs 4" in text


def test_given_the_script_on_a_tiny_size_then_it_prints_its_table() -> None:
    lines: list[str] = []
    results = stray_locks.main(["--items", "40", "--stray", "2", "--backend", "moto"], lines.append)
    assert [(r.kind, r.indexed.released, r.scanned.released) for r in results] == [("moto", 2, 2)]
    assert "data table of 40 items with 2 stray locks" in "\n".join(lines)
