"""Scheduled sweeper: rolls abandoned ddbtx transactions forward or back, completes them
and clears leftovers.

Run by an EventBridge schedule. All the work is :class:`ddbtx.sweeper.Sweeper`;
this module reads the configuration at cold start, stops before the Lambda
deadline, and turns the report into logs and CloudWatch metrics (EMF).

Environment: ``TRANSACTIONS_TABLE``, ``IMAGES_TABLE``, ``LOCKS_TABLE``,
``DATA_TABLES`` (comma-separated), ``ROLLBACK_AFTER_SECONDS``,
``DELETE_AFTER_SECONDS``, ``SWEEP_PAGE_BUDGET``, optionally ``SWEEP_PAGE_SIZE``
(default 100) and ``SWEEP_SAFETY_MARGIN_SECONDS`` (default 20), and Powertools' own
variables.
"""

from __future__ import annotations

import os
from typing import Any, Final

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from ddbtx.sweeper import JanitorSettings, SweepReport, janitor_client

# Powertools' variables (the CDK app sets them) win; these defaults let the handler run
# anywhere else too (locally, in a test) instead of failing for want of a namespace.
SERVICE: Final = os.environ.get("POWERTOOLS_SERVICE_NAME", "ddbtx-sweeper")
logger = Logger(service=SERVICE)
metrics = Metrics(
    namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "ddbtx"), service=SERVICE
)
tracer = Tracer(service=SERVICE)
# The core logs through the standard library; give it the same JSON format and keys.
copy_config_to_registered_loggers(source_logger=logger, include={"ddbtx"})

#: Report field -> CloudWatch metric name (the alarms and dashboard use these names).
METRIC_NAMES: Final = {
    "scanned": "Scanned",
    "rolled_back": "RolledBack",
    "rolled_forward": "RolledForward",
    "completed": "Completed",
    "deleted": "Deleted",
    "orphan_images_deleted": "OrphanImagesDeleted",
    "locks_released": "LocksReleased",
    "lock_rows_deleted": "LockRowsDeleted",
    "errors": "Errors",
    "skipped_requests": "SkippedRequests",
    "stuck": "StuckTransactions",
}

# Cold start: a missing or malformed variable fails here, with a message naming it.
SETTINGS: Final = JanitorSettings.from_env()
SWEEPER: Final = SETTINGS.sweeper(SETTINGS.manager(janitor_client()))


def publish(report: SweepReport) -> None:
    """One count metric per report counter."""
    for field, name in METRIC_NAMES.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=getattr(report, field))


@logger.inject_lambda_context(correlation_id_path=correlation_paths.EVENT_BRIDGE)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Sweep until done or ``SWEEP_SAFETY_MARGIN_SECONDS`` before the deadline.

    The event (an EventBridge scheduled event) carries nothing the sweep needs.
    Returns the :class:`ddbtx.sweeper.SweepReport` as JSON, including the
    cursor the next run continues from.
    """
    report = SWEEPER.run(
        deadline=lambda: context.get_remaining_time_in_millis() / 1000,
        page_budget=SETTINGS.page_budget,
    )
    publish(report)
    if report.stuck_ids:
        logger.warning("stuck transactions found", extra={"transaction_ids": report.stuck_ids})
    logger.info("sweep done", extra={"report": report.to_dict()})
    return report.to_dict()
