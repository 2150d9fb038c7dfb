"""Alarms on the janitors, an SNS topic they notify, and a small dashboard."""

from __future__ import annotations

from typing import Final

from aws_cdk import Acknowledgment, Aws, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from infra.config import DeployConfig
from infra.janitors import METRICS_NAMESPACE, SWEEPER_SERVICE, JanitorFunction, Janitors

#: Counters the sweeper emits (EMF, namespace ``ddbtx``, dimension ``service``).
SWEEP_OUTCOMES: Final = (
    "Scanned",
    "RolledBack",
    "RolledForward",
    "Completed",
    "Deleted",
    "OrphanImagesDeleted",
    "LocksReleased",
    "LockRowsDeleted",
    "SkippedRequests",
)
_FIVE_MINUTES: Final = Duration.minutes(5)


class Monitoring(Construct):
    """Alarms (errors, throttles, failure-queue depth, stuck transactions) and a dashboard.

    Every alarm notifies :attr:`topic` when it fires and when it recovers.

    Parameters
    ----------
    scope, construct_id
        Where the construct lives.
    config
        Sweep rate (the stuck-transaction alarm's period) and optional alarm email.
    janitors
        The functions and failure queues to watch.

    Examples
    --------
    >>> Monitoring(stack, "Monitoring", config=cfg, janitors=janitors).topic  # doctest: +SKIP
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, config: DeployConfig, janitors: Janitors
    ) -> None:
        super().__init__(scope, construct_id)
        self.topic = self._topic(config)
        self._action = cw_actions.SnsAction(self.topic)
        self.alarms: list[cloudwatch.Alarm] = []

        sweep_period = Duration.minutes(config.sweep_rate_minutes)
        stuck = self._sweeper_metric("StuckTransactions", "Maximum", sweep_period)
        self._alarm(
            "StuckTransactions",
            stuck,
            evaluation_periods=2,
            description="The sweeper found transactions it could not recover in two sweeps "
            "in a row: look for Errors in the sweeper logs, then run the recovery function "
            "on the ids it logs.",
        )
        self._alarm(
            "SweepErrors",
            self._sweeper_metric("Errors", "Sum", sweep_period),
            evaluation_periods=1,
            description="The sweeper failed to recover a transaction (its logs name it); "
            "it retries on the next sweep.",
        )
        for janitor in janitors.all:
            self._watch(janitor)

        self.dashboard = self._dashboard(janitors, stuck, sweep_period)

    def _topic(self, config: DeployConfig) -> sns.Topic:
        # A key of our own: CloudWatch cannot publish to a topic encrypted with the
        # AWS-managed SNS key, whose policy cannot be changed to let it in.
        key = self.topic_key = kms.Key(
            self,
            "TopicKey",
            description="Encrypts the ddbtx alarm topic",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN if config.retain else RemovalPolicy.DESTROY,
        )
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchAlarmsToPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}},
            )
        )
        topic = sns.Topic(
            self, "Alarms", display_name="ddbtx alarms", master_key=key, enforce_ssl=True
        )
        if config.alarm_email:
            subscription = sns.Subscription(
                self,
                "AlarmEmail",
                topic=topic,
                protocol=sns.SubscriptionProtocol.EMAIL,
                endpoint=config.alarm_email,
            )
            Validations.of(subscription).acknowledge(
                Acknowledgment(
                    id="Serverless-SNSRedrivePolicy",
                    reason="An email subscription has nothing to redrive to: a lost "
                    "notification is also visible as the alarm's state in CloudWatch.",
                )
            )
        return topic

    def _watch(self, janitor: JanitorFunction) -> None:
        name = janitor.node.id
        fn = janitor.function
        self._alarm(
            f"{name}Errors",
            fn.metric_errors(period=_FIVE_MINUTES, statistic="Sum"),
            evaluation_periods=1,
            description=f"The {name.lower()} function raised or timed out; see its log group.",
        )
        self._alarm(
            f"{name}Throttles",
            fn.metric_throttles(period=_FIVE_MINUTES, statistic="Sum"),
            evaluation_periods=1,
            description=f"The {name.lower()} function was throttled: for the sweeper, a "
            "sweep is outrunning the schedule (or account concurrency is exhausted).",
        )
        self._alarm(
            f"{name}FailedEvents",
            janitor.failures.metric_approximate_number_of_messages_visible(
                period=_FIVE_MINUTES, statistic="Maximum"
            ),
            evaluation_periods=1,
            description=f"Async invocations of the {name.lower()} function failed and wait "
            "in its failure queue; read them, fix the cause, then purge the queue.",
        )

    def _alarm(
        self,
        construct_id: str,
        metric: cloudwatch.IMetric,
        *,
        evaluation_periods: int,
        description: str,
    ) -> None:
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            metric=metric,
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=evaluation_periods,
            datapoints_to_alarm=evaluation_periods,
            # No data means nothing ran or nothing went wrong; outages show up as errors.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        alarm.add_alarm_action(self._action)
        alarm.add_ok_action(self._action)
        self.alarms.append(alarm)

    @staticmethod
    def _sweeper_metric(name: str, statistic: str, period: Duration) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=METRICS_NAMESPACE,
            metric_name=name,
            dimensions_map={"service": SWEEPER_SERVICE},
            statistic=statistic,
            period=period,
        )

    def _dashboard(
        self, janitors: Janitors, stuck: cloudwatch.IMetric, period: Duration
    ) -> cloudwatch.Dashboard:
        dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            dashboard_name=f"{Stack.of(self).stack_name}-janitors",
            default_interval=Duration.hours(6),
        )
        outcomes = [self._sweeper_metric(name, "Sum", period) for name in SWEEP_OUTCOMES]
        dashboard.add_widgets(
            cloudwatch.GraphWidget(title="Sweep outcomes", left=outcomes, width=12),
            cloudwatch.GraphWidget(
                title="Stuck transactions and sweep errors",
                left=[stuck, self._sweeper_metric("Errors", "Sum", period)],
                width=12,
            ),
        )
        dashboard.add_widgets(
            *(
                cloudwatch.GraphWidget(
                    title=f"{janitor.node.id}: invocations, errors, throttles",
                    left=[
                        janitor.function.metric_invocations(period=_FIVE_MINUTES),
                        janitor.function.metric_errors(period=_FIVE_MINUTES),
                        janitor.function.metric_throttles(period=_FIVE_MINUTES),
                    ],
                    right=[janitor.function.metric_duration(period=_FIVE_MINUTES)],
                    width=8,
                )
                for janitor in janitors.all
            ),
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms), width=8),
        )
        return dashboard
