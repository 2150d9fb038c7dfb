"""The janitor functions: the scheduled sweeper and the manually invoked recovery.

Each function gets its own role, log group and failure queue, so a policy, a
log line or a failed event always names the janitor it belongs to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra import CACHE_EXCLUDES, FUNCTIONS_DIR
from infra.config import DeployConfig
from infra.layer import ARCHITECTURE, RUNTIME
from infra.tables import Tables

METRICS_NAMESPACE: Final = "ddbtx"
SWEEPER_SERVICE: Final = "ddbtx-sweeper"
RECOVERY_SERVICE: Final = "ddbtx-recovery"
HANDLER: Final = "handler.handler"

_RETENTION: Final = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
}
_LOG_LEVELS: Final = {
    "DEBUG": lambda_.ApplicationLogLevel.DEBUG,
    "INFO": lambda_.ApplicationLogLevel.INFO,
    "WARN": lambda_.ApplicationLogLevel.WARN,
    "ERROR": lambda_.ApplicationLogLevel.ERROR,
}
_RUNTIME_PINNED: Final = (
    "Python 3.12 is the runtime the team targets and the public Powertools layer is "
    "pinned for; move runtime and layer together."
)


@dataclass(frozen=True)
class _Shape:
    """What differs between the two janitors."""

    construct_id: str
    directory: str
    service: str
    description: str
    timeout: Duration
    memory_mib: int
    reserved_concurrency: int | None
    #: How long Lambda keeps retrying to deliver an async event (e.g. while throttled).
    max_event_age: Duration


class JanitorFunction(Construct):
    """One janitor: function, role, log group and the queue its failed async events land in.

    Attributes
    ----------
    function
        The Lambda function (Python 3.12, arm64, X-Ray active, JSON logs).
    failures
        SQS queue receiving async invocations that failed (encrypted, TLS only).
    log_group
        The function's log group, with the configured retention.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        shape: _Shape,
        config: DeployConfig,
        environment: Mapping[str, str],
        layers: Sequence[lambda_.ILayerVersion],
    ) -> None:
        super().__init__(scope, construct_id)
        removal = RemovalPolicy.RETAIN if config.retain else RemovalPolicy.DESTROY
        self.failures = sqs.Queue(
            self,
            "Failures",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
            removal_policy=removal,
        )
        # This queue is itself the dead-letter target (Lambda on-failure destination and
        # EventBridge target DLQ): nothing consumes it automatically, so there is no
        # failed consumer to redrive from. Its depth is alarmed on.
        no_redrive = "Dead-letter target itself; nothing consumes it, depth is alarmed on."
        Validations.of(self.failures).acknowledge(
            Acknowledgment(id="AwsSolutions-SQS3", reason=no_redrive),
            Acknowledgment(id="Serverless-SQSRedrivePolicy", reason=no_redrive),
        )
        self.log_group = logs.LogGroup(
            self, "Logs", retention=_RETENTION[config.log_retention_days], removal_policy=removal
        )
        # A role of our own instead of the default one: the default attaches the
        # AWS-managed AWSLambdaBasicExecutionRole (logs:* on every log group), while this
        # one may write to its own log group only.
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"{shape.service} janitor",
        )
        self.log_group.grant_write(role)
        self.function = lambda_.Function(
            self,
            "Function",
            description=shape.description,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=HANDLER,
            # Only the handler's own directory: the core and Powertools come from layers.
            code=lambda_.Code.from_asset(
                str(FUNCTIONS_DIR / shape.directory), exclude=list(CACHE_EXCLUDES)
            ),
            layers=list(layers),
            role=role,
            timeout=shape.timeout,
            memory_size=shape.memory_mib,
            reserved_concurrent_executions=shape.reserved_concurrency,
            environment={
                **environment,
                "POWERTOOLS_SERVICE_NAME": shape.service,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                "LOG_LEVEL": config.log_level,
            },
            tracing=lambda_.Tracing.ACTIVE,
            log_group=self.log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            # Same level as LOG_LEVEL: Lambda filters what Powertools emits, and
            # Powertools warns when the two disagree.
            application_log_level_v2=_LOG_LEVELS[config.log_level],
            system_log_level_v2=lambda_.SystemLogLevel.WARN,
            on_failure=destinations.SqsDestination(self.failures),
            # No automatic retry: the sweeper's next tick retries anyway, and a failed
            # manual recovery is for the operator to look at before running it again.
            retry_attempts=0,
            max_event_age=shape.max_event_age,
        )
        Validations.of(role).acknowledge(
            Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="Only xray:PutTraceSegments and xray:PutTelemetryRecords use '*': "
                "X-Ray supports no resource-level permissions for them (added by "
                "tracing=ACTIVE). Every DynamoDB, Logs and SQS statement names its resource.",
            )
        )
        Validations.of(self.function).acknowledge(
            Acknowledgment(id="AwsSolutions-L1", reason=_RUNTIME_PINNED),
            Acknowledgment(id="Serverless-LambdaLatestVersion", reason=_RUNTIME_PINNED),
            Acknowledgment(
                id="Serverless-LambdaDLQ",
                reason="Failed async invocations go to the on-failure destination queue, "
                "which records request, response and error; a DLQ on top would only "
                "deliver the same event twice.",
            ),
        )


