"""Several coordinators on one transaction: the record, not a coordinator's memory, decides.

Each test replays a schedule found by hand or by the interleaving explorer, from
public calls and botocore hooks only: a coordinator dies or stalls at an exact
call while others resume the same transaction. After a final sweep, the record
and the items must agree: committed means every recorded request applied once,
rolled back means every item as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from ddbtx import (
    DuplicateRequestError,
    SweepOutcome,
    TransactionCommittedError,
    TransactionRolledBackError,
)
from ddbtx import schema as s
from ddbtx.chaos import Chaos, Crash
from helpers import Tables, assert_clean, data_state

N = lambda n: {"N": str(n)}  # noqa: E731


def add(tx: Any, table: str, pk: str, amount: int) -> None:
    tx.update_item(
        TableName=table,
        Key={"pk": {"S": pk}},
        UpdateExpression="ADD balance :n",
        ExpressionAttributeValues={":n": N(amount)},
    )


def on_call(client: Any, operation: str, hook: Callable[[dict[str, Any]], None]) -> None:
    """Run ``hook(params)`` before every ``operation`` call ``client`` sends."""
    client.meta.events.register(
        f"before-parameter-build.dynamodb.{operation}", lambda params, **_: hook(params)
    )


def is_take_over(params: dict[str, Any], tables: Tables) -> bool:
    return params.get("TableName") == tables.tx and ":old" in params.get(
        "ExpressionAttributeValues", {}
    )


def is_decision(params: dict[str, Any], tables: Tables) -> bool:
    return params.get("TableName") == tables.tx and ":to" in params.get(
        "ExpressionAttributeValues", {}
    )


def dies_before_locking(make_tm: Any, tables: Tables, tx: Any, pk: str, amount: int) -> None:
    """``tx``'s coordinator records an update of ``pk`` and dies before locking the item."""
    crash = Chaos(tx.manager.client)
    crash.arm("before", at=1)  # the add, then the lock
    with pytest.raises(Crash):
        add(tx, tables.data, pk, amount)
    crash.close()


def complete_and_check(
    make_tm: Any,
    ddb: Any,
    tables: Tables,
    tx_id: str,
    *,
    before: dict[str, Any],
    committed: dict[str, Any],
) -> str:
    """Sweep the record to its end; its outcome must match the balances exactly."""
    sweeper = make_tm()
    header = sweeper.protocol.run(sweeper.protocol.records.read_header(tx_id))
    assert header is not None
    if header.state == s.STATE_PENDING:
        outcome = sweeper.sweep(tx_id, rollback_after=timedelta(0), delete_after=timedelta(days=1))
        assert outcome in (SweepOutcome.ROLLED_BACK, SweepOutcome.ROLLED_FORWARD)
    else:
        sweeper.sweep(tx_id, rollback_after=timedelta(0), delete_after=timedelta(days=1))
    header = sweeper.protocol.run(sweeper.protocol.records.read_header(tx_id))
    assert header is not None and header.completed
    balances = {pk: item["balance"] for pk, item in data_state(ddb, tables.data).items()}
    assert balances == (committed if header.state == s.STATE_COMMITTED else before)
    assert_clean(ddb, tables)
    return header.state


