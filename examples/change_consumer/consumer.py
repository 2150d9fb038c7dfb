"""A change consumer for the CDK option ``changeConsumerCode`` (see docs/streams.md).

Deployed with ``-c dataTableStream=true -c changeConsumerCode=examples/change_consumer``:
the ddbtx layer's handler calls :func:`on_change` once per committed change of the data
table, in stream order, and never for a lock, an uncommitted write or a roll back.
Lambda retries a failed change (and the records after it), so this must be idempotent.
"""

from __future__ import annotations

import json
import logging

from ddbtx.streams import Change

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)


def on_change(change: Change) -> None:
    """Log each committed change as one JSON line (replace with your indexer, cache, ...)."""
    logger.info(
        json.dumps(
            {
                "table": change.table,
                "kind": change.kind,
                "key": change.key,
                "new": change.new,
                "old": change.old if change.old_known else "kept in the images table",
                "tx_id": change.tx_id,
                "sequence_number": change.sequence_number,
            },
            default=str,
        )
    )
