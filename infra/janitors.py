"""The janitor functions: the scheduled sweeper and the manually invoked recovery.

Each function gets its own role, log group and failure queue, so a policy, a
log line or a failed event always names the janitor it belongs to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from aws_cdk import Acknowledgment, Aws, CfnResource, Duration, RemovalPolicy, Validations
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra import CACHE_EXCLUDES, FUNCTIONS_DIR
from infra.checks import skip_checkov
from infra.config import DeployConfig
from infra.layer import ARCHITECTURE, RUNTIME
from infra.tables import Tables

METRICS_NAMESPACE: Final = "ddbtx"
SWEEPER_SERVICE: Final = "ddbtx-sweeper"
RECOVERY_SERVICE: Final = "ddbtx-recovery"
HANDLER: Final = "handler.handler"
#: Recoveries that may run at once (reserved, with reserveSweeperConcurrency).
RECOVERY_CONCURRENCY: Final = 5

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
#: What both janitors send to SQS with the failure queues' key (SendMessage needs both).
QUEUE_KEY_ACTIONS: Final = ("kms:GenerateDataKey", "kms:Decrypt")
#: What CloudWatch Logs needs on a log group's KMS key (AWS's documented key policy).
LOGS_KEY_ACTIONS: Final = (
    "kms:Encrypt*",
    "kms:Decrypt*",
    "kms:ReEncrypt*",
    "kms:GenerateDataKey*",
    "kms:Describe*",
)
_NO_VPC = (
    "The janitors call only the public DynamoDB, SQS, CloudWatch and X-Ray endpoints, over "
    "TLS and with IAM; a VPC would add NAT or interface endpoints (cost, cold-start ENIs) "
    "without narrowing what they can reach."
)
_ENV_NOT_SECRET = (
    "The environment holds table names and sweep thresholds, no secret; Lambda encrypts "
    "it at rest with its AWS-managed key."
)
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
        The function's dead-letter queue: async invocations that failed (encrypted with
        the janitors' queue key, TLS only).
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
        queue_key: kms.IKey,
        log_key: kms.IKey | None,
    ) -> None:
        super().__init__(scope, construct_id)
        removal = RemovalPolicy.RETAIN if config.retain else RemovalPolicy.DESTROY
        self.failures = sqs.Queue(
            self,
            "Failures",
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=queue_key,
            enforce_ssl=True,
            retention_period=Duration.days(14),
            removal_policy=removal,
        )
        # This queue is itself the dead-letter target (the function's DLQ and the
        # EventBridge target's DLQ): nothing consumes it automatically, so there is no
        # failed consumer to redrive from. Its depth is alarmed on. (AwsSolutions-SQS3
        # sees the function's DLQ and is satisfied; Serverless checks do not.)
        no_redrive = "Dead-letter target itself; nothing consumes it, depth is alarmed on."
        Validations.of(self.failures).acknowledge(
            Acknowledgment(id="Serverless-SQSRedrivePolicy", reason=no_redrive),
        )
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=_RETENTION[config.log_retention_days],
            removal_policy=removal,
            encryption_key=log_key,
        )
        if log_key is None:
            skip_checkov(
                self.log_group,
                "CKV_AWS_158",
                "CloudWatch Logs encrypts every log group at rest with its own key; "
                "-c customerManagedKey=true uses the stack's KMS key instead.",
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
        # The function's DLQ is sent to with its own role, so the role needs the queue
        # (CDK grants sqs:SendMessage) and the queue's key (granted here, the two actions
        # SendMessage needs, not the L2 grant's wildcards).
        queue_key.grant(role, *QUEUE_KEY_ACTIONS)
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
            # Failed async invocations (the event, with the error as message attributes).
            dead_letter_queue=self.failures,
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
        )
        # The EventInvokeConfig (retries, event age) is where cdk-nag looks for a failure
        # destination; the function's DLQ (above) already takes every failed event.
        Validations.of(self.function).acknowledge(
            Acknowledgment(
                id="Serverless-LambdaAsyncFailureDestination",
                reason="Failed async invocations go to the function's dead-letter queue "
                "(event and error); an on-failure destination on top would deliver each "
                "one twice.",
            )
        )
        skip_checkov(self.function, "CKV_AWS_117", _NO_VPC)
        skip_checkov(self.function, "CKV_AWS_173", _ENV_NOT_SECRET)
        # CDK makes the function depend on its whole role construct, so DependsOn names
        # the role as well as its policy, and the role is already implied by GetAtt
        # Role.Arn (cfn-lint W3005). The policy is what must exist first: a function
        # created before it could run without its grants.
        function, policy = self.function.node.default_child, role.node.find_child("DefaultPolicy")
        assert isinstance(function, CfnResource) and isinstance(
            policy.node.default_child, CfnResource
        )
        function.add_override("DependsOn", [policy.node.default_child.logical_id])


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
            description="ddbtx sweeper: rolls abandoned transactions forward or back",
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
            description="ddbtx recovery: recovers one transaction on request",
            timeout=Duration.minutes(1),
            memory_mib=256,
            # Recoveries of different transactions are independent, so a few run at once;
            # the cap keeps a runaway script invoking it from taking the account's pool.
            reserved_concurrency=RECOVERY_CONCURRENCY
            if config.reserve_sweeper_concurrency
            else None,
            # An operator's async request should still run after a burst of throttling.
            max_event_age=Duration.hours(6),
        )
        log_key = self._log_key(config, tables)
        # One key for both failure queues: EventBridge sends the sweeper's expired ticks
        # there too, and an AWS-managed SQS key's policy cannot let it in.
        self.queue_key = kms.Key(
            self,
            "QueueKey",
            description="Encrypts the ddbtx janitors' failure queues",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN if config.retain else RemovalPolicy.DESTROY,
        )
        self.queue_key.grant(
            iam.ServicePrincipal(
                "events.amazonaws.com",
                conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}},
            ),
            *QUEUE_KEY_ACTIONS,
        )
        self.sweeper, self.recovery = (
            JanitorFunction(
                self,
                shape.construct_id,
                shape=shape,
                config=config,
                environment=environment,
                layers=layers,
                queue_key=self.queue_key,
                log_key=log_key,
            )
            for shape in (sweeper_shape, recovery_shape)
        )
        # Both recover transactions and sweep; only the recovery function breaks locks.
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

    @staticmethod
    def _log_key(config: DeployConfig, tables: Tables) -> kms.IKey | None:
        """The stack's own table key, when it creates one, also encrypts the log groups;
        CloudWatch Logs may then use it for this account's log groups only. (A key named
        by ARN is not ours to change: its policy would have to let Logs in by hand.)"""
        key = tables.key
        if not config.create_key or not isinstance(key, kms.Key):
            return None
        key.grant(
            iam.ServicePrincipal(
                f"logs.{Aws.REGION}.amazonaws.com",
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": (
                            f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:*"
                        )
                    }
                },
            ),
            *LOGS_KEY_ACTIONS,
        )
        return key

    @property
    def all(self) -> tuple[JanitorFunction, JanitorFunction]:
        """Both janitors, sweeper first."""
        return (self.sweeper, self.recovery)
