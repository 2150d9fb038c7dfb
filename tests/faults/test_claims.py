"""The claims table: docs/isolation.md shows it as it is, and the checker holds each row to it.

For each row the checker is run on hand-made histories in which a reader
labelled by that row takes part in each anomaly a reader can take part in:
the anomaly is reported where the row excludes it and not where it allows it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .claims import ANOMALIES, CLAIMS, Claim, claim_for, isolation_of, table
from .history import FAIL, OK, Txn, append, check, read

DOC = Path(__file__).resolve().parents[2] / "docs" / "isolation.md"


def test_given_the_claims_then_docs_isolation_shows_exactly_that_table() -> None:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("<!-- claims:start -->\n") + len("<!-- claims:start -->\n")
    end = text.index("<!-- claims:end -->")
    assert text[start:end].strip() == table()


def planted(kind: str, label: str) -> tuple[list[Txn], dict[str, tuple[int, ...]] | None]:
    """A history in which reader 9 (labelled ``label``) takes part in ``kind``."""
    if kind == "G1a":  # reads an append of a transaction that rolled back
        return [Txn(1, [append("x", 1)], FAIL), Txn(9, [read("x", [1])], OK, label)], None
    if kind == "G1b":  # reads a version its writer then wrote over
        history = [
            Txn(1, [append("x", 1), append("x", 2)], OK),
            Txn(9, [read("x", [1])], OK, label),
        ]
        return history, {"x": (1, 2)}
    if kind == "G-single":  # read skew: one of a transaction's writes, not the other
        history = [
            Txn(1, [append("x", 1), append("y", 2)], OK),
            Txn(9, [read("x", [1]), read("y", [])], OK, label),
        ]
        return history, {"x": (1,), "y": (2,)}
    if kind == "G2":  # a read-only anomaly (Fekete et al.): two anti-dependencies
        history = [
            Txn(1, [read("x", []), append("y", 1)], OK),
            Txn(2, [append("x", 2)], OK),
            Txn(9, [read("x", [2]), read("y", [])], OK, label),
        ]
        return history, {"x": (2,), "y": (1,)}
    raise ValueError(kind)


#: What a reader can take part in. G0 and G1c need the reader to write: the writers'
#: own (always serializable) transactions are checked for them in every history.
READER_ANOMALIES = ("G1a", "G1b", "G-single", "G2")


@pytest.mark.parametrize("claim", [c for c in CLAIMS if c.checked], ids=lambda c: c.level)
@pytest.mark.parametrize("kind", READER_ANOMALIES)
def test_given_each_anomaly_planted_under_a_rows_label_then_it_is_found_iff_excluded(
    claim: Claim, kind: str
) -> None:
    # Given a reader labelled by this row in a history with the anomaly
    history, final = planted(kind, isolation_of(claim.apis[0], claim.level))
    # When checked
    found = {a.kind for a in check(history, final)}
    # Then the anomaly is reported exactly when the row excludes it
    assert (kind in found) == (kind in claim.excludes), found
    assert found <= {kind, "G1b", "G-single"}  # an intermediate read also closes a cycle


def test_given_each_api_and_level_then_one_claim_covers_it() -> None:
    assert claim_for("tm.scan_pages", "serializable").level == "SERIALIZABLE"
    assert claim_for("tm.get_item", "committed").excludes == ("G0", "G1a", "G1b", "G1c")
    assert set(ANOMALIES) == set(claim_for("tx.scan", "in a transaction").excludes)
    with pytest.raises(KeyError):
        claim_for("tm.get_item", "linearizable")
