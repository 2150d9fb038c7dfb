"""The ddbtx stack: composes tables, layers, janitors and monitoring, and reports names."""

from __future__ import annotations

from typing import Any, Final

from aws_cdk import Aws, CfnOutput, Stack
from constructs import Construct

from infra.config import DeployConfig
from infra.janitors import Janitors
from infra.layer import JanitorLayers
from infra.monitoring import Monitoring
from infra.streams import ChangeConsumer
from infra.tables import Tables

#: Example request for the recovery function: recover one transaction by id.
RECOVERY_PAYLOAD: Final = '{"action": "recover", "transaction_id": "<transaction id>"}'


class DdbtxStack(Stack):
    """Everything ddbtx needs in one account and region.

    Parameters
    ----------
    scope, construct_id
        The app and the stack's construct id.
    config
        Deployment options (see :class:`infra.config.DeployConfig`).
    **kwargs
        Passed to :class:`aws_cdk.Stack` (``stack_name``, ``env``, ...).

    Examples
    --------
    >>> DdbtxStack(app, "ddbtx", config=DeployConfig())  # doctest: +SKIP
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, config: DeployConfig, **kwargs: Any
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            description="ddbtx: transactions, locks and their janitors for DynamoDB",
            **kwargs,
        )
        self.tables = Tables(self, "Tables", config=config)
        self.layers = JanitorLayers(
            self, "Layers", powertools_layer_arn=config.powertools_layer_arn
        )
        self.janitors = Janitors(
            self, "Janitors", config=config, tables=self.tables, layers=self.layers.all
        )
        self.monitoring = Monitoring(self, "Monitoring", config=config, janitors=self.janitors)
        self.consumer = (
            ChangeConsumer(
                self,
                "ChangeConsumer",
                config=config,
                table=self.tables.data_tables[0],  # type: ignore[arg-type]  # owned: a Table
                layers=self.layers.all,
            )
            if config.change_consumer_code is not None
            else None
        )
        self._outputs()

    def _outputs(self) -> None:
        tables, janitors = self.tables, self.janitors
        recovery = janitors.recovery.function.function_name
        values = {
            "TransactionsTableName": (tables.transactions.table_name, "TRANSACTIONS_TABLE"),
            "ImagesTableName": (tables.images.table_name, "IMAGES_TABLE"),
            "LocksTableName": (tables.locks.table_name, "LOCKS_TABLE"),
            "DataTableNames": (
                ",".join(t.table_name for t in tables.data_tables),
                "DATA_TABLES (comma-separated)",
            ),
            "SweeperFunctionName": (janitors.sweeper.function.function_name, "Scheduled sweeper"),
            "RecoveryFunctionName": (recovery, "Recovery function, for manual invokes"),
            "RecoveryInvokeCommand": (
                f"aws lambda invoke --region {Aws.REGION} --function-name {recovery} "
                f"--cli-binary-format raw-in-base64-out --payload '{RECOVERY_PAYLOAD}' "
                "recovery-result.json",
                "Run a manual recovery (replace <transaction id>)",
            ),
            "AlarmTopicArn": (self.monitoring.topic.topic_arn, "Subscribe here for alarms"),
            "DashboardName": (
                self.monitoring.dashboard.dashboard_name,
                "CloudWatch dashboard of the janitors",
            ),
        }
        if self.consumer is not None:
            values["ChangeConsumerFunctionName"] = (
                self.consumer.function.function_name,
                "Gets the data table's committed changes",
            )
            values["ChangeConsumerFailureQueueUrl"] = (
                self.consumer.failures.queue_url,
                "Stream positions of changes the consumer kept failing on",
            )
        for output_id, (value, description) in values.items():
            CfnOutput(self, output_id, value=value, description=description)
