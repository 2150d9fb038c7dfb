"""The list-append checker on hand-made histories: each anomaly is found, and only it.

No DynamoDB here: the checker is pure, so every case is a literal history.
"""

from __future__ import annotations

import pytest

from .history import COMMITTED, FAIL, INFO, OK, Txn, append, check, read
from .listappend import described


def kinds(history: list[Txn], final: dict[str, tuple[int, ...]] | None = None) -> list[str]:
    return sorted(a.kind for a in check(history, final))


def test_given_a_serial_history_then_no_anomaly() -> None:
    history = [
        Txn(1, [append("x", 1), append("y", 2)], OK),
        Txn(2, [read("x", [1]), append("x", 3), read("x", [1, 3])], OK),
        Txn(3, [read("x", [1, 3]), read("y", [2])], OK),
        Txn(4, [append("y", 9)], FAIL),
    ]
    assert kinds(history, {"x": (1, 3), "y": (2,)}) == []


def test_given_two_writers_ordered_differently_on_two_keys_then_g0() -> None:
    history = [
        Txn(1, [append("x", 1), append("y", 1_1)], OK),
        Txn(2, [append("x", 2), append("y", 2_2)], OK),
        Txn(3, [read("x", [1, 2]), read("y", [2_2, 1_1])], OK),
    ]
    assert kinds(history) == ["G0"]


def test_given_a_read_of_an_aborted_append_then_g1a() -> None:
    history = [Txn(1, [append("x", 1)], FAIL), Txn(2, [read("x", [1])], OK)]
    assert kinds(history) == ["G1a"]


def test_given_an_aborted_append_in_the_final_state_then_g1a() -> None:
    assert kinds([Txn(1, [append("x", 1)], FAIL)], {"x": (1,)}) == ["G1a"]


def test_given_an_anomaly_then_its_report_says_how_each_transaction_in_it_ran() -> None:
    # Given a G1a between a rolled-back writer and a reader, beside an unrelated transaction
    history = [
        Txn(1, [append("x", 1)], FAIL, note="commit #0 tx-a"),
        Txn(2, [read("x", [1])], OK, note="tm.get_item committed"),
        Txn(3, [append("y", 2)], OK, note="run #0 tx-b"),
    ]
    # When the report describes the anomalies found
    text = described(history, check(history))
    # Then it names the two transactions of the anomaly and how they ran, and only them
    assert text.splitlines()[1:] == [
        "    txn 1 (fail): commit #0 tx-a",
        "    txn 2 (ok): tm.get_item committed",
    ]


def test_given_a_read_of_a_version_its_writer_then_overwrote_then_g1b() -> None:
    history = [
        Txn(1, [append("x", 1), append("x", 2)], OK),
        Txn(2, [read("x", [1])], OK),
        Txn(3, [read("x", [1, 2])], OK),
    ]
    # The intermediate read also closes a wr/rw cycle with its writer: one rw edge.
    assert kinds(history) == ["G-single", "G1b"]


def test_given_two_transactions_reading_each_others_writes_then_g1c() -> None:
    history = [
        Txn(1, [append("x", 1), read("y", [2])], OK),
        Txn(2, [append("y", 2), read("x", [1])], OK),
    ]
    assert kinds(history) == ["G1c"]


def test_given_write_skew_then_g2() -> None:
    history = [
        Txn(1, [read("x", []), append("y", 1)], OK),
        Txn(2, [read("y", []), append("x", 2)], OK),
    ]
    assert kinds(history, {"x": (2,), "y": (1,)}) == ["G2"]


def test_given_read_skew_then_g_single_naming_its_one_rw_edge() -> None:
    # Given T2 seeing T1's append to x but not its append to y
    history = [
        Txn(1, [append("x", 1), append("y", 2)], OK),
        Txn(2, [read("x", [1]), read("y", [])], OK),
    ]
    # When checked
    (anomaly,) = check(history, {"x": (1,), "y": (2,)})
    # Then it is G-single, and the cycle shows its one rw and one wr edge
    assert anomaly.kind == "G-single" and anomaly.txns == (1, 2)
    assert anomaly.detail.count("rw") == 1 and "wr" in anomaly.detail


def test_given_a_lost_update_then_g_single() -> None:
    # Both read the empty list, then both append: each missed the other's write
    history = [
        Txn(1, [read("x", []), append("x", 1)], OK),
        Txn(2, [read("x", []), append("x", 2)], OK),
    ]
    assert kinds(history, {"x": (1, 2)}) == ["G-single"]


def test_given_a_read_skew_by_a_read_committed_reader_then_no_anomaly() -> None:
    history = [
        Txn(1, [append("x", 1), append("y", 2)], OK),
        Txn(2, [read("x", [1]), read("y", [])], OK, isolation=COMMITTED),
    ]
    assert kinds(history, {"x": (1,), "y": (2,)}) == []


