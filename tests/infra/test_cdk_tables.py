"""The deployed tables match the core's schema constants and are protected by default."""

from __future__ import annotations

from typing import Any

import pytest
from cdk_support import Synth, SynthFactory, render

from ddbtx import schema

#: The session-cached synth fixtures (a plugin rather than a conftest; see there).
pytest_plugins = ("cdk_fixtures",)

KEY_ARN = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def key_schema(props: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(name, HASH|RANGE, S|N|B) for each key attribute, from a table's properties."""
    types = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}
    return [
        (k["AttributeName"], k["KeyType"], types[k["AttributeName"]]) for k in props["KeySchema"]
    ]


def owned_tables(s: Synth) -> dict[str, dict[str, Any]]:
    t = s.stack.tables
    tables = {"transactions": t.transactions, "images": t.images, "locks": t.locks}
    if not s.config.imports_data_tables:
        tables["data"] = t.data_tables[0]  # type: ignore[assignment]
    return {role: s.resources[s.logical_id(table)] for role, table in tables.items()}


@pytest.mark.parametrize(
    ("role", "partition", "sort", "ttl"),
    [
        ("transactions", schema.TX_PK, schema.TX_SK, schema.TX_TTL),
        ("images", schema.IMAGE_PK, schema.IMAGE_SK, schema.IMAGE_TTL),
        ("locks", schema.LOCK_PK, schema.LOCK_SK, schema.LOCK_TTL),
    ],
)
def test_given_default_app_then_core_tables_use_the_schema_keys_and_ttl(
    default: Synth, role: str, partition: str, sort: str, ttl: str
) -> None:
    # Given the default synth; When we read the table's properties
    props = owned_tables(default)[role]["Properties"]
    # Then key schema and TTL attribute are the core's constants
    assert key_schema(props) == [(partition, "HASH", "S"), (sort, "RANGE", "S")]
    assert props["TimeToLiveSpecification"] == {"AttributeName": ttl, "Enabled": True}


def test_given_default_app_then_the_sweep_index_is_built_from_schema_constants(
    default: Synth,
) -> None:
    props = owned_tables(default)["transactions"]["Properties"]
    types = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}
    (index,) = props["GlobalSecondaryIndexes"]
    assert index["IndexName"] == schema.SWEEP_INDEX
    assert [(k["AttributeName"], k["KeyType"]) for k in index["KeySchema"]] == [
        (schema.TX_SWEEP_KEY, "HASH"),
        (schema.TX_UPDATED, "RANGE"),
    ]
    assert (types[schema.TX_SWEEP_KEY], types[schema.TX_UPDATED]) == ("S", "N")
    assert index["Projection"] == {"ProjectionType": "KEYS_ONLY"}


def test_given_default_app_then_every_table_is_on_demand_recoverable_and_retained(
    default: Synth,
) -> None:
    tables = owned_tables(default)
    assert set(tables) == {"transactions", "images", "locks", "data"}
    for role, table in tables.items():
        props = table["Properties"]
        assert props["BillingMode"] == "PAY_PER_REQUEST", role
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert props["DeletionProtectionEnabled"] is True, role
        assert (table["DeletionPolicy"], table["UpdateReplacePolicy"]) == ("Retain", "Retain")
        # Encrypted at rest with the AWS owned key: DynamoDB's default, no KMS grants.
        assert props["SSESpecification"] == {"SSEEnabled": False}, role


def test_given_default_app_then_the_data_table_has_a_string_pk_and_no_ttl(
    default: Synth,
) -> None:
    props = owned_tables(default)["data"]["Properties"]
    assert key_schema(props) == [("pk", "HASH", "S")]
    assert "TimeToLiveSpecification" not in props
    assert "TableName" not in props  # CloudFormation names it; the outputs report it


