"""The multi-Region model itself (``model.py``): each documented behaviour it adds, on both
emulators behind it. The protocol's multi-Region tests rely on these."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from ddbtx.local import LocalDynamo
from ddbtx.tables import create_data_table

from .model import CONFLICT, REGIONS, Conflicts, GlobalTable, Regions

EAST2, EAST1 = REGIONS[:2]


def key(pk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}}


@pytest.fixture
def mrsc(regions: Regions, data_table: str) -> str:
    """The test's data table, made an MRSC global table."""
    regions.world.tables[data_table] = GlobalTable("MRSC")
    return data_table


def test_given_a_global_table_when_described_in_a_region_then_it_shows_its_replication(
    regions: Regions, data_table: str, table_name: Any, ddb: Any
) -> None:
    # Given an MRSC table, an MREC table and a single-Region one
    mrec, single = table_name("mrec"), table_name("single")
    for name in (mrec, single):
        create_data_table(ddb, name, lock_index=False)
    regions.world.tables[data_table] = GlobalTable("MRSC")
    regions.world.tables[mrec] = GlobalTable("MREC", witness=None)
    # When each is described in us-east-1
    east1 = regions[EAST1].client()
    strong = east1.describe_table(TableName=data_table)["Table"]
    eventual = east1.describe_table(TableName=mrec)["Table"]
    alone = east1.describe_table(TableName=single)["Table"]
    # Then the MRSC table names its other replica and its witness, STRONG
    assert strong["MultiRegionConsistency"] == "STRONG"
    assert [r["RegionName"] for r in strong["Replicas"]] == [EAST2]
    assert strong["GlobalTableWitnesses"] == [{"RegionName": REGIONS[2], "WitnessStatus": "ACTIVE"}]
    # And the MREC table is EVENTUAL with no witness, and the single-Region table has neither
    assert (
        eventual["MultiRegionConsistency"] == "EVENTUAL" and "GlobalTableWitnesses" not in eventual
    )
    assert "Replicas" not in alone and "MultiRegionConsistency" not in alone


@pytest.mark.parametrize(
    "operation",
    ["transact_write_items", "transact_get_items", "update_time_to_live"],
)
def test_given_an_mrsc_table_when_a_transaction_api_or_ttl_is_called_then_it_is_refused(
    regions: Regions, mrsc: str, operation: str
) -> None:
    params: dict[str, Any] = {
        "transact_write_items": {
            "TransactItems": [{"Put": {"TableName": mrsc, "Item": {**key("a")}}}]
        },
        "transact_get_items": {"TransactItems": [{"Get": {"TableName": mrsc, "Key": key("a")}}]},
        "update_time_to_live": {
            "TableName": mrsc,
            "TimeToLiveSpecification": {"Enabled": True, "AttributeName": "ttl"},
        },
    }[operation]
    # When it is called in either Region, Then DynamoDB refuses it and nothing is written
    with pytest.raises(ClientError) as refused:
        getattr(regions[EAST2].client(), operation)(**params)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "Item" not in regions[EAST1].client().get_item(TableName=mrsc, Key=key("a"))


def test_given_one_store_when_a_region_writes_then_another_reads_it_strongly_at_once(
    regions: Regions, mrsc: str
) -> None:
    # When us-east-2 writes, Then us-east-1's strongly consistent read returns the write
    regions[EAST2].client().put_item(TableName=mrsc, Item={**key("a"), "n": {"N": "1"}})
    got = regions[EAST1].client().get_item(TableName=mrsc, Key=key("a"), ConsistentRead=True)
    assert got["Item"]["n"] == {"N": "1"}
    # And each write and strong read was charged a cross-Region round trip, in its Region
    regions[EAST1].client().get_item(TableName=mrsc, Key=key("a"))  # eventually consistent
    assert regions.world.round_trips == {EAST2: 1, EAST1: 1}


@pytest.mark.parametrize("applied", [False, True], ids=["refused", "applied-then-409"])
def test_given_an_item_written_in_one_region_when_another_writes_it_at_once_then_409(
    regions: Regions, mrsc: str, applied: bool
) -> None:
    # Given a conflict window of a minute (no test waits it out), in either mode
    regions.world.conflicts = Conflicts(window=60.0, applied=applied)
    regions[EAST2].client().put_item(TableName=mrsc, Item={**key("a"), "n": {"N": "1"}})
    # When us-east-1 writes the same item, with botocore's retries off
    east1 = regions[EAST1].client(attempts=1)
    with pytest.raises(ClientError) as refused:
        east1.update_item(
            TableName=mrsc,
            Key=key("a"),
            UpdateExpression="SET n = :n",
            ExpressionAttributeValues={":n": {"N": "2"}},
        )
    # Then it is AWS's 409, which existing code catches by its code
    error = refused.value.response
    assert error["Error"]["Code"] == CONFLICT
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 409
    assert isinstance(refused.value, east1.exceptions.ReplicatedWriteConflictException)
    # And the write landed only in the applied mode
    item = east1.get_item(TableName=mrsc, Key=key("a"), ConsistentRead=True)["Item"]
    assert item["n"] == {"N": "2" if applied else "1"}
    # And a write to another item, or from the same Region, is not refused
    east1.put_item(TableName=mrsc, Item=key("b"))
    regions[EAST2].client(attempts=1).put_item(TableName=mrsc, Item=key("c"))


def test_given_a_seeded_rate_then_the_same_writes_meet_the_same_409s(
    regions: Regions, mrsc: str, backend: LocalDynamo
) -> None:
    # Given a 409 on a third of the writes, seeded
    def refusals() -> list[int]:
        regions.world.conflicts = Conflicts(rate=0.34, seed=7)
        regions.world._rng = None
        client = regions[EAST2].client(attempts=1)
        out = []
        for n in range(30):
            try:
                client.put_item(TableName=mrsc, Item=key(f"s{n}"))
            except client.exceptions.ReplicatedWriteConflictException:
                out.append(n)
        return out

    # When the same 30 writes run twice, Then the same ones are refused, some and not all
    first = refusals()
    assert first == refusals()
    assert 0 < len(first) < 30


def test_given_botocores_standard_retries_then_a_409_is_retried_by_botocore(
    regions: Regions, mrsc: str
) -> None:
    """botocore models the exception as retryable, so its standard mode retries it (older
    botocore releases did not): ddbtx must be right either way."""
    # Given us-east-1 wrote the item
    regions[EAST1].client().put_item(TableName=mrsc, Item=key("a"))
    # When every attempt is refused (a rate of 1), with two attempts allowed
    regions.world.conflicts = Conflicts(rate=1.0)
    client = regions[EAST2].client(attempts=2)
    with pytest.raises(client.exceptions.ReplicatedWriteConflictException) as refused:
        client.put_item(TableName=mrsc, Item={**key("a"), "n": {"N": "3"}})
    # Then botocore tried twice before giving up, and the item is as us-east-1 left it
    assert refused.value.response["ResponseMetadata"]["RetryAttempts"] == 1
    assert "n" not in regions[EAST1].client().get_item(TableName=mrsc, Key=key("a"))["Item"]