class Janitors(Construct):
    """The sweeper (on an EventBridge schedule) and the recovery function (manual invokes).

    Parameters
    ----------
    scope, construct_id
        Where the construct lives.
    config
        Schedule rate, janitor thresholds, log level and retention.
    tables
        The tables the janitors work on; each function gets exactly the janitor grants.
    layers
        Layers every janitor runs with (Powertools and the ddbtx core).

    Examples
    --------
    >>> janitors = Janitors(stack, "Janitors", config=cfg, tables=t, layers=l.all)  # doctest: +SKIP
    >>> janitors.sweeper.function.function_name  # doctest: +SKIP
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: DeployConfig,
        tables: Tables,
        layers: Sequence[lambda_.ILayerVersion],
    ) -> None:
        super().__init__(scope, construct_id)
        environment = {
            "TRANSACTIONS_TABLE": tables.transactions.table_name,
            "IMAGES_TABLE": tables.images.table_name,
            "LOCKS_TABLE": tables.locks.table_name,
            "DATA_TABLES": ",".join(table.table_name for table in tables.data_tables),
            "ROLLBACK_AFTER_SECONDS": str(config.rollback_after_seconds),
            "DELETE_AFTER_SECONDS": str(config.delete_after_seconds),
            "SWEEP_PAGE_BUDGET": str(config.sweep_page_budget),
            "SWEEP_PAGE_SIZE": str(config.sweep_page_size),
            "SWEEP_SAFETY_MARGIN_SECONDS": str(config.sweep_safety_margin_seconds),
        }
        rate = Duration.minutes(config.sweep_rate_minutes)
        sweeper_shape = _Shape(
            construct_id="Sweeper",
            directory="sweeper",
            service=SWEEPER_SERVICE,
            description="ddbtx sweeper: finishes or rolls back abandoned transactions",
            timeout=Duration.minutes(5),
            memory_mib=512,
            # Two sweepers would walk the same index pages and race for the same records:
            # one at a time is all the work there is.
            reserved_concurrency=1 if config.reserve_sweeper_concurrency else None,
            # A tick older than the next one is worthless: drop it (into the failure
            # queue) rather than queue sweeps behind a slow one.
            max_event_age=rate,
        )
        recovery_shape = _Shape(
            construct_id="Recovery",
            directory="recovery",
            service=RECOVERY_SERVICE,
            description="ddbtx recovery: settles one transaction on request",
            timeout=Duration.minutes(1),
            memory_mib=256,
            # Recoveries of different transactions are independent; capping them would
            # only make an operator wait.
            reserved_concurrency=None,
            # An operator's async request should still run after a burst of throttling.
            max_event_age=Duration.hours(6),
        )
        self.sweeper, self.recovery = (
            JanitorFunction(
                self,
                shape.construct_id,
                shape=shape,
                config=config,
                environment=environment,
                layers=layers,
            )
            for shape in (sweeper_shape, recovery_shape)
        )
        # Both settle transactions and sweep; only the recovery function breaks locks.
        tables.grant_janitor_access(self.sweeper.function, breaks_locks=False)
        tables.grant_janitor_access(self.recovery.function, breaks_locks=True)

        self.schedule = events.Rule(
            self,
            "SweepSchedule",
            description="Runs the ddbtx sweeper",
            schedule=events.Schedule.rate(rate),
            targets=[
                targets.LambdaFunction(
                    self.sweeper.function,
                    # If EventBridge cannot hand the tick to Lambda, the event lands next
                    # to the sweeper's failed invocations.
                    dead_letter_queue=self.sweeper.failures,
                    retry_attempts=2,
                    # A tick older than the next one is worthless.
                    max_event_age=rate,
                )
            ],
        )

    @property
    def all(self) -> tuple[JanitorFunction, JanitorFunction]:
        """Both janitors, sweeper first."""
        return (self.sweeper, self.recovery)
