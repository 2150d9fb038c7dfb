"""What each read API at each isolation level claims: the anomalies it excludes.

One table with three uses: docs/isolation.md shows it (a test compares the two
word for word), the history checker labels each recorded read by it (a read
whose claim excludes G-single and G2 is checked with its rw edges, others for
G1 only), and the checker's self-test plants each anomaly under each label.
"""

from __future__ import annotations

from dataclasses import dataclass

from .history import COMMITTED, SERIALIZABLE

ANOMALIES = ("G0", "G1a", "G1b", "G1c", "G-single", "G2")
#: What read committed excludes (Adya's PL-2), and serializability (PL-3).
PL2 = ("G0", "G1a", "G1b", "G1c")
PL3 = ANOMALIES


@dataclass(frozen=True)
class Claim:
    apis: tuple[str, ...]
    level: str
    excludes: tuple[str, ...]
    checked: bool
    note: str


CLAIMS: tuple[Claim, ...] = (
    Claim(
        ("tx.get_item", "tx.batch_get_item"),
        "in a transaction",
        PL3,
        True,
        "each item read-locked until the end (missing items too); the transaction's own"
        " writes seen",
    ),
    Claim(
        ("tx.query", "tx.scan"),
        "in a transaction",
        PL3,
        True,
        "over the items returned, which stay read-locked; an item inserted into the range"
        " later is not seen (a phantom: the range is not locked)",
    ),
    Claim(
        ("tm.get_item", "tm.query", "tm.scan", "tm.batch_get_item"),
        "SERIALIZABLE",
        PL3,
        True,
        "each page one snapshot, serializable with every committed transaction (two pages"
        " of one paged read are two snapshots)",
    ),
    Claim(
        ("tm.get_item", "tm.query", "tm.scan", "tm.batch_get_item"),
        "COMMITTED",
        PL2,
        True,
        "only committed values, never half of an item's transaction on one item; read skew"
        " across items (G-single) and write skew (G2) are possible",
    ),
    Claim(
        ("tm.get_item", "tm.query", "tm.scan", "tm.batch_get_item"),
        "UNCOMMITTED",
        ("G0",),
        False,
        "the items as stored: pending writes, which may roll back (G1a, G1b); G0 is a"
        " property of the writes, checked in every history",
    ),
)


def claim_for(api: str, level: str) -> Claim:
    """The claim covering ``api`` (``tm.scan``; ``tm.scan_pages`` is ``tm.scan``) at ``level``."""
    base = api.removesuffix("_pages")
    for claim in CLAIMS:
        if base in claim.apis and claim.level.lower() == level.lower():
            return claim
    raise KeyError(f"no claim for {api} at {level}")


def isolation_of(api: str, level: str) -> str:
    """The checker's label for a read through ``api`` at ``level``."""
    excludes = claim_for(api, level).excludes
    return SERIALIZABLE if {"G-single", "G2"} <= set(excludes) else COMMITTED


def table() -> str:
    """The claims as the Markdown table docs/isolation.md carries."""
    header = ["read", "level", *ANOMALIES, "checked", "what it means"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for c in CLAIMS:
        cells = [", ".join(f"`{a}`" for a in c.apis), c.level]
        cells += ["excluded" if a in c.excludes else "possible" for a in ANOMALIES]
        cells += ["yes" if c.checked else "no", c.note]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