def test_given_three_rescuers_when_one_take_over_loses_to_another_then_no_unapplied_write_commits(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given a transaction whose coordinator recorded ADD 5 to a and died before locking a
    seed(a=0, b=0)
    first = make_tm()
    first.key_names(tables.data)
    tx = first.begin()
    dies_before_locking(make_tm, tables, tx, "a", 5)
    # and three coordinators that resume it: R commits, O and T act just before R's
    # take-over of a: O records ADD 7 to b and dies before locking b; T takes a over,
    # applies it and dies right before its own decision
    r, o, t = (make_tm().resume(tx.id) for _ in range(3))
    for rescuer in (o, t):
        rescuer.manager.key_names(tables.data)
    fired: list[str] = []

    def interleave(params: dict[str, Any]) -> None:
        if not is_take_over(params, tables) or fired:
            return
        fired.append("take-over")
        dies_before_locking(make_tm, tables, o, "b", 7)
        on_call(t.manager.client, "UpdateItem", lambda p: _crash_if(is_decision(p, tables)))
        with pytest.raises(Crash):
            t.commit()

    on_call(r.manager.client, "UpdateItem", interleave)
    # When R commits
    with contextlib.suppress(TransactionRolledBackError):
        r.commit()
    # Then (after a sweep) the record and the items agree: b was applied if it committed
    assert fired
    complete_and_check(
        make_tm, ddb, tables, tx.id, before={"a": N(0), "b": N(0)}, committed={"a": N(5), "b": N(7)}
    )


def _crash_if(condition: bool) -> None:
    if condition:
        raise Crash("crash right before this call")


def test_given_a_request_taken_over_and_committed_when_its_first_coordinator_wakes_then_it_keeps_it(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given V applied -10 to a and recorded +10 to b, then stalled before locking b
    seed(a=100, b=0)
    v = make_tm().begin()
    add(v, tables.data, "a", -10)
    stalled: list[str] = []

    def rescuer_runs_meanwhile(params: dict[str, Any]) -> None:
        locking_b = params.get("TableName") == tables.data and params["Key"]["pk"]["S"] == "b"
        if not locking_b or stalled:
            return
        stalled.append("b")
        # While V stalls, R resumes, takes b over with a new nonce, applies it, decides
        # commit, and dies before completing
        r = make_tm().resume(v.id)
        on_call(r.manager.client, "UpdateItem", lambda p: _crash_if(_is_release(p, tables)))
        with pytest.raises(Crash):
            r.commit()

    on_call(v.manager.client, "UpdateItem", rescuer_runs_meanwhile)
    # When V wakes and goes on
    try:
        add(v, tables.data, "b", 10)
        v.commit()
    except TransactionCommittedError:
        pass  # V learns that another coordinator committed its transaction
    # Then b keeps the committed +10: a=90, b=10
    assert stalled
    state = complete_and_check(
        make_tm,
        ddb,
        tables,
        v.id,
        before={"a": N(100), "b": N(0)},
        committed={"a": N(90), "b": N(10)},
    )
    assert state == s.STATE_COMMITTED


def _is_release(params: dict[str, Any], tables: Tables) -> bool:
    return params.get("TableName") == tables.data and str(
        params.get("UpdateExpression", "")
    ).startswith("REMOVE")


@pytest.mark.parametrize("concurrent", [False, True], ids=["handed-over", "unseen-add"])
def test_given_an_item_another_coordinator_wrote_when_a_resumer_writes_it_again_then_refused(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any, concurrent: bool
) -> None:
    # Given a transaction whose first coordinator added 10 to a, and a second coordinator
    # that resumed it (before that write: it has not seen it; or after: it knows of it)
    seed(a=0)
    tx = make_tm().begin()
    if concurrent:
        add(tx, tables.data, "z", 1)  # the record exists when the resumer loads it
        resumer = make_tm().resume(tx.id)
        add(tx, tables.data, "a", 10)
    else:
        add(tx, tables.data, "a", 10)
        resumer = make_tm().resume(tx.id)
    written = data_state(ddb, tables.data)

    # When the resumer writes a differently
    with pytest.raises(DuplicateRequestError, match="another coordinator of this transaction") as e:
        add(resumer, tables.data, "a", 5)

    # Then the refusal names the item, and nothing changed
    assert (e.value.table, e.value.key) == (tables.data, {"pk": {"S": "a"}})
    assert data_state(ddb, tables.data) == written
    # And the transaction still commits with the first coordinator's write applied once
    resumer.commit()
    committed = {pk: item["balance"] for pk, item in data_state(ddb, tables.data).items()}
    assert committed == {"a": N(10), **({"z": N(1)} if concurrent else {})}
    assert_clean(ddb, tables)


def test_given_an_item_another_coordinator_wrote_when_a_resumer_sends_the_same_request_then_once(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given a transaction whose first coordinator added 10 to a, resumed by a second
    seed(a=0)
    tx = make_tm().begin()
    add(tx, tables.data, "a", 10)
    resumer = make_tm().resume(tx.id)

    # When the resumer sends the very same request (a retry handed over with the id)
    add(resumer, tables.data, "a", 10)
    resumer.commit()

    # Then it took the recorded request over: applied once, not twice
    assert data_state(ddb, tables.data)["a"]["balance"] == N(10)
    assert_clean(ddb, tables)


def _is_mark_completed(params: dict[str, Any], tables: Tables) -> bool:
    names = params.get("ExpressionAttributeNames") or {}
    return params.get("TableName") == tables.tx and s.TX_COMPLETED in names.values()


def test_given_a_taken_over_item_completed_when_its_stalled_coordinator_locks_it_late_then_once(
    make_tm: Any, ddb: Any, tables: Tables, seed: Any
) -> None:
    # Given V applied -10 to a and recorded +10 to b, then stalled before locking b
    seed(a=100, b=0)
    v = make_tm().begin()
    add(v, tables.data, "a", -10)
    stalled: list[str] = []

    def rescuer_completes_meanwhile(params: dict[str, Any]) -> None:
        locking_b = params.get("TableName") == tables.data and params["Key"]["pk"]["S"] == "b"
        if not locking_b or stalled:
            return
        stalled.append("b")
        # While V stalls, R resumes, takes b over with a new nonce, applies it, commits,
        # completes (unlocks) both items and dies before marking the record completed
        r = make_tm().resume(v.id)
        on_call(r.manager.client, "UpdateItem", lambda p: _crash_if(_is_mark_completed(p, tables)))
        with pytest.raises(Crash):
            r.commit()
        # (b is free again, with R's +10 applied once)
        assert data_state(ddb, tables.data)["b"] == {"pk": {"S": "b"}, "balance": N(10)}

    on_call(v.manager.client, "UpdateItem", rescuer_completes_meanwhile)
    # When V wakes: its lock with the nonce it recorded (a stray now: the record names
    # R's) finds b free, and its +10 is applied a second time under that lock; then V
    # goes on and the record is completed (by V's commit or the final sweep)
    try:
        add(v, tables.data, "b", 10)
        v.commit()
    except (TransactionCommittedError, TransactionRolledBackError):
        pass  # V learns that another coordinator committed its transaction
    # Then completion undid V's stray lock with its write: b holds the committed +10 once
    assert stalled
    state = complete_and_check(
        make_tm,
        ddb,
        tables,
        v.id,
        before={"a": N(100), "b": N(0)},
        committed={"a": N(90), "b": N(10)},
    )
    assert state == s.STATE_COMMITTED
