"""A user's change function for the Lambda handler tests (``DDBTX_ON_CHANGE``)."""

from __future__ import annotations

from ddbtx.streams import Change

#: Every change the function was given, in order.
SEEN: list[Change] = []


def on_change(change: Change) -> None:
    SEEN.append(change)
