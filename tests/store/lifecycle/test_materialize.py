"""Materializing real topics on the real broker: after READY the store is the topic's last record
per key, through the steady-state WriteBatch path and the bulk SST path, across restarts."""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import rocksdict
from confluent_kafka import Consumer, Producer, TopicPartition

from service.local.broker import LocalBroker
from store import Position, Store, StoreState, StoreTuning
from tests.support.held import HeldApplies
from tests.support.kafka import Record, latest_per_key, make_producer
from tests.support.stores import (
    FAST,
    assert_equals_model,
    bulk_tuning,
    mixed_records,
    produce_tracked,
    table_of,
)


def test_steady_state_path_equals_the_last_record_per_key(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    topic = make_topic(partitions=4)
    records = mixed_records(20_000, keys=3_000, seed=1)
    end = produce_tracked(producer, topic, records)
    assert len(end) == 4

    store = make_store(topic, tuning=FAST)
    assert store.wait_until_ready(60), store.status()
    assert_equals_model(store, latest_per_key(records), end)
    assert store.status().records_applied_total == len(records)
    assert not (store.config.path / "bulk").exists()  # the WriteBatch path, not the bulk loader

    # Once READY, it keeps following the topic.
    more = mixed_records(3_000, keys=3_500, seed=2, tombstone_every=3)
    end = end.merged(produce_tracked(producer, topic, more))
    assert store.wait_for_position(end, 60), store.status()
    assert_equals_model(store, latest_per_key(records + more), end)


def test_bulk_path_with_many_chunks_and_tombstones_across_chunks(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    topic = make_topic(partitions=3)
    early = [(b"key-%05d" % i, b"early-%d" % i) for i in range(4_000)]
    # Later chunks delete half the early keys, rewrite some, and re-create a few deleted ones.
    deletes: list[Record] = [(b"key-%05d" % i, None) for i in range(0, 4_000, 2)]
    rewrites: list[Record] = [(b"key-%05d" % i, b"late-%d" % i) for i in range(1, 4_000, 3)]
    revived: list[Record] = [(b"key-%05d" % i, b"revived-%d" % i) for i in range(0, 4_000, 10)]
    records = early + mixed_records(6_000, keys=6_000, seed=3) + deletes + rewrites + revived
    end = produce_tracked(producer, topic, records)
    model = latest_per_key(records)
    assert b"key-00002" not in model
    assert model[b"key-00010"] == b"revived-10"

    store = make_store(topic, tuning=bulk_tuning(min_records=500, chunk_records=1_000))
    assert store.wait_until_ready(90), store.status()
    assert_equals_model(store, model, end)
    assert store.status().records_applied_total == len(records)
    assert (store.config.path / "bulk").is_dir()  # the bulk loader wrote SST files

    # After the bootstrap the same store applies new records one batch at a time.
    more: list[Record] = [(b"key-00001", None), (b"key-00002", b"back"), (b"fresh", b"new")]
    end = end.merged(produce_tracked(producer, topic, more))
    assert store.wait_for_position(end, 60), store.status()
    assert_equals_model(store, latest_per_key(records + more), end)


@pytest.mark.parametrize(
    "tuning", [FAST, bulk_tuning(min_records=100, chunk_records=700)], ids=["batch", "bulk"]
)
def test_a_restart_resumes_from_the_stored_offsets(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer, tuning: StoreTuning
) -> None:
    topic = make_topic(partitions=3)
    records = mixed_records(5_000, keys=1_000, seed=4)
    end = produce_tracked(producer, topic, records)
    first = make_store(topic, tuning=tuning)
    assert first.wait_until_ready(60), first.status()
    assert_equals_model(first, latest_per_key(records), end)
    first.stop()

    more = mixed_records(700, keys=1_200, seed=5, tombstone_every=4)
    end = end.merged(produce_tracked(producer, topic, more))
    second = make_store(topic, tuning=tuning)
    assert second.wait_until_ready(60), second.status()
    assert second.wait_for_position(end, 60)
    assert_equals_model(second, latest_per_key(records + more), end)
    # Only the new records were read again.
    assert second.status().records_applied_total == len(more)


def _level0_files(db_path: Path) -> int | None:
    """Level-0 files of a store's table, from a read-only instance opened beside the store
    (``None``: a compaction removed files while it opened)."""
    try:
        db = rocksdict.Rdict(
            str(db_path), rocksdict.Options(raw_mode=True), access_type=rocksdict.AccessType.read_only()
        )
    except Exception:
        return None
    try:
        return int(db.property_int_value("rocksdb.num-files-at-level0") or 0)
    finally:
        db.close()


def test_a_bulk_restore_leaves_no_level0_files_behind(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = make_topic(partitions=3)
    records = mixed_records(15_000, keys=15_000, seed=6, tombstone_every=1_000_000)
    end = produce_tracked(producer, topic, records)
    # Two workers, each writing one file, and at most one file flushed from the records applied
    # before the bulk restore began: the files span the same key range, so they land in level 0,
    # fewer than the four at which RocksDB compacts them by itself.
    tuning = bulk_tuning(
        min_records=500, chunk_records=100_000, poll_max_records=100_000, bulk_load_workers=2
    )
    caplog.set_level(logging.INFO, logger="store.lifecycle.materializer")
    store = make_store(topic, tuning=tuning)
    assert store.wait_until_ready(60), store.status()
    # Merged before READY, not after: the first reads search one sorted run.
    assert _level0_files(store.config.path / "db") == 0
    messages = [record.getMessage() for record in caplog.records]
    merging = next(i for i, m in enumerate(messages) if "files the bulk restore left in level 0" in m)
    ready = next(i for i, m in enumerate(messages) if " READY at position " in m)
    assert merging < ready
    assert 0 < int(re.findall(r"merging the (\d+) files", messages[merging])[0]) < 4
    assert_equals_model(store, latest_per_key(records), end)


def test_a_bulk_restores_files_are_merged_before_ready(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = make_topic(partitions=3)
    records = mixed_records(15_000, keys=15_000, seed=7, tombstone_every=1_000_000)
    end = produce_tracked(producer, topic, records)
    # Chunks of 1,000 records: more level-0 files than RocksDB's trigger (4), which it merges by
    # itself once compactions resume (a table this small maybe before the store looks); READY
    # waits for that merge, then for the table read into the block cache.
    caplog.set_level(logging.INFO, logger="store.lifecycle.materializer")
    store = make_store(topic, tuning=bulk_tuning(min_records=500, chunk_records=1_000))
    assert store.wait_until_ready(60), store.status()
    # The merged table was read into the block cache (it has room for it) before READY.
    memory = store.status().memory
    assert memory is not None
    values = sum(len(value) for value in latest_per_key(records).values())
    assert memory.block_cache_usage_bytes >= values // 2
    db = rocksdict.Rdict(
        str(store.config.path / "db"),
        rocksdict.Options(raw_mode=True),
        access_type=rocksdict.AccessType.read_only(),
    )
    try:
        assert int(db.property_int_value("rocksdb.num-files-at-level0") or 0) == 0
        assert int(db.property_int_value("rocksdb.compaction-pending") or 0) == 0
    finally:
        db.close()
    messages = [record.getMessage() for record in caplog.records]
    ready = next(i for i, m in enumerate(messages) if " READY at position " in m)
    warmed = next(i for i, m in enumerate(messages) if "read into the block cache" in m)
    assert warmed < ready
    assert_equals_model(store, latest_per_key(records), end)


def test_an_empty_topic_is_ready_at_once(
    make_topic: Callable[..., str], make_store: Callable[..., Store]
) -> None:
    store = make_store(make_topic(partitions=3))
    assert store.wait_until_ready(30), store.status()
    status = store.status()
    assert status.restore is None
    assert status.records_applied_total == 0
    assert status.total_lag == 0
    assert table_of(store) == ({}, Position())


def test_null_keys_are_skipped_and_counted(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    topic = make_topic(partitions=3)
    records: list[Record] = [(None if i % 9 == 0 else b"k%03d" % (i % 200), b"v%d" % i) for i in range(900)]
    end = produce_tracked(producer, topic, records)
    nulls = sum(1 for key, _ in records if key is None)

    store = make_store(topic)
    assert store.wait_until_ready(60), store.status()
    # The offsets of the skipped records count as read.
    assert_equals_model(store, latest_per_key(records), end)
    status = store.status()
    assert status.null_key_records == nulls
    assert status.records_applied_total == len(records) - nulls

    # The materializer goes on after null keys.
    end = end.merged(produce_tracked(producer, topic, [(None, b"x"), (b"after", b"nulls")], partition=0))
    assert store.wait_for_position(end, 30), store.status()
    with store.view() as view:
        assert view.get(b"after") == b"nulls"
    assert store.status().null_key_records == nulls + 1
    assert store.state is StoreState.READY


def test_restore_progress_is_reported_while_restoring_and_cleared_when_ready(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = make_topic(partitions=3)
    records = mixed_records(60_000, keys=20_000, seed=6)
    end = produce_tracked(producer, topic, records)
    # At most 50 records a batch: by its 60th batch the store has applied at most 3,000 of 60,000,
    # so each hold below is mid-restore whatever the speed of the machine.
    held = HeldApplies(monkeypatch, at=(3, 20, 60))
    store = make_store(topic, tuning=FAST.replace(poll_max_records=50))

    progressing = [held.observe(store.status) for _ in range(3)]
    for status in progressing:
        assert status.state is StoreState.RESTORING, status
        assert status.restore is not None
        assert status.restore.records_applied > 0
        assert status.restore.records_remaining > 0
        assert set(status.restore.target) == {0, 1, 2}
        assert status.restore.records_applied + status.restore.records_remaining <= len(records)
        assert status.total_lag > 0
    applied = [s.restore.records_applied for s in progressing if s.restore]
    assert applied == sorted(applied)
    assert applied[0] < applied[-1]
    # Every state shown on the way to READY is one of the restore's.
    deadline = time.monotonic() + 120
    while (status := store.status()).state is not StoreState.READY:
        assert status.state in (StoreState.CREATED, StoreState.RESTORING), status
        assert time.monotonic() < deadline, status
        time.sleep(0.001)

    assert store.wait_until_ready(120), store.status()
    ready = store.status()
    assert ready.restore is None
    assert ready.position == end
    assert ready.end_offsets == end
    assert ready.lag == {0: 0, 1: 0, 2: 0}
    assert ready.records_applied_total == len(records)
    assert ready.approximate_num_keys > 0
    assert ready.size_on_disk_bytes > 0
    assert ready.seconds_since_last_contact is not None


@pytest.mark.parametrize(
    "tuning", [FAST, bulk_tuning(min_records=100, chunk_records=5_000)], ids=["batch", "bulk"]
)
def test_readiness_is_not_fooled_by_a_low_list_offsets_answer(
    broker: LocalBroker,
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    tuning: StoreTuning,
) -> None:
    topic = make_topic(partitions=3)
    # Few, large batches: the broker's ListOffsets "latest" answers the last batch's base offset + 1.
    big_batches = make_producer(
        broker.bootstrap_servers,
        **{"linger.ms": 500, "batch.num.messages": 100_000, "batch.size": 16_000_000},
    )
    records = mixed_records(30_000, keys=8_000, seed=7)
    end = produce_tracked(big_batches, topic, records)
    model = latest_per_key(records)

    probe = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "probe-never-joined"})
    try:
        listed = {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3)}
    finally:
        probe.close()
    # The trap is armed: the sampled end offsets are far below the true ones.
    assert sum(listed.values()) < end.total() // 2, (listed, end)

    store = make_store(topic, tuning=tuning)
    assert store.wait_until_ready(90), store.status()
    # READY means everything is there, at once.
    assert_equals_model(store, model, end)


def test_the_restore_log_names_the_target_fetches_found_with_progress_and_time_left(
    broker: LocalBroker,
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = make_topic(partitions=3)
    # Large batches: the broker's ListOffsets answer is far too low, only fetches tell the end.
    big_batches = make_producer(
        broker.bootstrap_servers,
        **{"linger.ms": 500, "batch.num.messages": 100_000, "batch.size": 16_000_000},
    )
    end = produce_tracked(big_batches, topic, mixed_records(20_000, keys=5_000, seed=8))
    caplog.set_level(logging.INFO, logger="store.lifecycle.materializer")
    tuning = FAST.replace(poll_max_records=500, progress_log_interval_seconds=0.0)
    store = make_store(topic, tuning=tuning)
    assert store.wait_until_ready(90), store.status()

    messages = [record.getMessage() for record in caplog.records]
    started = next(message for message in messages if "restoring topic" in message)
    assert "towards at least" in started  # all the broker's ListOffsets answer can tell
    lines = [message for message in messages if '" restoring: ' in message]
    refined = [line for line in lines if f" to go to {end})" in line]
    assert refined, lines[-3:]
    assert re.search(r"restoring: \d+% \([\d,]+ records applied, [\d,]+ to go to ", refined[-1])
    assert re.search(r"[\d,]+ records/s, (about \S+ left|time left unknown yet)$", refined[-1])
    assert any("left" in line and "unknown" not in line for line in refined)


def test_freshness_is_observed_per_batch_applied_once_ready_from_the_record_timestamps(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    topic = make_topic(partitions=2)
    end = produce_tracked(producer, topic, mixed_records(2_000, keys=500, seed=3))
    store = make_store(topic, tuning=FAST)
    assert store.wait_until_ready(60), store.status()
    restored = store.status().freshness
    assert restored is not None
    assert restored.count == 0  # a restore is catching up, not serving fresh records

    producer.produce(topic, key=b"fresh", value=b"1", partition=0)
    producer.flush(30)
    assert store.wait_for_position(store.position().merged(Position({0: end.get(0, 0) + 1})), 60)
    fresh = store.status().freshness
    assert fresh is not None
    assert fresh.count >= 1
    assert dict(fresh.cumulative())[60.0] == fresh.count  # seconds, not an hour

    # A record stamped an hour ago by its producer (a replay) is an hour stale when it is seen.
    an_hour_ago_ms = int((time.time() - 3_600) * 1000)
    producer.produce(topic, key=b"replayed", value=b"2", partition=1, timestamp=an_hour_ago_ms)
    producer.flush(30)
    assert store.wait_for_position(Position({1: end.get(1, 0) + 1}), 60)
    stale = store.status().freshness
    assert stale is not None
    cumulative = dict(stale.cumulative())
    assert cumulative[math.inf] - cumulative[300.0] == 1
    assert stale.sum_seconds >= 3_600
