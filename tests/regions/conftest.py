"""Fixtures of the multi-Region tests: Region proxies (``model.py``) in front of the
session's emulator, on both emulators."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ddbtx.local import LocalDynamo

from .model import REGIONS, Regions


@pytest.fixture
def regions(backend: LocalDynamo) -> Iterator[Regions]:
    """Two replica Regions (``us-east-2``, ``us-east-1``) in front of this test's emulator;
    no table is global until the test says so (``regions.world.tables``)."""
    with Regions(backend.endpoint_url, REGIONS[:2]) as made:
        yield made
