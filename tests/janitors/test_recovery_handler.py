"""The manual recovery handler against real emulators: each action, its idempotence,
and every kind of malformed event answered with the field's name and no change."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from ddbtx import TransactionManager
from ddbtx import schema as s
from ddbtx.cli import main as cli_main
from ddbtx.locks import LeaseLockClient
from ddbtx.recovery import break_lock
from helpers import assert_clean, data_state, scan

from .support import JanitorTables, LambdaContext, abandon, drop_record, emf_metrics

pytest_plugins = ("janitors.fixtures",)

SEEDED = {"a": 100, "b": 100, "c": 100, "d": 100}


@pytest.fixture
def accounts(seed: Callable[..., None]) -> dict[str, int]:
    seed(**SEEDED)
    return SEEDED


def invoke(recovery: Any, event: Any) -> dict[str, Any]:
    answer: dict[str, Any] = recovery.handler(event, LambdaContext(function_name="ddbtx-recovery"))
    return answer


def balances(ddb: Any, table: str) -> dict[str, int]:
    return {pk: int(item["balance"]["N"]) for pk, item in data_state(ddb, table).items()}


def snapshot(ddb: Any, tables: JanitorTables) -> tuple[Any, ...]:
    """Everything the janitors could change."""
    return tuple(
        sorted(map(repr, scan(ddb, name))) for name in (tables.tx, tables.images, tables.data)
    )


def test_given_an_abandoned_transaction_when_inspected_then_state_items_and_locks_are_shown(
    recovery: Any, young_tm: TransactionManager, janitor_env: JanitorTables, accounts: Any
) -> None:
    # Given a pending transfer whose coordinator is gone
    tx_id = abandon(young_tm, janitor_env.data, "pending", ("a", "b"))

    # When an operator inspects it, and an unknown id
    answer = invoke(recovery, {"action": "inspect", "transaction_id": tx_id})
    unknown = invoke(recovery, {"action": "inspect", "transaction_id": "no-such-tx"})

    # Then both items are listed as locked by it with their writes applied
    assert answer["ok"] is True and answer["action"] == "inspect"
    result = answer["result"]
    assert (result["found"], result["state"], result["completed"]) == (True, "pending", False)
    assert result["locks_held"] == 2
    assert sorted(i["key"]["pk"]["S"] for i in result["items"]) == ["a", "b"]
    assert all(i["locked"] and i["write_applied"] for i in result["items"])
    assert (unknown["ok"], unknown["error"], unknown["transaction_id"]) == (
        False,
        "TransactionNotFound",
        "no-such-tx",
    )


@pytest.mark.parametrize(
    ("stage", "outcome", "expected"),
    [
        ("pending", "rolled_back", SEEDED),
        ("committed", "rolled_forward", {**SEEDED, "a": 90, "b": 110}),
        ("rolled_back", "completed", SEEDED),
    ],
)
def test_given_a_stuck_transaction_when_recovered_twice_then_it_completes_once(
    recovery: Any,
    young_tm: TransactionManager,
    janitor_env: JanitorTables,
    accounts: Any,
    ddb: Any,
    stage: str,
    outcome: str,
    expected: dict[str, int],
) -> None:
    # Given a transfer abandoned at `stage` (fresh: recovery does not wait for the rollback age)
    tx_id = abandon(young_tm, janitor_env.data, stage, ("a", "b"))

    # When an operator recovers it, and then repeats the request
    first = invoke(recovery, {"action": "recover", "transaction_id": tx_id})
    recovered = snapshot(ddb, janitor_env)
    second = invoke(recovery, {"action": "recover", "transaction_id": tx_id})

    # Then it is driven to its outcome once, and the repeat changes nothing
    assert first["result"]["outcome"] == outcome
    assert first["result"]["after"]["completed"] is True
    assert first["result"]["after"]["locks_held"] == 0
    assert balances(ddb, janitor_env.data) == expected
    assert_clean(ddb, janitor_env)
    assert second["result"]["outcome"] == "already_completed"
    assert snapshot(ddb, janitor_env) == recovered


def test_given_a_stuck_transaction_begun_under_a_callers_id_then_that_id_inspects_and_recovers_it(
    recovery: Any,
    young_tm: TransactionManager,
    janitor_env: JanitorTables,
    accounts: Any,
    ddb: Any,
) -> None:
    # Given a pending transfer begun under the caller's id "order-42", abandoned
    tx_id = abandon(young_tm, janitor_env.data, "pending", ("a", "b"), caller_id="order-42")

    # When on-call inspects it by the id they know, then recovers it by that id
    seen = invoke(recovery, {"action": "inspect", "transaction_id": "order-42"})["result"]
    by_internal = invoke(recovery, {"action": "inspect", "transaction_id": tx_id})["result"]
    recovered = invoke(recovery, {"action": "recover", "transaction_id": "order-42"})["result"]

    # Then both ids find the same record, which names both ids
    assert (seen["found"], seen["transaction_id"], seen["caller_id"]) == (True, tx_id, "order-42")
    assert (seen["state"], seen["locks_held"], seen["waiting"], seen["decided_by"]) == (
        "pending", 2, False, None,
    )  # fmt: skip
    ages = ("age_seconds",)  # read a moment apart
    assert {k: v for k, v in by_internal.items() if k not in ages} == {
        k: v for k, v in seen.items() if k not in ages
    }
    # And the recovery rolled back that transaction, with nothing left behind
    assert (recovered["transaction_id"], recovered["outcome"]) == (tx_id, "rolled_back")
    assert recovered["after"]["caller_id"] == "order-42"
    assert balances(ddb, janitor_env.data) == SEEDED
    assert_clean(ddb, janitor_env)


@pytest.mark.parametrize("asked", ["order-7", "x" * 1024, "é" * 512])
def test_given_an_id_that_names_neither_a_record_nor_an_alias_then_not_found_and_nothing_written(
    recovery: Any, janitor_env: JanitorTables, ddb: Any, asked: str
) -> None:
    # Given no transaction at all
    before = snapshot(ddb, janitor_env)

    # When on-call inspects and recovers an id that names nothing (1,024 UTF-8 bytes at most)
    seen = invoke(recovery, {"action": "inspect", "transaction_id": asked})
    recovered = invoke(recovery, {"action": "recover", "transaction_id": asked})

    # Then both say so, naming the id asked for, and nothing changed
    for answer in (seen, recovered):
        assert (answer["ok"], answer["error"], answer["transaction_id"]) == (
            False,
            "TransactionNotFound",
            asked,
        )
    assert snapshot(ddb, janitor_env) == before


@pytest.mark.parametrize(
    ("asked", "problem"),
    [("é" * 1000, "2000 bytes in UTF-8"), ("\ud800", "valid string")],
    ids=["over-1024-bytes", "lone-surrogate"],
)
@pytest.mark.parametrize("action", ["inspect", "recover"])
def test_given_an_id_no_transaction_can_have_then_invalid_event_naming_it_and_nothing_written(
    recovery: Any, janitor_env: JanitorTables, ddb: Any, asked: str, problem: str, action: str
) -> None:
    # Given an id within the event's 1,024 characters that no transaction can carry
    before = snapshot(ddb, janitor_env)

    # When on-call inspects or recovers it
    answer = invoke(recovery, {"action": action, "transaction_id": asked})

    # Then the answer names the field and what is wrong with it, and nothing changed
    assert answer["ok"] is False and answer["error"] == "InvalidEvent"
    ((field,),) = [[f for f in answer["fields"] if f["field"] == "transaction_id"]]
    assert problem in field["problem"]
    assert snapshot(ddb, janitor_env) == before


def test_given_an_unknown_id_when_recovered_here_and_by_the_cli_then_one_answer_with_its_causes(
    recovery: Any,
    janitor_env: JanitorTables,
    endpoint_env: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # When an operator recovers an id that has no record, with the function and the CLI
    answer = invoke(recovery, {"action": "recover", "transaction_id": "no-such-tx"})
    t = janitor_env
    capsys.readouterr()
    status = cli_main([
        "--endpoint-url", endpoint_env.endpoint_url, "--region", "us-east-1",
        "--transactions-table", t.tx, "--images-table", t.images, "--json",
        "recover", "no-such-tx",
    ])  # fmt: skip
    printed = json.loads(capsys.readouterr().out)

    # Then the function answers not found, with the table, the Region and the likely causes
    assert (answer["ok"], answer["error"], answer["action"]) == (
        False,
        "TransactionNotFound",
        "recover",
    )
    message = answer["message"]
    assert f"no transaction 'no-such-tx' in {t.tx} (us-east-1)" in message
    assert "deleted" in message and "another transactions table or Region" in message
    # And the CLI fails with the same words
    assert status == 1 and printed["reason"] == message


@pytest.mark.parametrize("full", [False, True])
def test_given_ages_in_the_event_when_sweeping_then_they_replace_the_configured_ones(
    recovery: Any,
    old_tm: TransactionManager,
    janitor_env: JanitorTables,
    accounts: Any,
    ddb: Any,
    full: bool,
) -> None:
    # Given a transfer abandoned in 2001
    abandon(old_tm, janitor_env.data, "pending", ("a", "b"))

    # When a sweep is requested with a rollback age longer than the record's age
    patient = invoke(recovery, {"action": "sweep", "rollback_after_seconds": 10**10, "full": full})
    # Then it is left alone
    assert patient["result"]["rolled_back"] == 0
    assert patient["result"]["exhausted"] is True

    # When the sweep is requested with a rollback age of a minute
    eager = invoke(
        recovery,
        {"action": "sweep", "rollback_after_seconds": 60, "delete_after_seconds": 0, "full": full},
    )
    # Then it is rolled back, and every balance is back
    assert eager["result"]["rolled_back"] == 1 and eager["result"]["stuck"] == 1
    assert balances(ddb, janitor_env.data) == SEEDED
    assert_clean(ddb, janitor_env)


def test_given_a_lock_whose_record_is_gone_when_broken_twice_then_it_is_released_once(
    recovery: Any, young_tm: TransactionManager, janitor_env: JanitorTables, accounts: Any, ddb: Any
) -> None:
    # Given a transfer whose TX record vanished while it held its locks
    t = janitor_env
    tx_id = abandon(young_tm, t.data, "pending", ("a", "b"))
    drop_record(ddb, t, tx_id)
    event = {"action": "break_lock", "table": t.data, "key": {"pk": {"S": "a"}}}

    # When an operator breaks the lock on "a", twice
    first = invoke(recovery, event)
    second = invoke(recovery, event)

    # Then "a" is restored and unlocked once; "b" is untouched; the repeat finds no lock
    assert first["result"]["outcome"] == "released"
    assert first["result"]["transaction_id"] == tx_id
    assert first["result"]["record"] == "missing"
    assert second["result"]["outcome"] == "not_locked"
    items = data_state(ddb, t.data)
    assert items["a"] == {"pk": {"S": "a"}, "balance": {"N": "100"}}
    assert items["b"][s.ATTR_LOCK]["S"].startswith(tx_id + "/")


@pytest.mark.parametrize(
    ("stage", "recovered"),
    [
        ("pending", SEEDED),
        # Decided but not completed: the committed writes stand, and undoing a lock would
        # put the image back over one of them
        ("committed", {**SEEDED, "a": 90, "b": 110}),
        ("rolled_back", SEEDED),
    ],
    ids=["pending", "committed", "rolled_back"],
)
def test_given_the_lock_of_a_transaction_not_completed_when_broken_then_it_is_refused(
    recovery: Any,
    young_tm: TransactionManager,
    janitor_env: JanitorTables,
    accounts: Any,
    ddb: Any,
    stage: str,
    recovered: dict[str, int],
) -> None:
    # Given a transfer of 10 from a to b left at `stage`, its record in place and not completed
    tx_id = abandon(young_tm, janitor_env.data, stage, ("a", "b"))
    before = snapshot(ddb, janitor_env)
    key = {"pk": {"S": "a"}}

    # When an operator tries to break its lock on "a" through the handler, and a script
    # through the library
    answer = invoke(recovery, {"action": "break_lock", "table": janitor_env.data, "key": key})
    direct = break_lock(young_tm, janitor_env.data, key)

    # Then both are refused with the reason, and nothing changes
    for result in (answer["result"], direct):
        assert result["outcome"] == "refused"
        assert result["transaction_id"] == tx_id
        assert tx_id in result["reason"] and "recover it" in result["reason"]
    assert snapshot(ddb, janitor_env) == before
    # And recovering the transaction, as the reason says, completes it as its record says
    # (a committed transfer keeps both writes)
    invoke(recovery, {"action": "recover", "transaction_id": tx_id})
    assert balances(ddb, janitor_env.data) == recovered
    assert_clean(ddb, janitor_env)


MALFORMED = [
    ({"transaction_id": "{tx}"}, "action"),
    ({"action": "rollback", "transaction_id": "{tx}"}, "action"),
    ({"action": 7, "transaction_id": "{tx}"}, "action"),
    ({"action": "recover"}, "transaction_id"),
    ({"action": "recover", "transaction_id": 42}, "transaction_id"),
    ({"action": "recover", "transaction_id": ""}, "transaction_id"),
    ({"action": "recover", "transaction_id": ["{tx}"]}, "transaction_id"),
    ({"action": "recover", "transaction_id": "{tx}", "force": True}, "force"),
    ({"action": "inspect", "transaction_id": None}, "transaction_id"),
    ({"action": "sweep", "rollback_after_seconds": "0"}, "rollback_after_seconds"),
    ({"action": "sweep", "rollback_after_seconds": -1}, "rollback_after_seconds"),
    ({"action": "sweep", "delete_after_seconds": 1.5}, "delete_after_seconds"),
    ({"action": "sweep", "page_budget": 0}, "page_budget"),
    ({"action": "sweep", "full": "yes"}, "full"),
    ({"action": "break_lock", "key": {"pk": {"S": "a"}}}, "table"),
    ({"action": "break_lock", "table": "{data}"}, "key"),
    ({"action": "break_lock", "table": "{data}", "key": {}}, "key"),
    ({"action": "break_lock", "table": "{data}", "key": {"pk": "a"}}, "key.pk"),
    ({"action": "break_lock", "table": "{data}", "key": {"pk": {"S": "a", "N": "1"}}}, "key.pk"),
    ({"action": "break_lock", "table": "{data}", "key": {"pk": {"N": "one"}}}, "key.pk"),
    ({"action": "break_lock", "table": "{data}", "key": {"pk": {"B": "*"}}}, "key.pk"),
    ({"action": "break_lock", "table": "Elsewhere", "key": {"pk": {"S": "a"}}}, "table"),
    ({"action": "recover", "transaction_id": "{tx}", "correlation_id": 5}, "correlation_id"),
    (None, "(event)"),
    (["recover"], "(event)"),
]


def fill(value: Any, tx_id: str, data: str) -> Any:
    if isinstance(value, str):
        return value.replace("{tx}", tx_id).replace("{data}", data)
    if isinstance(value, dict):
        return {k: fill(v, tx_id, data) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, tx_id, data) for v in value]
    return value


@pytest.mark.parametrize(("event", "field"), MALFORMED, ids=[f for _, f in MALFORMED])
def test_given_a_malformed_event_when_invoked_then_the_field_is_named_and_nothing_changes(
    recovery: Any,
    old_tm: TransactionManager,
    janitor_env: JanitorTables,
    accounts: Any,
    ddb: Any,
    event: Any,
    field: str,
) -> None:
    # Given a stale pending transfer that any valid action here would recover
    tx_id = abandon(old_tm, janitor_env.data, "pending", ("a", "b"))
    before = snapshot(ddb, janitor_env)

    # When the malformed event arrives
    answer = invoke(recovery, fill(event, tx_id, janitor_env.data))

    # Then the answer names the field, and no table changed
    assert answer["ok"] is False and answer["error"] == "InvalidEvent"
    assert field in [problem["field"] for problem in answer["fields"]], answer
    assert snapshot(ddb, janitor_env) == before


# --- break_lock_row ------------------------------------------------------------------------


def dead_lease(ddb: Any, locks_table: str, lease: float) -> Any:
    """A lease held on "Moe" by a holder that stopped heartbeating right away."""
    holder = LeaseLockClient(
        ddb, locks_table, owner="host-a", lease_duration=lease, heartbeat_period=lease / 3
    )
    lock = holder.acquire("Moe")
    holder._heartbeats.close()  # dies: no more heartbeats
    return lock


def test_given_a_dead_lease_holder_when_its_row_is_broken_then_audit_line_and_metric(
    recovery: Any,
    janitor_env: JanitorTables,
    ddb: Any,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a dead holder with a short lease (the handler watches one lease)
    lock = dead_lease(ddb, janitor_env.locks, lease=0.3)
    capsys.readouterr()
    # When an operator breaks its row
    answer = invoke(recovery, {"action": "break_lock_row", "resource": "Moe", "by": "alice"})
    # Then it is broken, logged as an audit line with the row before, and counted
    assert answer["ok"] is True and answer["action"] == "break_lock_row"
    result = answer["result"]
    assert (result["outcome"], result["kind"], result["owner"]) == ("broken", "lease", "host-a")
    (audit,) = [r.audit for r in caplog.records if r.getMessage() == "lock broken"]
    assert (audit["by"], audit["resource"], audit["before"]["owner"]) == (
        "alice", "Moe", {"S": "host-a"},
    )  # fmt: skip
    assert emf_metrics(capsys.readouterr().out) == {"LocksBroken": 1}
    assert lock.heartbeat() is False


def test_given_a_lease_longer_than_the_time_left_then_observing_and_broken_when_called_again(
    recovery: Any, janitor_env: JanitorTables, ddb: Any
) -> None:
    # Given a dead holder whose lease (600 s) is longer than an invocation (300 s left)
    lock = dead_lease(ddb, janitor_env.locks, lease=600.0)
    event = {"action": "break_lock_row", "resource": "Moe", "by": "alice", "kind": "lease"}
    # When the operator invokes it, then again with what it saw (its time a lease ago)
    first = invoke(recovery, event)["result"]
    seen = {**first["seen"], "at": first["seen"]["at"] - 600.0}
    again = invoke(recovery, {**event, "seen": seen})["result"]
    # Then the first only watched; the second broke it
    assert first["outcome"] == "observing" and "call again with seen" in first["reason"]
    assert again["outcome"] == "broken"
    assert lock.heartbeat() is False


def test_given_a_holder_that_heartbeat_since_it_was_seen_then_the_break_is_refused(
    recovery: Any, janitor_env: JanitorTables, ddb: Any
) -> None:
    # Given what an earlier invocation saw; the holder has heartbeaten since
    lock = dead_lease(ddb, janitor_env.locks, lease=600.0)
    event = {"action": "break_lock_row", "resource": "Moe", "by": "alice"}
    seen = invoke(recovery, event)["result"]["seen"]
    assert lock.heartbeat() is True
    before = scan(ddb, janitor_env.locks)
    # When
    answer = invoke(recovery, {**event, "seen": {**seen, "at": seen["at"] - 600.0}})
    # Then
    assert answer["result"]["outcome"] == "refused"
    assert scan(ddb, janitor_env.locks) == before


NAN, INF = float("nan"), float("inf")
BAD_ROW_EVENTS = [
    ({"by": "alice"}, "resource"),
    ({"resource": "Moe"}, "by"),
    ({"resource": "Moe", "by": ""}, "by"),
    ({"resource": "", "by": "alice"}, "resource"),
    ({"resource": "Moe", "by": "alice", "kind": "queue"}, "kind"),
    ({"resource": "Moe", "by": "alice", "namespace": ""}, "namespace"),
    ({"resource": "Moe", "by": "alice", "namespace": "a#b"}, "namespace"),
    ({"resource": "Moe", "by": "alice", "kind": "lease", "namespace": "x"}, "namespace"),
    ({"resource": "Moe", "by": "alice", "force": "yes"}, "force"),
    ({"resource": "Moe", "by": "alice", "seen": {"hold": "h"}}, "seen.rvn"),
    ({"resource": "Moe", "by": "alice", "seen": {"hold": "h", "rvn": "r", "at": "x"}}, "seen.at"),
    # NaN or infinite: any lease would look watched through, a break with no watch
    ({"resource": "Moe", "by": "alice", "seen": {"hold": "h", "rvn": "r", "at": NAN}}, "seen.at"),
    ({"resource": "Moe", "by": "alice", "seen": {"hold": "h", "rvn": "r", "at": -INF}}, "seen.at"),
    ({"resource": "Moe", "by": "alice", "reason": "x"}, "reason"),
    ({"resource": "x" * 2049, "by": "alice"}, "resource"),
]


@pytest.mark.parametrize(("fields", "field"), BAD_ROW_EVENTS, ids=[f for _, f in BAD_ROW_EVENTS])
def test_given_a_malformed_break_lock_row_event_then_the_field_is_named_and_nothing_changes(
    recovery: Any, janitor_env: JanitorTables, ddb: Any, fields: dict[str, Any], field: str
) -> None:
    # Given a held lease
    dead_lease(ddb, janitor_env.locks, lease=600.0)
    before = scan(ddb, janitor_env.locks)
    # When
    answer = invoke(recovery, {"action": "break_lock_row", **fields, "force": True} | fields)
    # Then
    assert answer["ok"] is False and answer["error"] == "InvalidEvent"
    assert field in [problem["field"] for problem in answer["fields"]], answer
    assert scan(ddb, janitor_env.locks) == before


def test_given_an_unknown_resource_when_its_row_is_broken_then_lock_not_found(
    recovery: Any, janitor_env: JanitorTables, ddb: Any
) -> None:
    # Given
    dead_lease(ddb, janitor_env.locks, lease=600.0)
    before = scan(ddb, janitor_env.locks)
    # When
    answer = invoke(
        recovery, {"action": "break_lock_row", "resource": "Larry", "by": "alice", "force": True}
    )
    # Then
    assert (answer["ok"], answer["error"]) == (False, "LockNotFound")
    assert "no lock row for resource 'Larry'" in answer["message"]
    assert scan(ddb, janitor_env.locks) == before
