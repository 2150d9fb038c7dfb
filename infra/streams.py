"""A user's function wired to the data table's stream through the committed-changes adapter.

With ``-c dataTableStream=true`` the data table has a NEW_AND_OLD_IMAGES stream;
with ``-c changeConsumerCode=<dir>`` this construct deploys the directory as a
function whose handler is ``ddbtx.streams_lambda.handler`` (in the core layer):
it calls ``changeConsumerFunction`` (``consumer:on_change``) once per committed
change. The event source mapping's filter patterns
(:data:`ddbtx.streams.PROTOCOL_FILTER_PATTERNS`) drop the protocol's locks,
applies and read-lock releases before Lambda invokes anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from ddbtx.streams import PROTOCOL_FILTER_PATTERNS
from ddbtx.streams_lambda import ON_CHANGE_ENV
from infra import CACHE_EXCLUDES
from infra.config import DeployConfig
from infra.janitors import _LOG_LEVELS, _RETENTION, _RUNTIME_PINNED
from infra.layer import ARCHITECTURE, RUNTIME

CONSUMER_HANDLER: Final = "ddbtx.streams_lambda.handler"
CONSUMER_SERVICE: Final = "ddbtx-change-consumer"
#: Records per invocation; the filter drops protocol records before batches are formed.
BATCH_SIZE: Final = 100
#: A change that keeps failing is retried this often (bisecting the batch to isolate it),
#: then its record's metadata goes to the failure queue and the shard moves on.
RETRY_ATTEMPTS: Final = 10


class ChangeConsumer(Construct):
    """The user's change function, its role, log group, failure queue and stream mapping.

    Parameters
    ----------
    scope, construct_id
        Where the construct lives.
    config
        ``change_consumer_code`` (required here), ``change_consumer_function``, logging.
    table
        The data table; it must have a stream.
    layers
        Powertools and the ddbtx core (the handler lives in the core layer).

    Examples
    --------
    >>> ChangeConsumer(stack, "Changes", config=cfg, table=t, layers=l.all)  # doctest: +SKIP
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: DeployConfig,
        table: dynamodb.Table,
        layers: Sequence[lambda_.ILayerVersion],
    ) -> None:
        super().__init__(scope, construct_id)
        if config.change_consumer_code is None:
            raise ValueError("ChangeConsumer needs config.change_consumer_code")
        removal = RemovalPolicy.RETAIN if config.retain else RemovalPolicy.DESTROY
        self.failures = sqs.Queue(
            self,
            "Failures",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
            removal_policy=removal,
        )
        no_redrive = (
            "Dead-letter target itself: it holds the stream positions of changes that kept "
            "failing, for an operator to replay; nothing consumes it automatically."
        )
        Validations.of(self.failures).acknowledge(
            Acknowledgment(id="AwsSolutions-SQS3", reason=no_redrive),
            Acknowledgment(id="Serverless-SQSRedrivePolicy", reason=no_redrive),
        )
        self.log_group = logs.LogGroup(
            self, "Logs", retention=_RETENTION[config.log_retention_days], removal_policy=removal
        )
        # Its own role, as the janitors have: logs to its own group only.
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"{CONSUMER_SERVICE}: committed changes of the data table",
        )
        self.log_group.grant_write(role)
        self.function = lambda_.Function(
            self,
            "Function",
            description="ddbtx change consumer: the data table's committed changes only",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=CONSUMER_HANDLER,
            code=lambda_.Code.from_asset(
                str(config.change_consumer_code), exclude=list(CACHE_EXCLUDES)
            ),
            layers=list(layers),
            role=role,
            timeout=Duration.minutes(1),
            memory_size=256,
            environment={
                ON_CHANGE_ENV: config.change_consumer_function,
                "POWERTOOLS_SERVICE_NAME": CONSUMER_SERVICE,
                "LOG_LEVEL": config.log_level,
            },
            tracing=lambda_.Tracing.ACTIVE,
            log_group=self.log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            application_log_level_v2=_LOG_LEVELS[config.log_level],
            system_log_level_v2=lambda_.SystemLogLevel.WARN,
        )
        self.function.add_event_source(
            sources.DynamoEventSource(
                table,
                starting_position=lambda_.StartingPosition.TRIM_HORIZON,
                batch_size=BATCH_SIZE,
                bisect_batch_on_error=True,
                report_batch_item_failures=True,
                retry_attempts=RETRY_ATTEMPTS,
                on_failure=sources.SqsDlq(self.failures),
                filters=[lambda_.FilterCriteria.filter(p) for p in PROTOCOL_FILTER_PATTERNS],
            )
        )
        Validations.of(role).acknowledge(
            Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="xray:PutTraceSegments/PutTelemetryRecords (tracing) and "
                "dynamodb:ListStreams (the stream event source) support no resource-level "
                "permissions; the stream's own reads name the stream.",
            )
        )
        Validations.of(self.function).acknowledge(
            Acknowledgment(id="AwsSolutions-L1", reason=_RUNTIME_PINNED),
            Acknowledgment(id="Serverless-LambdaLatestVersion", reason=_RUNTIME_PINNED),
            Acknowledgment(
                id="Serverless-LambdaDLQ",
                reason="Only the stream invokes it (synchronously): records that keep "
                "failing go to the event source mapping's on-failure queue, not a DLQ.",
            ),
        )
