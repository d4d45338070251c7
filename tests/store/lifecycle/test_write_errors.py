"""Each kind of write error gets its reaction (``store.lifecycle.write_errors``): an I/O error is retried with
backoff while reads go on, and a volume that keeps failing makes the store FAILED with the reason;
a copy closed under the writer is no error to report. The refusals are injected where RocksDB
raises them (``Engine.write``); the rest is real."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
import rocksdict
from confluent_kafka import Producer

from store import Store, StoreState
from tests.support.kafka import latest_per_key
from tests.support.refusals import refuse_writes
from tests.support.stores import FAST, assert_equals_model, produce_tracked

TUNING = FAST.replace(write_error_attempts=3)
EIO = "IO error: While appending to file: /s/db/000012.sst: Input/output error"


def ready_store(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> tuple[Store, str, list[tuple[bytes, bytes]]]:
    topic = make_topic(partitions=2)
    records = [(b"key-%03d" % i, b"v%d" % i) for i in range(200)]
    produce_tracked(producer, topic, records)
    store = make_store(topic, tuning=TUNING)
    assert store.wait_until_ready(60)
    return store, topic, records


def test_a_volume_that_keeps_failing_writes_makes_the_store_failed_with_the_reason(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="store")
    store, topic, _records = ready_store(make_topic, make_store, producer)
    refused = refuse_writes(monkeypatch, Exception(EIO), times=None)
    produce_tracked(producer, topic, [(b"key-001", b"later")])
    with store._changed:
        assert store._changed.wait_for(lambda: store.state is StoreState.FAILED, 60), store.status()
    assert not store.readable
    last_error = store.status().last_error or ""
    assert "kept failing to write through 3 attempts" in last_error
    assert "Input/output error" in last_error
    assert "then restart the store" in last_error
    assert len(refused) >= 3
    failed = [r.getMessage() for r in caplog.records if 'store "s" is FAILED' in r.getMessage()]
    assert len(failed) == 1, failed
    assert "check its volume" in failed[0]


def test_an_io_error_that_passes_is_retried_and_nothing_is_lost(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, topic, records = ready_store(make_topic, make_store, producer)
    refused = refuse_writes(monkeypatch, Exception(EIO), times=2)
    more = [(b"key-001", b"later"), (b"key-999", b"new")]
    end = store.position().merged(produce_tracked(producer, topic, more))
    assert store.wait_for_position(end, 60), store.status()
    assert_equals_model(store, latest_per_key(records + more), end)
    assert len(refused) == 2
    assert store.state is StoreState.READY


def test_a_copy_closed_under_the_writer_is_no_error_to_report(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="store")
    store, topic, records = ready_store(make_topic, make_store, producer)
    refuse_writes(monkeypatch, rocksdict.DbClosedError("DB instance already closed"), times=1)
    more = [(b"key-002", b"later")]
    end = store.position().merged(produce_tracked(producer, topic, more))
    assert store.wait_for_position(end, 60), store.status()
    assert_equals_model(store, latest_per_key(records + more), end)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
