"""A ``json`` store checks each value once, when it writes it, and marks those that are no JSON
document; a store whose values were not checked so is rebuilt before it serves as one."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import rocksdict
from confluent_kafka import Producer

from store import Store, StoreTuning
from store.json_values import (
    JSON_CHECKED,
    NOT_JSON_PREFIX,
    as_produced,
    checked_json,
    is_marked,
    unchecked_reason,
)
from store.kafka.restore_worker import write_sst
from tests.support.kafka import Record, latest_per_key
from tests.support.stores import FAST, bulk_tuning, produce_tracked

BAD = b'{"name": "Pen", truncated'


def test_values_that_are_no_json_are_marked_and_the_rest_kept_as_they_are() -> None:
    values: list[bytes | None] = [b'{"a":1}', BAD, None, b"", b" [1, 2] ", b'"\x00"', b"nan"]
    checked = checked_json(values)
    assert checked == [
        b'{"a":1}',
        NOT_JSON_PREFIX + BAD,
        None,
        NOT_JSON_PREFIX,
        b" [1, 2] ",
        NOT_JSON_PREFIX + b'"\x00"',
        NOT_JSON_PREFIX + b"nan",
    ]
    assert [v is not None and is_marked(v) for v in checked] == [False, True, False, True, False, True, True]
    assert [as_produced(v) for v in checked if v is not None] == [v for v in values if v is not None]
    good: list[bytes | None] = [b"1", None, b"{}"]
    assert checked_json(good) is good  # nothing copied when every value is JSON


class RecordedCheck:
    def __init__(self, recorded: bytes | None) -> None:
        self.recorded = recorded

    def values_checked(self) -> bytes | None:
        return self.recorded

    def set_values_checked(self, check: bytes | None) -> None:
        self.recorded = check


@pytest.mark.parametrize(
    ("recorded", "holds_data", "checks_json", "rebuild", "after"),
    [
        (None, False, True, False, JSON_CHECKED),  # a new json store: checked from the start
        (None, True, True, True, None),  # written unchecked (older statestore, or as bytes)
        (JSON_CHECKED, True, True, False, JSON_CHECKED),
        (JSON_CHECKED, True, False, False, None),  # served as bytes now: forgets it was checked
        (None, True, False, False, None),
    ],
)
def test_a_store_written_unchecked_is_rebuilt_before_it_serves_as_json(
    recorded: bytes | None, holds_data: bool, checks_json: bool, rebuild: bool, after: bytes | None
) -> None:
    record = RecordedCheck(recorded)
    assert (unchecked_reason(record, holds_data, checks_json) is not None) == rebuild
    assert record.recorded == after


def test_restore_workers_check_the_values_they_keep(tmp_path: Path) -> None:
    path = tmp_path
    written = write_sst(path / "c.sst", [b"a", b"b", b"a"], [BAD, b"[1]", b'{"x":1}'], json_values=True)
    assert written is not None
    db = rocksdict.Rdict(str(path / "db"), options=rocksdict.Options(raw_mode=True))
    db.ingest_external_file([str(written)])
    assert (db[b"a"], db[b"b"]) == (b'{"x":1}', b"[1]")
    written = write_sst(path / "d.sst", [b"c"], [BAD], json_values=True)
    assert written is not None
    db.ingest_external_file([str(written)])
    assert db[b"c"] == NOT_JSON_PREFIX + BAD
    db.close()


def _records() -> list[Record]:
    return [(b"k%04d" % i, b'{"i":%d}' % i if i % 100 else BAD) for i in range(2_000)]


@pytest.mark.parametrize(
    "tuning", [FAST, bulk_tuning(min_records=100, chunk_records=500)], ids=["batch", "bulk"]
)
def test_a_json_store_marks_values_that_are_no_json_when_it_writes_them(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer, tuning: StoreTuning
) -> None:
    topic = make_topic(partitions=2)
    records = _records()
    end = produce_tracked(producer, topic, records)
    store = make_store(topic, tuning=tuning, json_values=True)
    assert store.wait_until_ready(60), store.status()
    assert store.wait_for_position(end, 60)
    model = latest_per_key(records)
    with store.view() as view:
        values = view.get_many(list(model))
    assert values == [v if v != BAD else NOT_JSON_PREFIX + BAD for v in model.values()]


def test_a_store_written_before_values_were_checked_is_rebuilt_as_a_json_store(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = make_topic(partitions=2)
    records = _records()
    end = produce_tracked(producer, topic, records)
    unchecked = make_store(topic, tuning=FAST)
    assert unchecked.wait_until_ready(60)
    assert unchecked.wait_for_position(end, 60)
    with unchecked.view() as view:
        assert view.get(b"k0000") == BAD  # stored as read
    unchecked.stop()

    with caplog.at_level(logging.WARNING):
        checked = make_store(topic, tuning=FAST, json_values=True)
        assert checked.wait_until_ready(60)
        assert checked.wait_for_position(end, 60)
    assert any("checked as JSON at ingest" in r.getMessage() for r in caplog.records)
    with checked.view() as view:
        assert view.get(b"k0000") == NOT_JSON_PREFIX + BAD
        assert view.get(b"k0001") == b'{"i":1}'
    assert checked.status().records_applied_total == len(records)  # every record read again
