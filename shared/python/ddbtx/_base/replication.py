"""How a table is replicated, read from its ``DescribeTable`` answer (issue 35): a
single-Region table, a multi-Region strongly consistent (MRSC) global table, or a
multi-Region eventually consistent (MREC) one. No I/O: the caller brings the answer.

What ddbtx does with each (docs/global-tables.md): a single-Region table as always; on
MRSC no ``TransactWriteItems``, ``TransactGetItems`` or TTL (DynamoDB refuses them there);
MREC only from its home Region, since conditions and strong reads see one Region's copy.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import GlobalTableError
from .effects import Step, request


class Mode(enum.Enum):
    """A table's replication."""

    SINGLE = "single-Region"
    #: ``MultiRegionConsistency`` ``STRONG``.
    MRSC = "MRSC"
    #: ``MultiRegionConsistency`` ``EVENTUAL``, or a global table that does not say
    #: (tables made before the field existed are eventually consistent).
    MREC = "MREC"


@dataclass(frozen=True)
class Replication:
    """A table's replication mode and the Regions it is in (its own first)."""

    table: str
    mode: Mode
    #: The Region the description came from, then the other replicas' Regions.
    regions: tuple[str, ...] = ()
    witnesses: tuple[str, ...] = ()

    @property
    def serves_transactions(self) -> bool:
        """Whether DynamoDB serves ``TransactWriteItems``/``TransactGetItems`` on it."""
        return self.mode is not Mode.MRSC

    @property
    def serves_ttl(self) -> bool:
        """Whether DynamoDB's TTL may delete its items (not on MRSC)."""
        return self.mode is not Mode.MRSC


def replication_of(description: Mapping[str, Any], region: str | None = None) -> Replication:
    """The replication of the table ``description`` (``DescribeTable``'s ``Table``) describes,
    as seen from ``region`` (the client's).

    Examples
    --------
    >>> replication_of({"TableName": "t", "Replicas": [{"RegionName": "us-east-1"}],
    ...                 "MultiRegionConsistency": "STRONG"}, "us-east-2").mode
    <Mode.MRSC: 'MRSC'>
    """
    table = str(description.get("TableName", ""))
    replicas = [
        str(r["RegionName"])
        for r in description.get("Replicas") or ()
        if isinstance(r, Mapping) and r.get("RegionName")
    ]
    witnesses = tuple(
        str(w["RegionName"])
        for w in description.get("GlobalTableWitnesses") or ()
        if isinstance(w, Mapping) and w.get("RegionName")
    )
    consistency = description.get("MultiRegionConsistency")
    if not replicas and not witnesses:
        return Replication(table, Mode.SINGLE, (region,) if region else ())
    # A description may or may not list the answering Region among its replicas.
    regions = tuple(dict.fromkeys([*([region] if region else []), *replicas]))
    mode = Mode.MRSC if consistency == "STRONG" else Mode.MREC
    return Replication(table, mode, regions, witnesses)


def writable_here(
    replication: Replication, region: str | None, home: str | None
) -> GlobalTableError | None:
    """Why ddbtx may not write ``replication``'s table from ``region`` (None: it may).

    An MREC table is written only from its ``home`` Region: conditions and strong reads see
    one Region's copy, so locks taken in two Regions could both succeed.
    """
    if replication.mode is not Mode.MREC:
        return None
    table = replication.table
    if home is None:
        return GlobalTableError(
            f"table {table!r} is an MREC global table (multi-Region eventual consistency, "
            f"replicas in {', '.join(replication.regions)}): conditional writes there see only "
            "one Region's copy, so two Regions could both lock an item. Use an MRSC table, "
            f"or write it from one Region only: TransactionManager(..., "
            f"home_region={{{table!r}: '<Region>'}}) with a client in that Region",
            table=table,
            mode=replication.mode.value,
            region=region,
        )
    if region != home:
        return GlobalTableError(
            f"table {table!r} is an MREC global table whose home Region is {home}; this "
            f"client is in {region}, so ddbtx writes nothing to it from here (a lock taken "
            f"here could succeed alongside one taken in {home}). Use a client in {home}",
            table=table,
            mode=replication.mode.value,
            region=region,
        )
    return None


class Replications:
    """Each table's replication, read once (``DescribeTable``) and kept, and whether this
    client's Region may write it.

    ``home`` is one home Region for every MREC table, or one per table name.
    """

    def __init__(self, region: str | None, home: str | Mapping[str, str] | None = None) -> None:
        self.region = region
        self._home = home
        self._known: dict[str, Replication] = {}

    def home_of(self, table: str) -> str | None:
        if isinstance(self._home, Mapping):
            return self._home.get(table)
        return self._home

    def of(self, table: str) -> Step[Replication]:
        """The step of ``table``'s replication (no request once known)."""
        known = self._known.get(table)
        if known is None:
            response = yield from request("describe_table", TableName=table)
            known = self._known[table] = replication_of(response["Table"], self.region)
        return known

    def learn(self, description: Mapping[str, Any]) -> Replication:
        """Keep the replication a ``DescribeTable`` answer made for another reason shows."""
        found = replication_of(description, self.region)
        self._known[found.table] = found
        return found

    def writable(self, table: str) -> Step[Replication]:
        """``table``'s replication, or :class:`GlobalTableError` if this Region may not
        write it (raised before any write)."""
        found = yield from self.of(table)
        refusal = writable_here(found, self.region, self.home_of(table))
        if refusal is not None:
            raise refusal
        return found