def test_given_a_value_twice_in_a_list_then_duplicate_append() -> None:
    history = [Txn(1, [append("x", 1)], OK), Txn(2, [read("x", [1, 1])], OK)]
    assert "duplicate-append" in kinds(history)
    assert kinds([Txn(1, [append("x", 1)], OK)], {"x": (1, 1)}) == ["duplicate-append"]


def test_given_a_read_the_final_value_does_not_start_with_then_not_prefix_of_final() -> None:
    history = [Txn(1, [append("x", 1)], INFO), Txn(2, [read("x", [1])], OK)]
    assert kinds(history, {"x": ()}) == ["not-prefix-of-final"]


@pytest.mark.parametrize("final", [(1,), (1, 2)])
def test_given_an_uncertain_append_then_it_counts_only_where_seen(
    final: tuple[int, ...],
) -> None:
    # Given a transaction committed by a rescuer after its coordinator crashed sending 2
    history = [Txn(1, [append("x", 1), append("x", 2)], OK, uncertain=frozenset({2}))]
    # Then 2 may be there or not; 1 must be
    assert kinds(history, {"x": final}) == []
    assert kinds(history, {"x": ()}) == ["lost-append"]


def test_given_write_skew_seen_by_read_committed_readers_then_no_g2() -> None:
    # Read committed permits G2: single-key reads outside transactions add no rw edges.
    history = [
        Txn(1, [read("x", [])], OK, isolation=COMMITTED),
        Txn(2, [append("x", 2)], OK),
        Txn(3, [read("x", [2])], OK, isolation=COMMITTED),
    ]
    assert kinds(history, {"x": (2,)}) == []


def test_given_a_read_committed_reader_in_a_wr_cycle_then_g1c() -> None:
    history = [
        Txn(1, [append("x", 1), read("y", [2])], OK),
        Txn(2, [append("y", 2), read("x", [1])], OK, isolation=COMMITTED),
    ]
    assert kinds(history) == ["G1c"]


def test_given_reads_that_are_not_prefixes_of_each_other_then_incompatible_order() -> None:
    history = [
        Txn(1, [append("x", 1)], OK),
        Txn(2, [append("x", 2)], OK),
        Txn(3, [read("x", [1, 2])], OK),
        Txn(4, [read("x", [2])], OK),
    ]
    assert "incompatible-order" in kinds(history)


def test_given_a_transaction_missing_its_own_append_then_internal() -> None:
    history = [Txn(1, [append("x", 1)], OK), Txn(2, [append("x", 2), read("x", [1])], OK)]
    assert "internal" in kinds(history)


def test_given_an_acknowledged_append_missing_after_recovery_then_lost_append() -> None:
    history = [Txn(1, [append("x", 1), append("y", 2)], OK)]
    assert kinds(history, {"x": (1,), "y": ()}) == ["lost-append"]


def test_given_half_of_an_unacknowledged_transaction_survives_then_partial() -> None:
    history = [Txn(1, [append("x", 1), append("y", 2)], INFO)]
    assert kinds(history, {"x": (1,), "y": ()}) == ["partial"]


@pytest.mark.parametrize("final", [{"x": (1,), "y": (2,)}, {"x": (), "y": ()}])
def test_given_an_unacknowledged_transaction_all_or_nothing_then_no_anomaly(
    final: dict[str, tuple[int, ...]],
) -> None:
    assert kinds([Txn(1, [append("x", 1), append("y", 2)], INFO)], final) == []


def test_given_an_observed_unacknowledged_transaction_then_its_edges_count() -> None:
    # Txn 1 crashed after committing: Txn 3 saw its writes, so its ww cycle is real.
    history = [
        Txn(1, [append("x", 1), append("y", 1_1)], INFO),
        Txn(2, [append("x", 2), append("y", 2_2)], OK),
        Txn(3, [read("x", [1, 2]), read("y", [2_2, 1_1])], OK),
    ]
    assert kinds(history) == ["G0"]


def test_given_the_same_value_appended_twice_then_duplicate_value() -> None:
    history = [Txn(1, [append("x", 1)], OK), Txn(2, [append("y", 1)], OK)]
    assert "duplicate-value" in kinds(history)


def test_given_a_read_of_a_value_nobody_appended_then_garbage_read() -> None:
    assert kinds([Txn(1, [read("x", [7])], OK)]) == ["garbage-read"]


def test_given_a_long_cycle_then_the_report_names_every_edge() -> None:
    # Given a ring of four transactions, each reading the next one's write
    ring = [
        Txn(i, [append(f"k{i}", i), read(f"k{(i + 1) % 4}", [(i + 1) % 4])], OK) for i in range(4)
    ]
    # When
    (anomaly,) = check(ring)
    # Then
    assert anomaly.kind == "G1c" and sorted(anomaly.txns) == [0, 1, 2, 3]
    assert anomaly.detail.count("-wr->") == 4
