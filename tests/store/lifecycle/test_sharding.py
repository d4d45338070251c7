"""Sharded stores on the real broker: each shard materializes only its partitions, and records that are
not on the partition their key hashes to are counted, record by record and in bulk restores."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import pytest

from clients.partitioners import PARTITIONERS, place
from service.local.broker import LocalBroker
from store import Position, Store, StoreSharding, StoreState
from store.kafka.batch import RecordBatch
from tests.support.kafka import create_topic, latest_per_key, make_producer, produce, topic_end, unique_topic
from tests.support.stores import FAST, bulk_tuning, mixed_records, table_of

PARTITIONS = 6
SHARDS = 3


def sharding(shard: int, partitioner: str = "murmur2") -> StoreSharding:
    return StoreSharding(SHARDS, shard, partitioner, functools.partial(place, partitioner))


@pytest.fixture(scope="module")
def java_topic(broker: LocalBroker) -> tuple[str, dict[bytes, bytes]]:
    """A 6-partition topic whose keys a murmur2 producer placed, as Java clients do."""
    topic = unique_topic("sharded")
    create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    records = mixed_records(3_000, 700, seed=5)
    producer = make_producer(broker.bootstrap_servers, partitioner="murmur2_random")
    produce(broker.bootstrap_servers, topic, records, producer=producer)
    return topic, latest_per_key(records)


@pytest.mark.parametrize("bulk", [False, True], ids=["records", "bulk"])
def test_each_shard_materializes_only_its_partitions_and_together_they_are_the_table(
    make_store: Callable[..., Store],
    java_topic: tuple[str, dict[bytes, bytes]],
    bulk: bool,
    broker: LocalBroker,
) -> None:
    topic, model = java_topic
    end = topic_end(broker.bootstrap_servers, topic)
    tuning = bulk_tuning(min_records=100, chunk_records=400) if bulk else FAST
    union: dict[bytes, bytes] = {}
    for shard in range(SHARDS):
        store = make_store(topic, name=f"s{shard}", tuning=tuning, sharding=sharding(shard))
        assert store.wait_until_ready(90), store.status()
        table, position = table_of(store)
        assert sorted(position) == [shard, shard + SHARDS]
        assert position == Position({p: end[p] for p in (shard, shard + SHARDS)})
        assert all(PARTITIONERS["murmur2"](key, PARTITIONS) % SHARDS == shard for key in table)
        assert not union.keys() & table.keys()
        union.update(table)
        status = store.status().sharding
        assert status is not None
        assert (status.shards, status.shard, status.topic_partitions) == (SHARDS, shard, PARTITIONS)
        assert status.partitions == (shard, shard + SHARDS)
        assert status.records_checked > 0
        assert status.misplaced_records == 0
    assert union == model


@pytest.mark.parametrize("bulk", [False, True], ids=["records", "bulk"])
def test_records_a_producer_placed_by_another_rule_are_counted_and_logged_once(
    make_store: Callable[..., Store],
    java_topic: tuple[str, dict[bytes, bytes]],
    bulk: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic, _ = java_topic
    tuning = bulk_tuning(min_records=100, chunk_records=400) if bulk else FAST
    with caplog.at_level(logging.INFO, logger="store"):
        store = make_store(topic, tuning=tuning, sharding=sharding(1, partitioner="crc32"))
        assert store.wait_until_ready(90), store.status()
    # The bulk case counts what the restore workers checked: no record was applied one by one.
    assert any("bulk restore of" in r.getMessage() for r in caplog.records) == bulk
    status = store.status().sharding
    assert status is not None
    assert status.records_checked > 0
    # crc32 and murmur2 agree on a key's partition about one time in six.
    assert status.records_checked / 2 < status.misplaced_records < status.records_checked
    warnings = [
        r.getMessage() for r in caplog.records if "not on the partition its key hashes to" in r.getMessage()
    ]
    assert len(warnings) == 1
    assert "partitioner crc32" in warnings[0]
    assert "hashes to" in warnings[0]


def test_a_store_built_for_another_sharding_is_rebuilt_with_the_reason_logged(
    make_store: Callable[..., Store],
    java_topic: tuple[str, dict[bytes, bytes]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic, model = java_topic
    whole = make_store(topic)
    assert whole.wait_until_ready(60), whole.status()
    whole.stop()
    with caplog.at_level(logging.WARNING, logger="store"):
        shard = make_store(topic, sharding=sharding(2))
        assert shard.wait_until_ready(60), shard.status()
    table, position = table_of(shard)
    assert sorted(position) == [2, 5]
    assert table == {k: v for k, v in model.items() if PARTITIONERS["murmur2"](k, PARTITIONS) % SHARDS == 2}
    assert any("which are not shard 2's of 3" in r.getMessage() for r in caplog.records)
    assert shard.state is StoreState.READY


def test_a_batch_checks_a_sample_of_its_records() -> None:
    batch = RecordBatch.collecting(False, with_partitions=True)
    batch.keys = [b"k%d" % i for i in range(5000)]
    batch.partitions = [PARTITIONERS["murmur2"](key, PARTITIONS) for key in batch.keys]
    batch.partitions[0] = (batch.partitions[0] + 1) % PARTITIONS
    placement = batch.placement(functools.partial(place, "murmur2"), PARTITIONS, sample=1000)
    assert placement.checked == 1000
    assert placement.misplaced == 1
    assert placement.example is not None
    assert "b'k0' is on partition" in placement.example
