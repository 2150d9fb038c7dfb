"""``python -m benchmarks.reads`` on a tiny size: committed reads cost the native requests,
plus one BatchGetItem for images kept apart and for an index that cannot show locks."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # benchmarks/ is a top-level package, not installed

from benchmarks import reads  # noqa: E402

from ddbtx.local import LocalDynamo  # noqa: E402


def test_given_each_state_then_committed_reads_cost_what_issue_12_allows(
    ddb: Any, backend: LocalDynamo, table_name: Callable[[str], str]
) -> None:
    # Given 6 items, 2 of them held by a pending transaction in each state
    rows, locking = reads.measure(ddb, backend.kind, 6, 2, table_name)
    extra = {
        (row.state, row.read): {
            op: n - row.native.get(op, 0)
            for op, n in row.committed.items()
            if n != row.native.get(op, 0)
        }
        for row in rows
    }
    keys_only = "Query, index KEYS_ONLY"
    # Then a committed read costs the native requests, except: one BatchGetItem for the
    # base items behind an index that cannot show locks, and one for images kept apart
    # (for the KEYS_ONLY index both, so two)
    for (state, read), more in extra.items():
        expected: dict[str, int] = {}
        if read == keys_only or state == "updated, large":
            expected = {"BatchGetItem": 1}
        if read == keys_only and state == "updated, large":
            expected = {"BatchGetItem": 2}
        assert more == expected, (state, read)
    # And an uncommitted read never reads an image
    assert all(r.uncommitted == r.native for r in rows if r.read != keys_only)
    # And read locks cost a lock and a release per item, besides the record's writes (its
    # put, its commit and its completion: it is kept, not deleted); a SERIALIZABLE page is
    # read once more once locked, to check it is one snapshot
    assert locking["SERIALIZABLE"] == {"Query": 2, "PutItem": 1, "UpdateItem": 2 * 6 + 2}


def test_given_the_script_on_a_tiny_size_then_it_prints_its_table() -> None:
    lines: list[str] = []
    results = reads.main(["--items", "4", "--locked", "1", "--backend", "moto"], lines.append)
    assert len(results) == 1
    text = "\n".join(lines)
    assert "requests per read of 4 items (1 held by a pending transaction" in text
    assert "SERIALIZABLE: 2 Query + 1 PutItem + 10 UpdateItem" in text
