"""Batched writes (one add, concurrent locks) and retries of interrupted requests."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from botocore.exceptions import ClientError

from ddbtx import (
    ConditionalCheckFailedError,
    DuplicateRequestError,
    InvalidRequestError,
    TransactionManager,
    TransactionRolledBackError,
)
from ddbtx import schema as s
from ddbtx._item_steps import add as _adding
from ddbtx.chaos import Chaos
from ddbtx.errors import Throttled
from ddbtx.instrumentation import count_requests
from helpers import Tables, assert_clean, data_state


def updates(tables: Tables, keys: list[str], amount: int) -> list[dict[str, Any]]:
    return [
        {
            "Update": {
                "TableName": tables.data,
                "Key": {"pk": {"S": k}},
                "UpdateExpression": "ADD balance :n",
                "ExpressionAttributeValues": {":n": {"N": str(amount)}},
            }
        }
        for k in keys
    ]


def test_given_25_writes_when_written_as_one_batch_then_one_write_records_them_all(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given 20 existing items and 5 new ones
    keys = [f"k{i:02d}" for i in range(25)]
    seed(**{k: 1 for k in keys[:20]})
    tm.key_names(tables.data)
    tx = tm.begin()
    # When
    with count_requests(tm.client) as counts:
        results = tx.write_all(updates(tables, keys, 2))
    more = tx.write_all(updates(tables, [f"m{i:02d}" for i in range(45)], 1))
    tx.commit()
    # Then: the record is created with all 25, then 25 locks, 20 applies, 5 missed guesses
    # whose inserts carry their writes
    assert results == [{}] * 25
    assert counts.by_operation["PutItem"] == 1
    assert counts.by_operation["UpdateItem"] == 25 + 20 + 5
    assert counts.by_operation["GetItem"] == 5  # the 5 new items: their lock guess missed
    state = data_state(ddb, tables.data)
    assert [state[k]["balance"]["N"] for k in keys] == ["3"] * 20 + ["2"] * 5
    assert more == [{}] * 45 and len(state) == 70  # a second batch: 3 chunks added together
    assert_clean(ddb, tables)


def test_given_a_batch_with_a_false_condition_then_the_whole_transaction_rolls_back(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Any
) -> None:
    seed(a=1, b=1)
    before = data_state(ddb, tables.data)
    batch = updates(tables, ["a"], 5)
    batch.append(
        {
            "Update": {
                "TableName": tables.data,
                "Key": {"pk": {"S": "b"}},
                "UpdateExpression": "SET balance = balance - :n",
                "ConditionExpression": "balance >= :n",
                "ExpressionAttributeValues": {":n": {"N": "5"}},
            }
        }
    )
    tx = tm.begin()
    with pytest.raises(ConditionalCheckFailedError):
        tx.write_all(batch)
    assert tx.state == s.STATE_ROLLED_BACK
    assert data_state(ddb, tables.data) == before
    assert_clean(ddb, tables)


@pytest.mark.parametrize("at", [0, 1, 2])
def test_given_a_throttled_request_when_it_is_retried_unchanged_then_it_completes_once(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any, at: int
) -> None:
    # Given a request whose add (0), lock (1) or apply (2) call was throttled past the retries
    seed(a=1)
    tm = make_tm(max_attempts=1)
    tm.key_names(tables.data)
    tx = tm.begin()
    chaos = Chaos(tm.client)
    chaos.arm("throttle", at=at)
    (request,) = updates(tables, ["a"], 10)
    with pytest.raises(Throttled):
        tx.update_item(**request["Update"])
    chaos.disarm()
    # When the caller retries the same request
    tx.update_item(**request["Update"])
    tx.commit()
    # Then it was applied exactly once
    assert data_state(ddb, tables.data)["a"]["balance"] == {"N": "11"}
    assert_clean(ddb, tables)


def throttled_after_applying(client: Any) -> None:
    """The next call is applied, then the client sees throttling (its answer lost and
    every retry throttled): the caller cannot know the write landed."""
    fired: list[bool] = []

    def after(**_: Any) -> None:
        if not fired:
            fired.append(True)
            error = {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "x"}}
            raise ClientError(error, "UpdateItem")

    client.meta.events.register("after-call.dynamodb.UpdateItem", after)


@pytest.mark.parametrize("landed", [False, True])
def test_given_an_add_whose_outcome_is_unknown_when_retried_unchanged_then_it_completes_once(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any, landed: bool
) -> None:
    # Given a transaction holding a, whose add of b to the record failed with throttling,
    # either before it was applied or after (the caller cannot tell which)
    seed(a=1, b=1)
    tm = make_tm(max_attempts=1)
    tm.key_names(tables.data)
    tx = tm.begin()
    first, second = updates(tables, ["a", "b"], 10)
    tx.update_item(**first["Update"])
    chaos = Chaos(tm.client)
    if landed:
        throttled_after_applying(tm.client)
    else:
        chaos.arm("throttle", at=0)  # the add of b to the existing record
    with pytest.raises(Throttled):
        tx.update_item(**second["Update"])
    chaos.disarm()
    # When the caller retries the same request (re-added under the same nonce, which the
    # record recognises if the first add landed)
    tx.update_item(**second["Update"])
    tx.commit()
    # Then each was applied exactly once
    state = data_state(ddb, tables.data)
    assert [state[k]["balance"] for k in "ab"] == [{"N": "11"}, {"N": "11"}]
    assert_clean(ddb, tables)


def test_given_an_interrupted_request_when_a_different_one_targets_the_item_then_duplicate(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    seed(a=1)
    tm = make_tm(max_attempts=1)
    tm.key_names(tables.data)
    tx = tm.begin()
    chaos = Chaos(tm.client)
    chaos.arm("throttle", at=1)
    with pytest.raises(Throttled):
        tx.update_item(**updates(tables, ["a"], 10)[0]["Update"])
    chaos.disarm()
    with pytest.raises(DuplicateRequestError, match="interrupted"):
        tx.delete_item(TableName=tables.data, Key={"pk": {"S": "a"}})
    tx.commit()  # the commit catches the interrupted request up
    assert data_state(ddb, tables.data)["a"]["balance"] == {"N": "11"}
    assert_clean(ddb, tables)


@pytest.mark.parametrize(
    ("batch", "error", "message"),
    [
        ("not a list", InvalidRequestError, "must be a list"),
        ([{"Get": {}}], InvalidRequestError, "each request is one of"),
        ([{"Put": "x"}], InvalidRequestError, "must be a dict"),
        ("dup", DuplicateRequestError, "twice in the batch"),
        ("reserved", InvalidRequestError, "reserved prefix"),
    ],
)
def test_given_a_bad_batch_when_written_then_nothing_is_written_and_the_transaction_stays_usable(
    tm: TransactionManager, ddb: Any, tables: Tables, batch: Any, error: type, message: str
) -> None:
    # Given
    if batch == "dup":
        batch = updates(tables, ["a", "a"], 1)
    elif batch == "reserved":
        batch = [
            {"Put": {"TableName": tables.data, "Item": {"pk": {"S": "a"}, "_tx:id": {"S": "x"}}}}
        ]
    tx = tm.begin()
    # When
    with count_requests(tm.client) as counts, pytest.raises(error, match=message):
        tx.write_all(batch)
    # Then
    assert counts.writes == 0
    tx.write_all(updates(tables, ["ok"], 1))
    tx.commit()
    assert list(data_state(ddb, tables.data)) == ["ok"]
    assert_clean(ddb, tables)


def test_given_a_batch_whose_later_chunk_is_refused_after_an_earlier_one_was_added_then_rollback(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a transaction that adds a batch one request per record write (the writes go
    # out together), and another coordinator of it that already added b
    monkeypatch.setattr(_adding, "ADD_BATCH", 1)
    seed(a=1, b=1, c=1)
    before = data_state(ddb, tables.data)
    tx = make_tm().begin()
    tx.write_all(updates(tables, ["c"], 1))
    other = make_tm().resume(tx.id)
    other.write_all(updates(tables, ["b"], 100))
    # When it writes a and b in one batch: a is added, b is refused
    with pytest.raises(DuplicateRequestError):
        tx.write_all(updates(tables, ["a", "b"], 10))
    # Then the record cannot take a back, so the transaction was rolled back: nothing of
    # the refused batch (or of the transaction) is ever applied, and nothing is left
    assert tx.state == s.STATE_ROLLED_BACK
    with pytest.raises(TransactionRolledBackError):
        other.commit()
    assert data_state(ddb, tables.data) == before
    assert_clean(ddb, tables)


def test_given_a_default_boto3_client_when_a_manager_is_made_then_it_fits_the_pool_quietly(
    backend: Any, tables: Tables, caplog: pytest.LogCaptureFixture
) -> None:
    import boto3

    from ddbtx.local import LOCAL_CREDENTIALS

    # Given a client as boto3 makes it by default (10 HTTP connections)
    plain = boto3.client("dynamodb", endpoint_url=backend.endpoint_url, **LOCAL_CREDENTIALS)
    # When a manager is made on it without max_workers
    with caplog.at_level("DEBUG", logger="ddbtx"):
        tm = TransactionManager(plain, tables.tx, tables.images)
    # Then it runs as many item steps as the pool holds, and says so at debug level only
    assert tm.p.max_workers == 10
    about_pool = [r for r in caplog.records if "HTTP connections" in r.getMessage()]
    assert [r.levelname for r in about_pool] == ["DEBUG"]
    assert "the client keeps 10 HTTP connections" in about_pool[0].getMessage()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    # And a transaction on it works as on any other
    with tm.transaction() as tx:
        tx.put_item(TableName=tables.data, Item={"pk": {"S": "p"}})
    assert_clean(plain, tables)


def test_given_a_client_pool_smaller_than_the_workers_when_a_manager_is_made_then_it_warns(
    backend: Any, tables: Tables, caplog: pytest.LogCaptureFixture
) -> None:
    import boto3
    from botocore.config import Config

    from ddbtx.local import LOCAL_CREDENTIALS

    # Given a client keeping botocore's default 10 connections
    small = boto3.client(
        "dynamodb",
        endpoint_url=backend.endpoint_url,
        config=Config(max_pool_connections=10),
        **LOCAL_CREDENTIALS,
    )
    # When a manager runs up to 32 steps at once on it
    with caplog.at_level("WARNING", logger="ddbtx.manager"):
        TransactionManager(small, tables.tx, tables.images, max_workers=32)
    # Then it says how to size the pool
    assert "max_pool_connections=32" in caplog.text
    # And the emulator's own clients are sized for the default pool
    caplog.clear()
    with caplog.at_level("WARNING", logger="ddbtx.manager"):
        TransactionManager(backend.client(), tables.tx, tables.images)
    assert caplog.text == ""
