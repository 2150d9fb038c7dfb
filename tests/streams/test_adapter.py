"""The adapter on single records: bad input is refused by name, and the cases no workload
on an emulator produces (an unguarded writer, an image kept in the images table)."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

import pytest

from ddbtx import schema as s
from ddbtx.stream_reader import StreamReader
from ddbtx.streams import (
    PROTOCOL_FILTER_PATTERNS,
    StreamRecordError,
    committed_change,
    committed_changes,
)
from ddbtx.tables import create_data_table

from .support import passes_filters

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/Accounts/stream/2026-01-01T00:00:00.000"
KEY = {"id": {"S": "alice"}}
BEFORE = {**KEY, "balance": {"N": "100"}, "tags": {"SS": ["a", "b"]}}
AFTER = {**KEY, "balance": {"N": "90"}, "tags": {"SS": ["a", "b"]}}
LOCK = {s.ATTR_LOCK: {"S": "tx1/nonce1"}}


def record(name: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "Keys": KEY,
        "SequenceNumber": "42",
        "SizeBytes": 100,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    if old is not None:
        body["OldImage"] = old
    if new is not None:
        body["NewImage"] = new
    return {
        "eventName": name,
        "eventSourceARN": ARN,
        "eventSource": "aws:dynamodb",
        "dynamodb": body,
    }


def released() -> dict[str, Any]:
    """The release of a committed update: the lock and its in-item image leave the item."""
    old = {**AFTER, **LOCK, s.ATTR_APPLIED: {"BOOL": True}, s.ATTR_IMAGE: {"M": BEFORE}}
    return record("MODIFY", old, AFTER)


def test_given_a_release_then_one_modify_from_the_saved_image() -> None:
    (change,) = committed_changes([released()])
    assert (change.table, change.key, change.kind) == ("Accounts", KEY, "MODIFY")
    assert (change.old, change.new, change.tx_id) == (BEFORE, AFTER, "tx1")
    assert (change.sequence_number, change.old_known) == ("42", True)


def test_given_the_image_in_the_images_table_then_the_change_says_old_is_unknown() -> None:
    old = {**AFTER, **LOCK, s.ATTR_APPLIED: {"BOOL": True}, s.ATTR_IMAGE_EXTERNAL: {"BOOL": True}}
    change = committed_change(record("MODIFY", old, AFTER))
    assert change is not None
    assert (change.old, change.old_known, change.new) == (None, False, AFTER)


def test_given_a_set_listed_in_another_order_then_the_images_are_still_the_same() -> None:
    # A release whose new image lists the string set's members in another order is
    # still a release (the values did not change), not a restore
    shuffled = released()
    shuffled["dynamodb"]["NewImage"] = {**AFTER, "tags": {"SS": ["b", "a"]}}
    change = committed_change(shuffled)
    assert change is not None and change.kind == "MODIFY"


def test_given_a_plain_delete_of_a_locked_item_then_no_change_and_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given an unguarded writer's DeleteItem of an item a transaction holds (not marked
    # deleted: no ddbtx step deletes such an item)
    gone = record("REMOVE", {**AFTER, **LOCK}, None)
    with caplog.at_level(logging.WARNING, logger="ddbtx.streams"):
        assert committed_change(gone) is None
    assert "not marked deleted" in caplog.text


def test_given_protocol_attributes_without_a_lock_then_no_change_and_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    odd = record("MODIFY", {**AFTER, s.ATTR_APPLIED: {"BOOL": True}}, AFTER)
    with caplog.at_level(logging.WARNING, logger="ddbtx.streams"):
        assert committed_change(odd) is None
    assert "without a lock" in caplog.text


def test_given_the_filter_patterns_then_at_most_five_on_the_dynamodb_key_only() -> None:
    # Lambda allows five filters per event source mapping by default, and DynamoDB
    # event sources filter on the ``dynamodb`` key only
    assert len(PROTOCOL_FILTER_PATTERNS) <= 5
    assert all(set(p) == {"dynamodb"} for p in PROTOCOL_FILTER_PATTERNS)
    # A lock is dropped; a release is delivered
    assert not passes_filters(record("MODIFY", AFTER, {**AFTER, **LOCK}))
    assert passes_filters(released())


def _drop(path: tuple[str, ...]) -> Callable[[dict[str, Any]], None]:
    def mutate(r: dict[str, Any]) -> None:
        node = r
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]

    return mutate


def _set(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(r: dict[str, Any]) -> None:
        node = r
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return mutate


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (_drop(("dynamodb",)), "no 'dynamodb' mapping"),
        (_drop(("dynamodb", "SequenceNumber")), "no dynamodb.SequenceNumber"),
        (_set(("dynamodb", "StreamViewType"), "NEW_IMAGE"), "view type 'NEW_IMAGE'"),
        (_set(("eventName",), "UPSERT"), "eventName 'UPSERT'"),
        (_drop(("dynamodb", "Keys")), "no dynamodb.Keys"),
        (_drop(("dynamodb", "OldImage")), "a MODIFY record without its OldImage"),
        (_drop(("dynamodb", "NewImage")), "a MODIFY record without its NewImage"),
        (_set(("dynamodb", "NewImage"), "x"), "dynamodb.NewImage is not a mapping"),
        (_set(("eventSourceARN",), "arn:aws:sqs:us-east-1:1:q"), "not a DynamoDB table stream"),
        (_drop(("eventSourceARN",)), "eventSourceARN None"),
        (_set(("dynamodb", "OldImage", s.ATTR_IMAGE), {"S": "x"}), "_tx:img is not a map"),
    ],
)
def test_given_a_bad_record_then_an_error_naming_the_problem(
    mutate: Callable[[dict[str, Any]], None], problem: str
) -> None:
    # Given a release record with one thing wrong
    bad = copy.deepcopy(released())
    mutate(bad)
    # When judged, then the error names the problem (and the record, where it has a number)
    with pytest.raises(StreamRecordError, match=problem) as caught:
        committed_changes([released(), bad])
    assert caught.value.problem in str(caught.value)
    numbered = "SequenceNumber" in bad.get("dynamodb", {})
    assert caught.value.sequence_number == ("42" if numbered else None)


@pytest.mark.parametrize(("name", "image"), [("INSERT", "NewImage"), ("REMOVE", "OldImage")])
def test_given_an_event_without_its_image_then_an_error_naming_it(name: str, image: str) -> None:
    bad = record(name, None, None)
    with pytest.raises(StreamRecordError, match=f"a {name} record without its {image}"):
        committed_change(bad)


def test_given_something_other_than_a_record_then_an_error_naming_its_type() -> None:
    with pytest.raises(StreamRecordError, match="expected a record mapping, got list"):
        committed_change([])  # type: ignore[arg-type]


def test_given_a_table_without_a_stream_then_the_reader_says_so(
    ddb: Any, table_name: Callable[[str], str]
) -> None:
    # Given a data table created without a stream (on either emulator)
    name = table_name("plain")
    create_data_table(ddb, name)
    # When a stream reader is made for it, then the error names the table
    with pytest.raises(ValueError, match=f"table '{name}' has no stream"):
        StreamReader(ddb, name)
