"""ddbtx reads a table's replication from ``DescribeTable`` (issue 35, item 1): through the
Region model, on both emulators, and from answers the model does not give."""

from __future__ import annotations

from typing import Any

import pytest

from ddbtx._base.drive import drive
from ddbtx._base.replication import Mode, Replications, replication_of
from ddbtx.errors import GlobalTableError

from .model import REGIONS, GlobalTable, Regions

EAST2, EAST1, WEST2 = REGIONS


@pytest.mark.parametrize(
    ("made", "mode"),
    [
        (GlobalTable("MRSC"), Mode.MRSC),
        (GlobalTable("MREC", witness=None), Mode.MREC),
        (None, Mode.SINGLE),
    ],
    ids=["mrsc", "mrec", "single"],
)
def test_given_a_table_when_its_description_is_read_in_a_region_then_the_mode_is_known(
    regions: Regions, data_table: str, made: GlobalTable | None, mode: Mode
) -> None:
    # Given the data table made global (or not)
    if made is not None:
        regions.world.tables[data_table] = made
    # When ddbtx reads its description in us-east-1
    described = regions[EAST1].client().describe_table(TableName=data_table)["Table"]
    found = replication_of(described, EAST1)
    # Then it knows the mode, its own Region first, and what DynamoDB serves there
    assert found.mode is mode and found.table == data_table
    assert found.regions == ((EAST1, EAST2) if made else (EAST1,))
    assert found.witnesses == ((WEST2,) if mode is Mode.MRSC else ())
    assert found.serves_transactions is found.serves_ttl is (mode is not Mode.MRSC)


@pytest.mark.parametrize(
    ("description", "mode", "regions"),
    [
        # a description that lists the answering Region among its replicas
        (
            {
                "Replicas": [{"RegionName": EAST1}, {"RegionName": EAST2}],
                "MultiRegionConsistency": "STRONG",
            },
            Mode.MRSC,
            (EAST1, EAST2),
        ),
        # a global table older than the field: eventually consistent
        ({"Replicas": [{"RegionName": EAST2}]}, Mode.MREC, (EAST1, EAST2)),
        # an empty replica list is a single-Region table
        ({"Replicas": []}, Mode.SINGLE, (EAST1,)),
    ],
    ids=["lists-itself", "no-consistency-field", "empty-replicas"],
)
def test_given_answers_the_model_does_not_give_then_the_mode_is_still_right(
    description: dict[str, Any], mode: Mode, regions: tuple[str, ...]
) -> None:
    found = replication_of({"TableName": "t", **description}, EAST1)
    assert (found.mode, found.regions) == (mode, regions)


@pytest.fixture
def mrec(regions: Regions, data_table: str) -> str:
    regions.world.tables[data_table] = GlobalTable("MREC", witness=None)
    return data_table


def writable(regions: Regions, region: str, table: str, home: Any) -> Any:
    """``Replications.writable`` driven on a client in ``region``."""
    client = regions[region].client()
    return drive(Replications(region, home).writable(table), client)


@pytest.mark.parametrize("home", [None, {"other": EAST2}], ids=["no-home", "home-of-another"])
def test_given_an_mrec_table_without_a_home_region_then_writing_is_refused_and_says_why(
    regions: Regions, mrec: str, home: Any
) -> None:
    # When ddbtx asks whether us-east-1 may write an MREC table with no home Region
    with pytest.raises(GlobalTableError) as refused:
        writable(regions, EAST1, mrec, home)
    # Then it may not, and the error names the table, the mode and what to do
    error = refused.value
    assert (error.table, error.mode, error.region) == (mrec, "MREC", EAST1)
    assert mrec in str(error) and "home_region" in str(error) and "MRSC" in str(error)


def test_given_an_mrec_table_with_a_home_region_then_only_that_region_writes(
    regions: Regions, mrec: str
) -> None:
    # Given us-east-2 as the table's home Region
    home = {mrec: EAST2}
    # Then us-east-2 may write it, and us-east-1 is refused, told where to write from
    assert writable(regions, EAST2, mrec, home).mode is Mode.MREC
    with pytest.raises(GlobalTableError, match=f"home Region is {EAST2}"):
        writable(regions, EAST1, mrec, home)


@pytest.mark.parametrize("made", [GlobalTable("MRSC"), None], ids=["mrsc", "single"])
def test_given_an_mrsc_or_single_region_table_then_every_region_may_write_it(
    regions: Regions, data_table: str, made: GlobalTable | None
) -> None:
    if made is not None:
        regions.world.tables[data_table] = made
    for region in (EAST2, EAST1):
        assert writable(regions, region, data_table, None).table == data_table
