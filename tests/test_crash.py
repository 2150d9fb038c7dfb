"""Crash safety: a coordinator dies around any DynamoDB call; another one completes the job.

For each fault kind and every call index of a transaction that locks, inserts,
updates, deletes and read-locks items and then commits (or rolls back), the
coordinator is killed there; a fresh coordinator then sweeps (or resumes) the
transaction. The result must be all or nothing, matching the decided state,
with no lock attribute, image or TX record left not completed.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from ddbtx import (
    SweepOutcome,
    Transaction,
    TransactionManager,
    TransactionOutcomeUnknownError,
    TransactionRolledBackError,
)
from ddbtx import schema as s
from ddbtx._item_steps import add as _adding
from ddbtx.chaos import Chaos, Crash
from ddbtx.errors import DdbtxError, Throttled
from helpers import LostAnswer, Tables, assert_clean, clear, data_state

SEED = {"a": 100, "b": 5, "d": 1}
AFTER_COMMIT = {"a": 90, "b": 15, "n": 7}


def reset(ddb: Any, tables: Tables) -> None:
    clear(ddb, tables)
    for pk, balance in SEED.items():
        ddb.put_item(TableName=tables.data, Item={"pk": {"S": pk}, "balance": {"N": str(balance)}})


def balances(ddb: Any, tables: Tables) -> dict[str, int]:
    return {pk: int(item["balance"]["N"]) for pk, item in data_state(ddb, tables.data).items()}


def run_requests(tx: Any, table: str) -> None:
    """Every request kind: update, insert, delete, read lock upgraded to a write."""
    add = "ADD balance :n"
    tx.update_item(
        TableName=table,
        Key={"pk": {"S": "a"}},
        UpdateExpression="SET balance = balance - :n",
        ConditionExpression="balance >= :n",
        ExpressionAttributeValues={":n": {"N": "10"}},
    )
    tx.put_item(TableName=table, Item={"pk": {"S": "n"}, "balance": {"N": "7"}})
    tx.delete_item(TableName=table, Key={"pk": {"S": "d"}})
    tx.get_item(TableName=table, Key={"pk": {"S": "b"}})
    tx.get_item(TableName=table, Key={"pk": {"S": "missing"}})
    tx.update_item(
        TableName=table,
        Key={"pk": {"S": "b"}},
        UpdateExpression=add,
        ExpressionAttributeValues={":n": {"N": "10"}},
    )


def expected_for(tm: TransactionManager, tx_id: str) -> dict[str, int]:
    header = tm.protocol.run(tm.protocol.records.read_header(tx_id))
    committed = header is not None and header.state == s.STATE_COMMITTED
    return AFTER_COMMIT if committed else SEED


@pytest.mark.parametrize("ending", ["commit", "rollback"])
# Throttling past the retries is also covered by a single test below; here it is slow.
@pytest.mark.parametrize(
    "kind", ["before", "after", pytest.param("throttle", marks=pytest.mark.slow)]
)
@pytest.mark.fault_product("kind")
def test_given_a_crash_at_any_call_when_a_sweeper_completes_then_all_or_nothing(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, kind: str, ending: str
) -> None:
    schedules = 0
    for index in range(200):
        # Given a fresh table and a coordinator that dies at call `index`
        reset(ddb, tables)
        # One attempt per call: a throttled call is final at once (retry exhaustion).
        victim = make_tm(max_workers=1, max_attempts=1)
        chaos = Chaos(victim.client)
        chaos.arm(kind, at=index)  # type: ignore[arg-type]
        tx = victim.begin()
        try:
            run_requests(tx, tables.data)
            getattr(tx, ending)()
        except (Crash, DdbtxError):
            pass
        if not chaos.fired:
            break
        schedules += 1
        # When another coordinator sweeps the record
        rescuer = make_tm()
        rescuer.sweep(tx.id, rollback_after=timedelta(0), delete_after=timedelta(hours=1))
        # Then the outcome matches the decided state, and nothing is left
        assert balances(ddb, tables) == expected_for(rescuer, tx.id), f"fault at call {index}"
        assert_clean(ddb, tables)
    assert schedules >= 15, "the transaction should make at least 15 DynamoDB calls"


@pytest.mark.parametrize("kind", ["before", "after"])
def test_given_a_crash_during_commit_when_another_coordinator_resumes_then_it_commits(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, kind: str
) -> None:
    for index in range(50):
        reset(ddb, tables)
        victim = make_tm(max_workers=1)
        tx = victim.begin()
        run_requests(tx, tables.data)
        chaos = Chaos(victim.client)
        chaos.arm(kind, at=index)  # type: ignore[arg-type]
        with contextlib.suppress(Crash):
            tx.commit()
        if not chaos.fired:
            break
        make_tm().resume(tx.id).commit()
        assert balances(ddb, tables) == AFTER_COMMIT, f"fault at commit call {index}"
        assert_clean(ddb, tables)


@pytest.mark.parametrize("ending", ["commit", "rollback"])
@pytest.mark.fault_product("ending")
def test_given_lost_responses_at_any_call_when_the_sdk_retries_then_the_transaction_succeeds(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, ending: str
) -> None:
    """Each write is applied, its response lost, and botocore sends it again."""
    for index in range(200):
        reset(ddb, tables)
        coordinator = make_tm(max_workers=1)
        chaos = Chaos(coordinator.client)
        chaos.arm("lost", at=index)
        tx = coordinator.begin()
        run_requests(tx, tables.data)
        getattr(tx, ending)()
        if not chaos.fired:
            break
        assert balances(ddb, tables) == (AFTER_COMMIT if ending == "commit" else SEED), index
        assert_clean(ddb, tables)


def decides_commit(body: bytes) -> bool:
    """The request that moves a TX record to committed (a decision, or a record made so)."""
    params = json.loads(body or b"{}")
    committed = {"S": s.STATE_COMMITTED}
    return (
        params.get("ExpressionAttributeValues", {}).get(":to") == committed
        or params.get("Item", {}).get(s.TX_STATE) == committed
    )


@pytest.fixture
def janitor_deletes(make_tm: Callable[..., TransactionManager]) -> Callable[[list[str]], None]:
    """A janitor that completes the last of ``ids`` if still decided, then deletes it."""
    janitor = make_tm()
    ages = {"rollback_after": timedelta(0), "delete_after": timedelta(0)}

    def run(ids: list[str]) -> None:
        outcome = janitor.sweep(ids[-1], **ages)
        if outcome is not SweepOutcome.DELETED:
            assert outcome is SweepOutcome.ROLLED_FORWARD
            assert janitor.sweep(ids[-1], **ages) is SweepOutcome.DELETED

    return run


@pytest.mark.parametrize("end", ["commit", "run"])
def test_given_a_lost_commit_answer_when_a_janitor_deletes_the_record_then_the_outcome_is_unknown(
    make_tm: Callable[..., TransactionManager],
    ddb: Any,
    tables: Tables,
    janitor_deletes: Callable[[list[str]], None],
    end: str,
) -> None:
    # Given a commit decision that is applied, its answer lost, and before botocore
    # resends it a janitor completes the committed record and deletes it
    reset(ddb, tables)
    coordinator = make_tm(max_workers=1)
    ids: list[str] = []
    lost = LostAnswer(coordinator.client, decides_commit, lambda: janitor_deletes(ids))

    def work(tx: Transaction) -> None:
        ids.append(tx.id)
        run_requests(tx, tables.data)

    # When the coordinator commits (its resend refused, the record gone)
    with pytest.raises(TransactionOutcomeUnknownError, match="commit decision"):
        if end == "run":
            coordinator.run(work, attempts=3)
        else:
            tx = coordinator.begin()
            work(tx)
            tx.commit()
    # Then it does not claim a rollback the items contradict, nor run the work again
    assert lost.fired and len(ids) == 1
    assert balances(ddb, tables) == AFTER_COMMIT
    assert_clean(ddb, tables)
    if end == "commit":  # and the transaction stays unknown, whatever is asked of it next
        for then in (tx.rollback, tx.commit):
            with pytest.raises(TransactionOutcomeUnknownError):
                then()


def test_given_a_lost_answer_of_an_exactly_once_empty_commit_when_its_record_goes_then_unknown(
    make_tm: Callable[..., TransactionManager],
    tables: Tables,
    janitor_deletes: Callable[[list[str]], None],
) -> None:
    # Given an exactly-once transaction with no request, whose committed record is made,
    # its answer lost and the resend refused (the record exists); then, before the
    # coordinator reads the record, a janitor deletes it
    coordinator = make_tm()
    tx = coordinator.begin(transaction_id="empty-payment")
    lost = LostAnswer(coordinator.client, decides_commit, lambda: None)

    def janitor_before_the_read(params: dict[str, Any], **_: Any) -> None:
        if lost.fired and params.get("TableName") == tables.tx:
            coordinator.client.meta.events.unregister(
                "provide-client-params.dynamodb.GetItem", janitor_before_the_read
            )
            janitor_deletes([tx.id])

    coordinator.client.meta.events.register(
        "provide-client-params.dynamodb.GetItem", janitor_before_the_read
    )
    # When it commits, Then it cannot tell: the deleted record may have been its own
    with pytest.raises(TransactionOutcomeUnknownError):
        tx.commit()
    assert lost.fired


def test_given_throttling_past_the_sdk_retries_then_the_caller_sees_it_and_a_sweep_recovers(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables
) -> None:
    # Given a coordinator whose commit call is throttled on every one of its 2 attempts
    reset(ddb, tables)
    coordinator = make_tm(max_attempts=2)
    tx = coordinator.begin()
    run_requests(tx, tables.data)
    chaos = Chaos(coordinator.client)
    chaos.arm("throttle", at=0)
    # When
    with pytest.raises(Throttled, match="ProvisionedThroughputExceeded"):
        tx.commit()
    # Then both attempts were sent, and a later sweep rolls the transaction back
    assert chaos.calls == ["UpdateItem"]
    make_tm().sweep(tx.id, rollback_after=timedelta(0), delete_after=timedelta(hours=1))
    assert balances(ddb, tables) == SEED
    assert_clean(ddb, tables)


@pytest.mark.parametrize("ending", ["commit", "rollback"])
@pytest.mark.parametrize("record", ["completed", "deleted"])
def test_given_a_coordinator_paused_past_the_rollback_age_when_it_wakes_then_it_leaves_nothing(
    make_tm: Callable[..., TransactionManager], ddb: Any, tables: Tables, record: str, ending: str
) -> None:
    # Given a coordinator that stalls right before locking its second item...
    reset(ddb, tables)
    victim = make_tm(max_workers=1)
    rescuer = make_tm()
    tx = victim.begin()
    stalled = []

    def sweeper_runs_meanwhile(params: dict[str, Any], **_: Any) -> None:
        if params.get("Key") == {"pk": {"S": "b"}} and not stalled:
            stalled.append(True)
            ages = {"rollback_after": timedelta(0), "delete_after": timedelta(0)}
            assert rescuer.sweep(tx.id, **ages).value == "rolled_back"
            if record == "deleted":
                assert rescuer.sweep(tx.id, **ages).value == "deleted"

    victim.client.meta.events.register(
        "provide-client-params.dynamodb.UpdateItem", sweeper_runs_meanwhile
    )
    tx.put_item(TableName=tables.data, Item={"pk": {"S": "n"}, "balance": {"N": "7"}})
    # ...while a sweeper rolls it back: its late lock and write on b land after the sweep
    tx.update_item(
        TableName=tables.data,
        Key={"pk": {"S": "b"}},
        UpdateExpression="ADD balance :n",
        ExpressionAttributeValues={":n": {"N": "10"}},
    )
    # When it goes on to commit (and learns it was rolled back, even once the record is
    # gone: to the caller it was rolled back), or to roll back itself (quietly: it was)
    if ending == "commit":
        with pytest.raises(TransactionRolledBackError):
            tx.commit()
    else:
        tx.rollback()
    # Then its late lock and write were undone by itself: nothing changed, nothing left
    assert stalled
    assert balances(ddb, tables) == SEED
    assert_clean(ddb, tables)


@pytest.mark.parametrize("kind", ["before", "after", pytest.param("lost", marks=pytest.mark.slow)])
def test_given_a_fault_at_any_call_of_batched_writes_then_all_or_nothing(
    make_tm: Callable[..., TransactionManager],
    ddb: Any,
    tables: Tables,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """write_all: the record's creation with a batch, then chunked adds sent together."""
    monkeypatch.setattr(_adding, "ADD_BATCH", 2)  # 3 requests: two chunks at once

    def bump(pk: str, n: int) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": tables.data,
                "Key": {"pk": {"S": pk}},
                "UpdateExpression": "ADD balance :n",
                "ExpressionAttributeValues": {":n": {"N": str(n)}},
            }
        }

    schedules = 0
    for index in range(100):
        reset(ddb, tables)
        victim = make_tm(max_workers=1)
        chaos = Chaos(victim.client)
        chaos.arm(kind, at=index)  # type: ignore[arg-type]
        tx = victim.begin()
        with contextlib.suppress(Crash):
            tx.write_all([bump("a", -10)])
            tx.write_all(
                [
                    bump("b", 10),
                    bump("n", 7),
                    {"Delete": {"TableName": tables.data, "Key": {"pk": {"S": "d"}}}},
                ]
            )
            tx.commit()
        if not chaos.fired:
            break
        schedules += 1
        make_tm().sweep(tx.id, rollback_after=timedelta(0), delete_after=timedelta(hours=1))
        assert balances(ddb, tables) == expected_for(victim, tx.id), f"{kind} at call {index}"
        assert_clean(ddb, tables)
    assert schedules >= 12, "two batches and a commit make at least 12 DynamoDB calls"