def test_given_default_app_then_the_data_table_has_the_sparse_lock_index(
    default: Synth,
) -> None:
    # Given the default synth; When we read the data table's indexes
    props = owned_tables(default)["data"]["Properties"]
    types = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}
    (index,) = props["GlobalSecondaryIndexes"]
    # Then it is the core's lock index: hash on the lock attribute (a string), keys only
    assert index["IndexName"] == schema.LOCK_INDEX
    assert [(k["AttributeName"], k["KeyType"]) for k in index["KeySchema"]] == [
        (schema.ATTR_LOCK, "HASH")
    ]
    assert types[schema.ATTR_LOCK] == "S"
    assert index["Projection"] == {"ProjectionType": "KEYS_ONLY"}


def test_given_throwaway_then_tables_lose_deletion_protection_and_retention(
    synth: SynthFactory,
) -> None:
    # Given a throwaway stack
    s = synth(throwaway=True)
    # Then every table can be deleted with the stack, and so can logs and queues
    for role, table in owned_tables(s).items():
        assert table["Properties"]["DeletionProtectionEnabled"] is False, role
        assert table["DeletionPolicy"] == "Delete", role
    for cfn_type in ("AWS::Logs::LogGroup", "AWS::SQS::Queue", "AWS::KMS::Key"):
        for lid, resource in s.of_type(cfn_type).items():
            assert resource["DeletionPolicy"] == "Delete", lid
    # And PITR stays on: it costs nothing to keep and protects a demo's data too
    for table in owned_tables(s).values():
        assert table["Properties"]["PointInTimeRecoverySpecification"] == {
            "PointInTimeRecoveryEnabled": True
        }


def test_given_default_app_then_keys_logs_and_queues_are_retained(default: Synth) -> None:
    for cfn_type in ("AWS::Logs::LogGroup", "AWS::SQS::Queue", "AWS::KMS::Key"):
        resources = default.of_type(cfn_type)
        assert resources, cfn_type
        for lid, resource in resources.items():
            assert resource["DeletionPolicy"] == "Retain", lid


def test_given_a_created_customer_managed_key_then_tables_use_it_with_rotation(
    synth: SynthFactory,
) -> None:
    s = synth(customerManagedKey=True)
    key = s.stack.tables.key
    assert key is not None
    key_id = s.logical_id(key)
    assert s.resources[key_id]["Properties"]["EnableKeyRotation"] is True
    for role, table in owned_tables(s).items():
        assert render(table["Properties"]["SSESpecification"]) == {
            "SSEEnabled": True,
            "SSEType": "KMS",
            "KMSMasterKeyId": f"{key_id}.Arn",
        }, role


def test_given_an_existing_key_arn_then_tables_are_encrypted_with_it(
    synth: SynthFactory,
) -> None:
    s = synth(encryptionKeyArn=KEY_ARN)
    # No key is created for the tables: the only keys are the alarm topic's and the
    # janitors' failure queues'
    assert set(s.of_type("AWS::KMS::Key")) == {
        s.logical_id(s.stack.monitoring.topic_key),
        s.logical_id(s.stack.janitors.queue_key),
    }
    for role, table in owned_tables(s).items():
        assert table["Properties"]["SSESpecification"]["KMSMasterKeyId"] == KEY_ARN, role


def test_given_data_table_context_then_the_data_table_has_that_name_and_keys(
    synth: SynthFactory,
) -> None:
    # Given
    s = synth(dataTableName="orders", dataPartitionKey="tenant", dataSortKey="seq:N")
    # When
    props = owned_tables(s)["data"]["Properties"]
    # Then
    assert props["TableName"] == "orders"
    assert key_schema(props) == [("tenant", "HASH", "S"), ("seq", "RANGE", "N")]


def test_given_data_tables_to_import_then_no_data_table_is_created(
    synth: SynthFactory,
) -> None:
    s = synth(dataTables="orders,customers")
    created = {
        s.logical_id(t)
        for t in (s.stack.tables.transactions, s.stack.tables.images, s.stack.tables.locks)
    }
    assert set(s.of_type("AWS::DynamoDB::Table")) == created
    env = s.props(s.stack.janitors.sweeper.function)["Environment"]["Variables"]
    assert env["DATA_TABLES"] == "orders,customers"
