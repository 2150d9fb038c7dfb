"""Transaction semantics: atomicity, validation, return values, read-your-writes, resume."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from ddbtx import (
    ConditionalCheckFailedError,
    InvalidRequestError,
    SweepOutcome,
    TransactionCommittedError,
    TransactionManager,
    TransactionNotFoundError,
    TransactionRolledBackError,
)
from ddbtx import schema as s
from ddbtx.chaos import Chaos, Crash
from ddbtx.errors import TableNotFound
from ddbtx.instrumentation import count_requests
from helpers import Tables, assert_clean, data_state, records_left, scan

N = lambda n: {"N": str(n)}  # noqa: E731
S = lambda v: {"S": v}  # noqa: E731


def key(pk: str) -> dict[str, Any]:
    return {"pk": S(pk)}


def add_to(tx: Any, table: str, pk: str, amount: int, **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = tx.update_item(
        TableName=table,
        Key=key(pk),
        UpdateExpression="ADD balance :n",
        ExpressionAttributeValues={":n": N(amount)},
        **extra,
    )
    return result


RICH_ITEM = {
    "pk": S("rich"),
    "m": {"M": {"nested": {"L": [N(1), S("x"), {"BOOL": False}, {"NULL": True}]}}},
    "ss": {"SS": ["b", "a"]},
    "ns": {"NS": ["1.50", "2"]},
    "b": {"B": b"\x00\x01bytes"},
    "n": N("12.300"),
}


# --- atomicity --------------------------------------------------------------------


def test_given_mixed_requests_when_committed_then_all_apply_and_nothing_is_left(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given
    seed(a=100, b=5, gone=1)
    tx = tm.begin()
    # When
    add_to(tx, tables.data, "a", -30)
    add_to(tx, tables.data, "b", 30)
    tx.put_item(TableName=tables.data, Item={"pk": S("new"), "balance": N(7)})
    tx.delete_item(TableName=tables.data, Key=key("gone"))
    assert tx.get_item(TableName=tables.data, Key=key("missing")) == {}
    tx.commit()
    # Then
    assert data_state(ddb, tables.data) == {
        "a": {"pk": S("a"), "balance": N(70)},
        "b": {"pk": S("b"), "balance": N(35)},
        "new": {"pk": S("new"), "balance": N(7)},
    }
    assert_clean(ddb, tables)


def test_given_applied_writes_when_rolled_back_then_items_are_byte_for_byte_as_before(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given
    seed(a=100, gone=1)
    ddb.put_item(TableName=tables.data, Item=RICH_ITEM)
    before = data_state(ddb, tables.data)
    tx = tm.begin()
    add_to(tx, tables.data, "a", -30)
    tx.update_item(
        TableName=tables.data,
        Key=key("rich"),
        UpdateExpression="SET m.nested[0] = :v REMOVE ss ADD ns :n",
        ExpressionAttributeValues={":v": S("changed"), ":n": {"NS": ["9"]}},
    )
    tx.put_item(TableName=tables.data, Item={"pk": S("new"), "balance": N(7)})
    tx.delete_item(TableName=tables.data, Key=key("gone"))
    tx.get_item(TableName=tables.data, Key=key("missing"))
    # When
    tx.rollback()
    # Then
    assert data_state(ddb, tables.data) == before
    assert_clean(ddb, tables)
    assert tx.state == s.STATE_ROLLED_BACK


def test_given_a_with_block_when_it_raises_then_the_transaction_rolls_back_and_the_error_propagates(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given
    seed(a=100)
    before = data_state(ddb, tables.data)
    # When
    with pytest.raises(KeyError, match="boom"), tm.transaction() as tx:
        add_to(tx, tables.data, "a", -30)
        raise KeyError("boom")
    # Then
    assert data_state(ddb, tables.data) == before
    assert records_left(ddb, tables.tx) == []  # completed, and kept as a fence
    assert_clean(ddb, tables)


def test_given_a_with_block_when_it_ends_then_it_commits_and_deletes_the_record(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Any
) -> None:
    seed(a=100)
    with tm.transaction() as tx:
        add_to(tx, tables.data, "a", 1)
    assert data_state(ddb, tables.data)["a"]["balance"] == N(101)
    assert tx.state == s.STATE_COMMITTED
    assert records_left(ddb, tables.tx) == []


def test_given_an_empty_transaction_when_committed_then_nothing_is_written(
    tm: TransactionManager, ddb: Any, tables: Tables
) -> None:
    tx = tm.begin()
    with count_requests(tm.client) as counts:
        tx.commit()
        tx.delete()
    assert counts.total == 0
    assert records_left(ddb, tables.tx) == []


# --- bad input: rejected before anything is written, transaction still usable ---------


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"Item": {"pk": S("x"), "_tx:id": S("forged")}}, "reserved prefix"),
        ({"Item": {"balance": N(1)}}, "Missing the key pk in the item"),
        ({"Item": {"pk": S("")}}, "cannot contain an empty string value. Key: pk"),
        # DynamoDB's words (moto's own: "Return values set to invalid value")
        ({"Item": {"pk": S("x")}, "ReturnValues": "ALL_NEW"}, "ReturnValues|Return values"),
        (
            {
                "Item": {"pk": S("x")},
                "ConditionExpression": "attribute_not_exists(#a)",
                "ExpressionAttributeNames": {"#a": "_tx:ap"},
            },
            "reserved prefix",
        ),
        ({"Item": {"pk": S("x"), "big": S("x" * (400 * 1024 - 40))}}, "400 KB"),
        ({"Item": {"pk": S("x")}, "ReturnItemCollectionMetrics": "SIZE"}, "does not support"),
    ],
)
def test_given_a_bad_put_when_requested_then_it_is_rejected_and_the_transaction_stays_usable(
    tm: TransactionManager, ddb: Any, tables: Tables, params: dict[str, Any], message: str
) -> None:
    # Given
    tx = tm.begin()
    # When
    with pytest.raises(InvalidRequestError, match=message) as caught:
        tx.put_item(TableName=tables.data, **params)
    # Then
    assert tx.id in str(caught.value)
    assert scan(ddb, tables.data) == [] and records_left(ddb, tables.tx) == []
    tx.put_item(TableName=tables.data, Item={"pk": S("ok")})
    tx.commit()
    assert list(data_state(ddb, tables.data)) == ["ok"]
    assert_clean(ddb, tables)


@pytest.mark.parametrize(
    "params",
    [
        {"Key": {}},
        {"Key": {"pk": S("a"), "extra": S("b")}},
        {"Key": {"other": S("a")}},
        {"Key": key("a"), "UpdateExpression": "   "},
        {
            "Key": key("a"),
            "UpdateExpression": "SET #x = :v",
            "ExpressionAttributeNames": {"#x": "_tx:img"},
            "ExpressionAttributeValues": {":v": N(1)},
        },
        {
            "Key": key("a"),
            "UpdateExpression": "SET a = :ddbtxl",
            "ExpressionAttributeValues": {":ddbtxl": N(1)},
        },
    ],
)
def test_given_a_bad_update_when_requested_then_it_is_rejected_before_any_write(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Any, params: dict[str, Any]
) -> None:
    seed(a=1)
    tx = tm.begin()
    params.setdefault("UpdateExpression", "SET x = :v")
    with count_requests(tm.client) as counts, pytest.raises(InvalidRequestError):
        tx.update_item(TableName=tables.data, **params)
    # At most DynamoDB was asked (an error of its own: it refuses the request whole)
    assert counts.writes <= 1
    assert data_state(ddb, tables.data) == {"a": {"pk": S("a"), "balance": N(1)}}
    assert records_left(ddb, tables.tx) == []


def test_given_a_missing_table_when_requested_then_invalid_request_names_the_table(
    tm: TransactionManager,
) -> None:
    tx = tm.begin()
    # DynamoDB's ResourceNotFoundException, as natively, and the message names the table
    with pytest.raises(TableNotFound, match="no-such-table"):
        tx.get_item(TableName="no-such-table", Key=key("a"))


def test_given_a_write_when_the_same_item_is_written_again_then_both_apply_in_order(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given a transaction that added 1 to a
    seed(a=100)
    tx = tm.begin()
    add_to(tx, tables.data, "a", 1)
    # When it adds 1 again, then deletes b and puts it back
    add_to(tx, tables.data, "a", 1)
    tx.delete_item(TableName=tables.data, Key=key("b"))
    tx.put_item(TableName=tables.data, Item={**key("b"), "balance": N(7)})
    tx.commit()
    # Then each write applied to the item as the one before left it
    assert data_state(ddb, tables.data)["a"]["balance"] == N(102)
    assert data_state(ddb, tables.data)["b"]["balance"] == N(7)
    assert_clean(ddb, tables)


# --- errors found when applying roll the whole transaction back ------------------------


def test_given_a_false_user_condition_when_applied_then_the_whole_transaction_rolls_back(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Any
) -> None:
    seed(a=10, b=0)
    before = data_state(ddb, tables.data)
    tx = tm.begin()
    add_to(tx, tables.data, "b", 50)
    with pytest.raises(ConditionalCheckFailedError, match=tables.data):
        tx.update_item(
            TableName=tables.data,
            Key=key("a"),
            UpdateExpression="SET balance = balance - :n",
            ConditionExpression="balance >= :n",
            ExpressionAttributeValues={":n": N(50)},
        )
    assert tx.state == s.STATE_ROLLED_BACK
    assert data_state(ddb, tables.data) == before
    assert_clean(ddb, tables)
    with pytest.raises(TransactionRolledBackError):
        add_to(tx, tables.data, "b", 1)


@pytest.mark.parametrize(
    ("params", "exists"),
    [
        ({"ConditionExpression": "attribute_exists(pk)"}, False),
        ({"ConditionExpression": "attribute_not_exists(pk)"}, True),
    ],
)
def test_given_an_existence_condition_when_it_is_false_then_condition_failed(
    tm: TransactionManager,
    ddb: Any,
    tables: Tables,
    seed: Any,
    params: dict[str, Any],
    exists: bool,
) -> None:
    if exists:
        seed(x=1)
    before = data_state(ddb, tables.data)
    tx = tm.begin()
    with pytest.raises(ConditionalCheckFailedError):
        tx.put_item(TableName=tables.data, Item={"pk": S("x"), "v": N(2)}, **params)
    assert data_state(ddb, tables.data) == before
    assert_clean(ddb, tables)


def test_given_an_insert_condition_when_true_then_the_item_is_created(
    tm: TransactionManager, ddb: Any, tables: Tables
) -> None:
    tx = tm.begin()
    tx.put_item(
        TableName=tables.data,
        Item={"pk": S("x"), "v": N(2)},
        ConditionExpression="attribute_not_exists(pk)",
    )
    tx.commit()
    assert data_state(ddb, tables.data) == {"x": {"pk": S("x"), "v": N(2)}}


def test_given_a_type_error_when_applied_then_invalid_request_and_rolled_back(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Any
) -> None:
    seed(a=1)
    ddb.put_item(TableName=tables.data, Item={"pk": S("s"), "foo": S("text")})
    before = data_state(ddb, tables.data)
    tx = tm.begin()
    add_to(tx, tables.data, "a", 5)
    with pytest.raises(InvalidRequestError, match="rejected"):
        tx.update_item(
            TableName=tables.data,
            Key=key("s"),
            UpdateExpression="ADD foo :one",
            ExpressionAttributeValues={":one": N(1)},
        )
    assert tx.state == s.STATE_ROLLED_BACK
    assert data_state(ddb, tables.data) == before
    assert_clean(ddb, tables)


# --- return values match boto3's ---------------------------------------------------------


@pytest.mark.parametrize("rv", ["NONE", "ALL_OLD", "UPDATED_OLD", "ALL_NEW", "UPDATED_NEW"])
@pytest.mark.parametrize("exists", [True, False])
def test_given_return_values_when_updating_then_they_match_a_plain_update(
    tm: TransactionManager, ddb: Any, tables: Tables, rv: str, exists: bool
) -> None:
    # Given the same item in two places: one updated plainly, one in a transaction
    for pk in ("plain", "txn"):
        if exists:
            ddb.put_item(TableName=tables.data, Item={"pk": S(pk), "a": N(1), "b": S("keep")})
    update = {
        "UpdateExpression": "SET a = if_not_exists(a, :z) + :one, c = :c",
        "ExpressionAttributeValues": {":one": N(1), ":z": N(0), ":c": S("new")},
        "ReturnValues": rv,
    }
    expected = ddb.update_item(TableName=tables.data, Key=key("plain"), **update)
    expected.pop("ResponseMetadata")
    tx = tm.begin()
    # When
    got = tx.update_item(TableName=tables.data, Key=key("txn"), **update)
    tx.commit()

    # Then
    def attributes(result: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in result.get("Attributes", {}).items() if k != "pk"}

    assert attributes(got) == attributes(expected)
    assert set(got) <= {"Attributes"}


@pytest.mark.parametrize("op", ["put", "delete"])
def test_given_all_old_when_replacing_or_deleting_then_the_old_item_is_returned(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Any, op: str
) -> None:
    seed(a=1)
    tx = tm.begin()
    if op == "put":
        got = tx.put_item(
            TableName=tables.data, Item={"pk": S("a"), "x": N(2)}, ReturnValues="ALL_OLD"
        )
    else:
        got = tx.delete_item(TableName=tables.data, Key=key("a"), ReturnValues="ALL_OLD")
    assert got == {"Attributes": {"pk": S("a"), "balance": N(1)}}
    tx.commit()
    assert_clean(ddb, tables)


# --- reads inside a transaction ----------------------------------------------------------


def test_given_own_writes_when_read_in_the_transaction_then_they_are_visible(
    tm: TransactionManager, tables: Tables, seed: Any
) -> None:
    seed(a=1, d=1)
    tx = tm.begin()
    add_to(tx, tables.data, "a", 10)
    tx.put_item(TableName=tables.data, Item={"pk": S("n"), "v": N(3)})
    tx.delete_item(TableName=tables.data, Key=key("d"))
    assert tx.get_item(TableName=tables.data, Key=key("a")) == {
        "Item": {"pk": S("a"), "balance": N(11)}
    }
    assert tx.get_item(TableName=tables.data, Key=key("n")) == {"Item": {"pk": S("n"), "v": N(3)}}
    assert tx.get_item(TableName=tables.data, Key=key("d")) == {}
    tx.rollback()


def test_given_a_read_lock_when_the_item_is_then_written_then_the_lock_is_upgraded(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Any
) -> None:
    seed(a=1)
    tx = tm.begin()
    assert tx.get_item(TableName=tables.data, Key=key("a"))["Item"]["balance"] == N(1)
    tx.update_item(
        TableName=tables.data,
        Key=key("a"),
        UpdateExpression="ADD balance :n",
        ConditionExpression="balance = :n",
        ExpressionAttributeValues={":n": N(1)},
    )
    tx.commit()
    assert data_state(ddb, tables.data)["a"]["balance"] == N(2)
    assert_clean(ddb, tables)


def test_given_a_read_lock_on_a_missing_item_when_an_insert_follows_then_its_condition_sees_no_item(
    tm: TransactionManager, ddb: Any, tables: Tables
) -> None:
    tx = tm.begin()
    assert tx.get_item(TableName=tables.data, Key=key("x")) == {}
    tx.put_item(
        TableName=tables.data,
        Item={"pk": S("x"), "v": N(1)},
        ConditionExpression="attribute_not_exists(pk)",
    )
    tx.commit()
    assert data_state(ddb, tables.data) == {"x": {"pk": S("x"), "v": N(1)}}
    assert_clean(ddb, tables)


# --- resume and sweep ------------------------------------------------------------------


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_given_a_coordinator_gone_mid_transaction_when_another_resumes_then_it_completes(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any, ending: str
) -> None:
    seed(a=100, b=0)
    before = data_state(ddb, tables.data)
    first = make_tm().begin()
    add_to(first, tables.data, "a", -10)
    add_to(first, tables.data, "b", 10)
    # When another process takes over
    other = make_tm().resume(first.id)
    getattr(other, ending)()
    # Then
    state = data_state(ddb, tables.data)
    if ending == "commit":
        assert (state["a"]["balance"], state["b"]["balance"]) == (N(90), N(10))
    else:
        assert state == before
    assert_clean(ddb, tables)
    with pytest.raises((TransactionCommittedError, TransactionRolledBackError)):
        add_to(first, tables.data, "c", 1)


def a_taken_and_resumed(make_tm: Any, tables: Tables, seed: Any) -> tuple[Any, Any]:
    """A transaction that took 10 from a (of 100; b holds 0), and a second coordinator of it."""
    seed(a=100, b=0)
    first = make_tm().begin()
    add_to(first, tables.data, "a", -10)
    return first, make_tm().resume(first.id)


def test_given_a_resumed_transaction_when_it_adds_more_requests_then_both_coordinators_commit_once(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    first, other = a_taken_and_resumed(make_tm, tables, seed)
    add_to(other, tables.data, "b", 10)
    first.commit()  # sees b was added by someone else; includes it
    other.commit()  # already committed: completes idempotently
    state = data_state(ddb, tables.data)
    assert (state["a"]["balance"], state["b"]["balance"]) == (N(90), N(10))
    assert_clean(ddb, tables)


def test_given_a_request_added_elsewhere_when_one_commits_before_it_is_locked_then_it_counts(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given a transaction that added a, and another coordinator of it that recorded b
    # but pauses before locking it, while the first one adds c and commits
    first, other = a_taken_and_resumed(make_tm, tables, seed)
    paused = []

    def first_runs_meanwhile(params: dict[str, Any], **_: Any) -> None:
        if params.get("Key") == key("b") and not paused:
            paused.append(True)
            add_to(first, tables.data, "c", 1)  # its add's answer counts b's add too
            first.commit()

    other.manager.client.meta.events.register(
        "before-parameter-build.dynamodb.UpdateItem", first_runs_meanwhile
    )
    # When the paused coordinator goes on to lock and write b, then commits
    add_to(other, tables.data, "b", 10)
    other.commit()  # already committed: completes idempotently
    # Then the commit included b: the first coordinator caught b up before deciding
    assert paused
    state = data_state(ddb, tables.data)
    assert [state[pk]["balance"] for pk in "abc"] == [N(90), N(10), N(1)]
    assert_clean(ddb, tables)


def test_given_a_request_added_elsewhere_while_one_takes_over_a_lock_then_the_commit_counts_it(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given a transaction whose coordinator recorded a and died before locking it
    seed(a=100, b=0)
    first = make_tm()
    first.key_names(tables.data)
    crash = Chaos(first.client)
    tx = first.begin()
    crash.arm("before", at=1)  # the record's creation with a, then the lock of a
    with pytest.raises(Crash):
        add_to(tx, tables.data, "a", -10)
    # And another coordinator of it that will record b and die before locking b, while
    # a third one commits it, taking a over (a new nonce in the record) meanwhile
    other = make_tm().resume(tx.id)
    other_crash = Chaos(other.manager.client)
    rescuer = make_tm().resume(tx.id)
    added = []

    def other_adds_meanwhile(params: dict[str, Any], **_: Any) -> None:
        if ":new" in params.get("UpdateExpression", "") and not added:
            added.append(True)
            other_crash.arm("before", at=1)  # its add of b, then the lock of b
            with pytest.raises(Crash):
                add_to(other, tables.data, "b", 10)

    rescuer.manager.client.meta.events.register(
        "before-parameter-build.dynamodb.UpdateItem", other_adds_meanwhile
    )
    # When the third coordinator commits (the answer to its takeover counts b's add too)
    rescuer.commit()
    # Then the commit included b: it caught b up before deciding
    assert added
    state = data_state(ddb, tables.data)
    assert [state[pk]["balance"] for pk in "ab"] == [N(90), N(10)]
    assert_clean(ddb, tables)


def test_given_an_unknown_id_when_resumed_then_not_found(tm: TransactionManager) -> None:
    with pytest.raises(TransactionNotFoundError, match="nope"):
        tm.resume("nope")


def test_given_records_of_every_age_when_swept_then_each_moves_along(
    tm: TransactionManager, clock: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given: a stale pending tx, a young pending tx, a completed tx
    seed(a=100, b=0)
    before_a = data_state(ddb, tables.data)["a"]
    stale = tm.begin()
    add_to(stale, tables.data, "a", -10)
    clock.advance(120)
    young = tm.begin()
    add_to(young, tables.data, "b", 5)
    done = tm.begin()
    add_to(done, tables.data, "c", 1)
    done.commit()
    ages = {"rollback_after": timedelta(seconds=60), "delete_after": timedelta(seconds=600)}
    # When / Then
    assert tm.sweep(stale.id, **ages) is SweepOutcome.ROLLED_BACK
    assert data_state(ddb, tables.data)["a"] == before_a
    assert tm.sweep(young.id, **ages) is SweepOutcome.ACTIVE
    assert tm.sweep(done.id, **ages) is SweepOutcome.KEPT
    clock.advance(601)
    assert tm.sweep(done.id, **ages) is SweepOutcome.DELETED
    assert tm.sweep(done.id, **ages) is SweepOutcome.MISSING
    young.commit()
    assert_clean(ddb, tables)


def test_given_a_committed_but_not_completed_record_when_swept_then_it_rolls_forward(
    tm: TransactionManager, ddb: Any, tables: Tables, seed: Any
) -> None:
    seed(a=100)
    tx = tm.begin()
    add_to(tx, tables.data, "a", -10)
    tm.protocol.run(
        tm.protocol.records.decide(tx.id, s.STATE_COMMITTED)
    )  # the coordinator died right after commit
    outcome = tm.sweep(tx.id, rollback_after=timedelta(0), delete_after=timedelta(hours=1))
    assert outcome is SweepOutcome.ROLLED_FORWARD
    assert data_state(ddb, tables.data)["a"] == {"pk": S("a"), "balance": N(90)}
    assert_clean(ddb, tables)


# --- large transactions ------------------------------------------------------------------


def test_given_large_requests_and_images_when_committed_or_rolled_back_then_all_is_cleaned(
    tm: TransactionManager, ddb: Any, tables: Tables
) -> None:
    # Given items whose images are too large to ride inside the item
    blob = "x" * (150 * 1024)
    for pk in ("big1", "big2"):
        ddb.put_item(TableName=tables.data, Item={"pk": S(pk), "blob": S(blob)})
    before = data_state(ddb, tables.data)
    for ending in ("rollback", "commit"):
        tx = tm.begin()
        for pk in ("big1", "big2"):
            tx.put_item(TableName=tables.data, Item={"pk": S(pk), "blob": S(blob + pk)})
        # The committed view comes from the images table meanwhile
        assert tm.get_item(TableName=tables.data, Key=key("big1"))["Item"] == before["big1"]
        getattr(tx, ending)()
        tx.delete()
        assert records_left(ddb, tables.tx) == [] and scan(ddb, tables.images) == []
    assert data_state(ddb, tables.data)["big2"]["blob"] == S(blob + "big2")
    assert_clean(ddb, tables)


def test_given_requests_past_the_item_limit_when_committed_crashed_and_swept_then_all_hold(
    make_tm: Any, ddb: Any, tables: Tables
) -> None:
    """The TX record spreads over several items once its requests pass 400 KB."""
    blob = "y" * (12 * 1024)

    def write_all(tx: Any, tag: str) -> None:
        for i in range(40):
            tx.put_item(TableName=tables.data, Item={"pk": S(f"k{i:02d}"), "v": S(tag + blob)})

    # Given 480 KB of requests committed in one transaction
    first = make_tm().begin()
    write_all(first, "one")
    first.commit()
    first.delete()
    committed = data_state(ddb, tables.data)
    assert len(committed) == 40 and records_left(ddb, tables.tx) == []
    # When a second one dies half-way through its requests
    victim = make_tm(max_workers=1)
    chaos = Chaos(victim.client)
    chaos.arm("before", at=100)  # past ~30 requests of 3 calls: the header has spilled
    second = victim.begin()
    with pytest.raises(Crash):
        write_all(second, "two")
    assert len(scan(ddb, tables.tx)) > 1  # header plus spilled request rows
    # Then a sweep rolls it back and removes every row of its record
    rescuer = make_tm()
    assert (
        rescuer.sweep(second.id, rollback_after=timedelta(0), delete_after=timedelta(0))
        is SweepOutcome.ROLLED_BACK
    )
    assert rescuer.sweep(second.id, rollback_after=timedelta(0), delete_after=timedelta(0)) is (
        SweepOutcome.DELETED
    )
    assert data_state(ddb, tables.data) == committed
    assert records_left(ddb, tables.tx) == []
    assert_clean(ddb, tables)
