"""What a sweep reads: a stale record costs its index entry and the items it undoes,
never a read of a record the sweep leaves alone; a record that moves on after the
index listed it is not rolled back.

Items read are counted exactly from the responses (``count_requests``); the
coordinators and the sweeper share a fake clock, so ages never depend on how long
a test takes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ddbtx import TransactionManager, schema
from ddbtx._base.drive import drive
from ddbtx._base.effects import Call, Gather, Run, Step
from ddbtx.instrumentation import count_requests
from ddbtx.recovery import recover_step
from ddbtx.sweeper import Sweeper
from helpers import FakeClock, Tables, assert_clean, data_state

from .support import transfer

ROLLBACK_AFTER = timedelta(minutes=1)


def janitor(tm: TransactionManager) -> Sweeper:
    """A sweeper with no cursor row, no data tables and no locks table: only the
    TX records and the images table are its business."""
    return Sweeper(
        tm, rollback_after=ROLLBACK_AFTER, delete_after=timedelta(days=1), persist_cursor=False
    )


def test_given_a_stale_transfer_when_swept_then_only_its_index_entry_and_its_items_are_read(
    make_tm: Callable[..., TransactionManager],
    clock: FakeClock,
    tables: Tables,
    seed: Callable[..., None],
    ddb: Any,
) -> None:
    # Given a transfer between two seeded accounts, abandoned two minutes ago
    seed(a=100, b=100)
    transfer(make_tm(), tables.data, "a", "b", 10)
    clock.advance(120)
    sweeper = janitor(make_tm())

    # When the sweeper runs
    with count_requests(sweeper.client) as counts:
        report = sweeper.run()

    # Then it is rolled back and both balances are back
    assert (report.rolled_back, report.stuck, report.exhausted) == (1, 1, True)
    assert {pk: item["balance"]["N"] for pk, item in data_state(ddb, tables.data).items()} == {
        "a": "100",
        "b": "100",
    }
    assert_clean(ddb, tables)
    # And it read the index entry and the two items it restored, not the record
    assert dict(counts.items_read_by_operation) == {"Query": 1, "GetItem": 2}


def test_given_a_stale_record_when_it_moves_on_after_the_index_listed_it_then_it_is_kept(
    make_tm: Callable[..., TransactionManager],
    clock: FakeClock,
    tables: Tables,
    seed: Callable[..., None],
    ddb: Any,
) -> None:
    # Given a transfer whose coordinator paused for two minutes after its two updates
    seed(a=100, b=100, c=100)
    tx = transfer(make_tm(), tables.data, "a", "b", 10)
    clock.advance(120)
    sweeper = janitor(make_tm())
    woke: list[bool] = []

    def coordinator_wakes(parsed: dict[str, Any], **_: Any) -> None:
        # Right after the index query that lists the record, the coordinator
        # makes progress: one more update, which changes the record's age.
        if not woke and parsed.get("Items"):
            woke.append(True)
            tx.update_item(
                TableName=tables.data,
                Key={"pk": {"S": "c"}},
                UpdateExpression="SET balance = balance + :n",
                ExpressionAttributeValues={":n": {"N": "1"}},
            )

    # When the sweeper runs, and the coordinator wakes between its query and its decision
    sweeper.client.meta.events.register("after-call.dynamodb.Query", coordinator_wakes)
    try:
        report = sweeper.run()
    finally:
        sweeper.client.meta.events.unregister("after-call.dynamodb.Query", coordinator_wakes)

    # Then the record was seen stale but not rolled back
    assert woke == [True]
    assert (report.stuck, report.rolled_back, report.errors) == (1, 0, 0)
    # And the coordinator commits all three updates
    tx.commit()
    assert tx.state == schema.STATE_COMMITTED
    balances = {pk: item["balance"]["N"] for pk, item in data_state(ddb, tables.data).items()}
    assert balances == {"a": "90", "b": "110", "c": "101"}


def test_given_young_and_completed_records_when_fully_swept_then_only_the_stale_one_is_read_again(
    make_tm: Callable[..., TransactionManager],
    clock: FakeClock,
    tables: Tables,
    seed: Callable[..., None],
    ddb: Any,
) -> None:
    # Given one transfer abandoned two minutes ago, then two committed and kept
    # records and two young pending ones
    seed(a=100, b=100, c=100, d=100, e=100, f=100, g=100, h=100, i=100, j=100)
    transfer(make_tm(), tables.data, "a", "b", 10)
    clock.advance(120)
    for source, target in (("c", "d"), ("e", "f")):
        transfer(make_tm(), tables.data, source, target, 1).commit()
    for source, target in (("g", "h"), ("i", "j")):
        transfer(make_tm(), tables.data, source, target, 1)
    sweeper = janitor(make_tm())

    # When a full sweep runs in two segments
    with count_requests(sweeper.client) as counts:
        report = sweeper.run_full(segments=2)

    # Then only the stale one is rolled back
    assert (report.rolled_back, report.stuck, report.exhausted) == (1, 1, True)
    # And besides the scan of the five records, only its two items are read
    assert dict(counts.items_read_by_operation) == {"Scan": 5, "GetItem": 2}
    assert counts.by_operation["Scan"] == 2 + 1  # one page per segment, then the images


def interleave(client: Any, *steps: Step[Any]) -> list[Any]:
    """Run ``steps`` on one thread, one effect of each in turn (a gather's steps one
    after another, a pause skipped): their results, in order."""
    runs = [Run(step) for step in steps]
    while not all(run.done for run in runs):
        for run in (r for r in runs if not r.done):
            effect = run.effect
            with run.outcome() as out:
                if isinstance(effect, Gather):
                    out.value = [drive(sub, client) for sub in effect.steps]
                elif isinstance(effect, Call):
                    out.value = getattr(client, effect.operation)(**effect.params)
    return [run.result for run in runs]


def test_given_a_stale_and_a_young_transfer_when_a_sweep_and_a_recover_interleave_then_both_end(
    make_tm: Callable[..., TransactionManager],
    clock: FakeClock,
    tables: Tables,
    seed: Callable[..., None],
    ddb: Any,
) -> None:
    # Given a transfer abandoned two minutes ago, and a young one an operator recovers
    seed(a=100, b=100, c=100, d=100)
    transfer(make_tm(), tables.data, "a", "b", 10)
    clock.advance(120)
    young = transfer(make_tm(), tables.data, "c", "d", 10)
    tm = make_tm()

    # When the sweeper's pass and the recover run as steps on one thread, call by call
    report, recovered = interleave(tm.client, janitor(tm).pass_step(), recover_step(tm, young.id))

    # Then the sweep rolled back the stale one and the operator the young one
    assert (report.rolled_back, report.stuck, report.errors, report.exhausted) == (1, 1, 0, True)
    assert recovered["outcome"] == "rolled_back"
    assert recovered["after"]["locks_held"] == 0
    balances = {pk: item["balance"]["N"] for pk, item in data_state(ddb, tables.data).items()}
    assert balances == dict.fromkeys("abcd", "100")
    assert_clean(ddb, tables)
