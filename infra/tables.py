"""The tables ddbtx needs, built from the core's own schema constants.

Key names, TTL attributes and the sweep index come from :mod:`ddbtx.schema`, so
the deployed tables cannot drift from what the core reads and writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from ddbtx import schema
from ddbtx.locks.admin import SWEEP_FREE_ATTRIBUTES
from infra.checks import skip_checkov
from infra.config import DeployConfig, KeyAttribute

_ATTRIBUTE_TYPES: Final = {
    "S": dynamodb.AttributeType.STRING,
    "N": dynamodb.AttributeType.NUMBER,
    "B": dynamodb.AttributeType.BINARY,
}

# What the janitors do to each table (the team's contract); nothing more is granted.
TRANSACTIONS_ACTIONS: Final = (
    "dynamodb:GetItem",
    "dynamodb:Query",
    "dynamodb:Scan",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",  # a deleted record's request-body rows, 25 per call
    # A record completed with the unlocks of its inserted items, in one TransactWriteItems
    # (IAM authorizes each of its actions: UpdateItem here and on the data table, and a
    # ConditionCheck of the record before a second chunk).
    "dynamodb:ConditionCheckItem",
)
SWEEP_INDEX_ACTIONS: Final = ("dynamodb:Query",)
#: On each data table's sparse lock index: the stray-lock pass scans it (a keys-only
#: index of the locked items; the items themselves are read with the table's GetItem).
LOCK_INDEX_ACTIONS: Final = ("dynamodb:Scan",)
IMAGES_ACTIONS: Final = (
    "dynamodb:GetItem",
    "dynamodb:Query",
    "dynamodb:Scan",
    "dynamodb:DeleteItem",
)
#: The lock rows: expired queue rows are deleted, a dead holder's mutex is freed in
#: place (UpdateItem; the row keeps its fencing counter), and the recovery function
#: breaks a lock whose holder is gone (UpdateItem).
LOCKS_ACTIONS: Final = (*IMAGES_ACTIONS, "dynamodb:UpdateItem")
#: The sweeper's UpdateItem on the locks table names only the attributes of freeing an
#: expired mutex: a break (which always writes ``brk``) is the recovery function's alone.
SWEEPER_LOCK_UPDATE_CONDITION: Final = {
    "ForAllValues:StringEquals": {"dynamodb:Attributes": list(SWEEP_FREE_ATTRIBUTES)}
}
DATA_ACTIONS: Final = (
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:Scan",
    "dynamodb:DescribeTable",
)
#: What DynamoDB needs from a caller's identity to use a table's customer-managed key.
#: Explicit instead of the L2 key grants, whose ``kms:ReEncrypt*``/``kms:GenerateDataKey*``
#: wildcards the janitors never need.
KEY_ACTIONS: Final = ("kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey")


class Tables(Construct):
    """Transactions, images and locks tables, plus the application's data table(s).

    Parameters
    ----------
    scope, construct_id
        Where the construct lives.
    config
        Deployment options: retention, encryption key, data table shape or imports.

    Examples
    --------
    >>> tables = Tables(stack, "Tables", config=DeployConfig())  # doctest: +SKIP
    >>> tables.grant_janitor_access(sweeper, breaks_locks=False)  # doctest: +SKIP
    """

    def __init__(self, scope: Construct, construct_id: str, *, config: DeployConfig) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        self.key = self._table_key()

        self.transactions = self._owned_table(
            "Transactions",
            partition=KeyAttribute(schema.TX_PK),
            sort=KeyAttribute(schema.TX_SK),
            ttl=schema.TX_TTL,
        )
        # Sparse: only records carrying TX_SWEEP_KEY appear, so the sweeper reads work
        # left to do instead of scanning every transaction ever written.
        self.transactions.add_global_secondary_index(
            index_name=schema.SWEEP_INDEX,
            partition_key=_attribute(KeyAttribute(schema.TX_SWEEP_KEY, "S")),
            sort_key=_attribute(KeyAttribute(schema.TX_UPDATED, "N")),
            projection_type=dynamodb.ProjectionType.KEYS_ONLY,
        )
        self.images = self._owned_table(
            "Images",
            partition=KeyAttribute(schema.IMAGE_PK),
            sort=KeyAttribute(schema.IMAGE_SK),
            ttl=schema.IMAGE_TTL,
        )
        self.locks = self._owned_table(
            "Locks",
            partition=KeyAttribute(schema.LOCK_PK),
            sort=KeyAttribute(schema.LOCK_SK),
            ttl=schema.LOCK_TTL,
        )
        self.data_tables: Sequence[dynamodb.ITable] = (
            self._imported_data_tables()
            if config.imports_data_tables
            else [self._owned_data_table()]
        )

    def grant_janitor_access(self, grantee: iam.IGrantable, *, breaks_locks: bool) -> None:
        """Give a janitor exactly the table actions it uses, and nothing on other tables.

        Parameters
        ----------
        grantee
            The janitor function (or its role).
        breaks_locks
            Whether it may break locks (the recovery function): any UpdateItem on
            the locks table. Otherwise only the sweep's (freeing an expired mutex).
        """
        _grant(grantee, self.transactions, TRANSACTIONS_ACTIONS)
        # Only the sweep index, not ``index/*``: no other index exists or is read.
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=list(SWEEP_INDEX_ACTIONS),
            resource_arns=[f"{self.transactions.table_arn}/index/{schema.SWEEP_INDEX}"],
        )
        _grant(grantee, self.images, IMAGES_ACTIONS)
        if breaks_locks:
            _grant(grantee, self.locks, LOCKS_ACTIONS)
        else:
            _grant(grantee, self.locks, IMAGES_ACTIONS)
            iam.Grant.add_to_principal(
                grantee=grantee,
                actions=["dynamodb:UpdateItem"],
                resource_arns=[self.locks.table_arn],
                conditions=SWEEPER_LOCK_UPDATE_CONDITION,
            )
        for table in self.data_tables:
            _grant(grantee, table, DATA_ACTIONS)
            # Only the lock index: an imported table's other indexes stay out of reach.
            # (On an imported table without it the grant is unused: the sweeper scans.)
            iam.Grant.add_to_principal(
                grantee=grantee,
                actions=list(LOCK_INDEX_ACTIONS),
                resource_arns=[f"{table.table_arn}/index/{schema.LOCK_INDEX}"],
            )

    def _table_key(self) -> kms.IKey | None:
        if self._config.create_key:
            return kms.Key(
                self,
                "TableKey",
                description="Encrypts the ddbtx tables at rest",
                enable_key_rotation=True,
                removal_policy=self._removal_policy,
            )
        if self._config.key_arn:
            return kms.Key.from_key_arn(self, "TableKey", self._config.key_arn)
        return None

    @property
    def _removal_policy(self) -> RemovalPolicy:
        return RemovalPolicy.RETAIN if self._config.retain else RemovalPolicy.DESTROY

    def _owned_table(
        self,
        construct_id: str,
        *,
        partition: KeyAttribute,
        sort: KeyAttribute | None,
        ttl: str | None,
        table_name: str | None = None,
        stream: dynamodb.StreamViewType | None = None,
    ) -> dynamodb.Table:
        # Without a customer-managed key the tables use the AWS owned key: encrypted at
        # rest, no KMS charges, nothing to grant.
        encryption = (
            dynamodb.TableEncryption.CUSTOMER_MANAGED
            if self.key is not None
            else dynamodb.TableEncryption.DEFAULT
        )
        table = dynamodb.Table(
            self,
            construct_id,
            table_name=table_name,
            partition_key=_attribute(partition),
            sort_key=_attribute(sort) if sort else None,
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute=ttl,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=self._config.retain,
            removal_policy=self._removal_policy,
            encryption=encryption,
            encryption_key=self.key,
            stream=stream,
        )
        if self.key is None:
            skip_checkov(
                table,
                "CKV_AWS_119",
                "Encrypted at rest with DynamoDB's AWS owned key (no KMS charges or key "
                "policy to keep); -c customerManagedKey=true or encryptionKeyArn=... "
                "chooses a customer-managed key.",
            )
        return table

    def _owned_data_table(self) -> dynamodb.Table:
        table = self._owned_table(
            "Data",
            partition=self._config.data_partition_key,
            sort=self._config.data_sort_key,
            ttl=None,
            table_name=self._config.data_table_name,
            # ddbtx.streams reads committed changes from both images of each record.
            stream=(
                dynamodb.StreamViewType.NEW_AND_OLD_IMAGES
                if self._config.data_table_stream
                else None
            ),
        )
        # Sparse: only items carrying the lock attribute (locked by a transaction) appear,
        # so the sweeper finds stray locks by reading the locked items, not the table.
        table.add_global_secondary_index(
            index_name=schema.LOCK_INDEX,
            partition_key=_attribute(KeyAttribute(schema.ATTR_LOCK, "S")),
            projection_type=dynamodb.ProjectionType.KEYS_ONLY,
        )
        return table

    def _imported_data_tables(self) -> list[dynamodb.ITable]:
        key = (
            kms.Key.from_key_arn(self, "DataTablesKey", self._config.data_tables_key_arn)
            if self._config.data_tables_key_arn
            else None
        )
        return [
            dynamodb.Table.from_table_attributes(
                self, f"Imported{index}", table_name=name, encryption_key=key
            )
            for index, name in enumerate(self._config.data_tables)
        ]


def _attribute(key: KeyAttribute) -> dynamodb.Attribute:
    return dynamodb.Attribute(name=key.name, type=_ATTRIBUTE_TYPES[key.type])


def _grant(grantee: iam.IGrantable, table: dynamodb.ITable, actions: Sequence[str]) -> None:
    # has_index=False: the table grant would otherwise repeat every action on index/*.
    dynamodb.TableGrants(table=table, has_index=False).actions(grantee, *actions)
    encrypted = iam.EncryptedResources.of(table)
    if encrypted is not None:
        encrypted.grant_on_key(grantee, *KEY_ACTIONS)
