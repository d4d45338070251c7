"""Nothing the store does writes to Kafka: no topics, no consumer groups, no committed offsets,
even when the user's Kafka settings ask for commits and topic auto-creation."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from service.local.broker import LocalBroker
from store import Store
from tests.support.kafka import create_topic, latest_per_key, make_producer
from tests.support.stores import assert_equals_model, mixed_records, produce_tracked, wait_until

# Settings a user might pass that would write to Kafka if the store let them through.
HOSTILE = {
    "enable.auto.commit": "true",
    "auto.commit.interval.ms": "100",
    "enable.auto.offset.store": "true",
    "group.id": "statestore-hostile",
    "auto.offset.reset": "earliest",
    "allow.auto.create.topics": "true",
}


def committed_offsets(admin: AdminClient, group: str) -> list[TopicPartition]:
    """Offsets the broker holds for ``group`` (only those actually committed)."""
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    partitions = futures[group].result(timeout=15).topic_partitions or []
    return [tp for tp in partitions if tp.offset >= 0]


def test_materializing_writes_nothing_to_kafka(
    own_broker: LocalBroker, make_store: Callable[..., Store]
) -> None:
    servers = own_broker.bootstrap_servers
    create_topic(servers, "products", partitions=3)
    producer = make_producer(servers)
    records = mixed_records(5_000, keys=1_000, seed=31)
    end = produce_tracked(producer, "products", records)
    admin = AdminClient({"bootstrap.servers": servers})
    topics_before = set(admin.list_topics(timeout=10).topics)
    assert topics_before == {"products"}
    assert admin.list_consumer_groups().result(timeout=15).valid == []

    store = make_store("products", name="products", bootstrap_servers=servers, kafka=HOSTILE)
    missing = make_store("not-there", name="missing", bootstrap_servers=servers, kafka=HOSTILE)
    assert store.wait_until_ready(60), store.status()
    more = mixed_records(500, keys=1_200, seed=32)
    end = end.merged(produce_tracked(producer, "products", more))
    assert store.wait_for_position(end, 60), store.status()
    assert_equals_model(store, latest_per_key(records + more), end)
    wait_until(
        lambda: "does not exist" in (missing.status().last_error or ""), 30, "the store to wait for its topic"
    )
    store.stop()
    missing.stop()

    assert set(admin.list_topics(timeout=10).topics) == topics_before  # "not-there" was not created
    assert admin.list_consumer_groups().result(timeout=15).valid == []
    for group in ("statestore-products-never-joined", "statestore-missing-never-joined", HOSTILE["group.id"]):
        assert committed_offsets(admin, group) == []
    probe = Consumer({"bootstrap.servers": servers, "group.id": "statestore-products-never-joined"})
    try:
        committed = probe.committed([TopicPartition("products", p) for p in range(3)], timeout=15)
    finally:
        probe.close()
    assert [tp.offset for tp in committed] == [-1001, -1001, -1001]
