"""Fixtures of the streams tests: the data table has a NEW_AND_OLD_IMAGES stream.

Streams exist on moto only: dynalite has no ``StreamSpecification`` and no
``dynamodbstreams`` API, so every test here skips its dynalite instance, saying so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ddbtx import TransactionManager
from ddbtx.local import LocalDynamo
from ddbtx.stream_reader import StreamReader
from ddbtx.tables import create_data_table
from helpers import Tables

from .support import Ledger

NO_STREAMS = "dynalite has no DynamoDB Streams (no StreamSpecification, no dynamodbstreams API)"
NOT_MOTO = "these tests read moto's single in-memory shard; a real stream is not read here"


@pytest.fixture
def stream_backend(backend: LocalDynamo) -> LocalDynamo:
    """The backend, on moto only (see the module docstring)."""
    if backend.kind == "dynalite":
        pytest.skip(NO_STREAMS)
    if backend.kind != "moto":
        pytest.skip(NOT_MOTO)
    return backend


@pytest.fixture
def tables(stream_backend: LocalDynamo, ddb: Any, table_name: Callable[[str], str]) -> Tables:
    """Protocol tables plus one data table (hash key ``pk``) with a NEW_AND_OLD_IMAGES stream."""
    names = Tables(table_name("tx"), table_name("img"), table_name("data"))
    TransactionManager(ddb, names.tx, names.images).create_tables()
    create_data_table(ddb, names.data, stream=True)
    return names


@pytest.fixture
def reader(stream_backend: LocalDynamo, ddb: Any, tables: Tables) -> StreamReader:
    """The data table's stream, read from its start."""
    return StreamReader(ddb, tables.data)


@pytest.fixture
def ledger(ddb: Any, tables: Tables) -> Ledger:
    """The committed values of every data item, snapshot by snapshot."""
    return Ledger(ddb, tables.data)
