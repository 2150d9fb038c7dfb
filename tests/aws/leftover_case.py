"""Not collected by default (no ``test_`` prefix): the runner's own tests pass it with
``--path`` to stand for a remote test that fails and leaves a table behind."""

from __future__ import annotations

from typing import Any

import pytest

from aws.backend import remote_selected, table_prefix


def test_leaves_a_table_and_fails(backend: Any, ddb: Any) -> None:
    if not remote_selected():
        pytest.skip("only under python -m tests.aws.run")
    # The suite's own fixtures chose the remote backend and the run's table prefix ...
    assert backend.kind == "aws" and table_prefix()
    # ... and a table made outside the table_name fixture is never deleted by the test
    ddb.create_table(
        TableName=f"{table_prefix()}orphan",
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
    )
    pytest.fail("deliberate: a failed test must not keep its tables")
