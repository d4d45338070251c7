"""The demo's Kafka side: create the topics, load the dataset, read purchases back, update a price."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from service.local.demo.dataset import CUSTOMERS_TOPIC, PRODUCTS_TOPIC, PURCHASES_TOPIC, Dataset
from service.local.demo.errors import DemoError

PARTITIONS = 3
TIMEOUT_SECONDS = 30.0

# Dimension tables are compacted changelogs (the latest value per key is the table); purchases
# are facts, an ordinary topic.
TOPIC_CONFIGS: dict[str, dict[str, str]] = {
    PRODUCTS_TOPIC: {"cleanup.policy": "compact"},
    CUSTOMERS_TOPIC: {"cleanup.policy": "compact"},
    PURCHASES_TOPIC: {"cleanup.policy": "delete"},
}

Record = tuple[bytes, bytes | None]


def _admin(bootstrap_servers: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap_servers})


def existing_topics(bootstrap_servers: str, timeout: float = 10.0) -> set[str]:
    """Topic names on the broker; raises ``DemoError`` when it cannot be reached."""
    try:
        # Without a topic name: asking for one by name creates it on some brokers.
        metadata = _admin(bootstrap_servers).list_topics(timeout=timeout)
    except KafkaException as exc:
        raise DemoError(
            f"cannot reach the Kafka broker at {bootstrap_servers}: {exc.args[0]}; "
            "check --bootstrap-servers and that the broker runs"
        ) from exc
    return set(metadata.topics)


def create_topics(bootstrap_servers: str) -> dict[str, bool]:
    """Create the demo topics that do not exist yet; returns ``{topic: created_now}``."""
    present = existing_topics(bootstrap_servers)
    missing = [topic for topic in TOPIC_CONFIGS if topic not in present]
    admin = _admin(bootstrap_servers)
    if missing:
        futures = admin.create_topics(
            [
                NewTopic(t, num_partitions=PARTITIONS, replication_factor=1, config=TOPIC_CONFIGS[t])
                for t in missing
            ]
        )
        for topic, future in futures.items():
            try:
                future.result(timeout=TIMEOUT_SECONDS)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise DemoError(
                        f"cannot create topic {topic!r} on {bootstrap_servers}: {exc.args[0]}"
                    ) from exc
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while missing and time.monotonic() < deadline:
        metadata = admin.list_topics(timeout=5)
        if all(t in metadata.topics and metadata.topics[t].partitions for t in missing):
            break
        time.sleep(0.05)
    return {topic: topic in missing for topic in TOPIC_CONFIGS}


def _producer(bootstrap_servers: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            # Same partition for a key as Java producers choose, so updates land next to the original.
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "lz4",
            "allow.auto.create.topics": False,
        }
    )


class _Delivery:
    """Collects delivery reports: the first error, and the last offset per partition."""

    def __init__(self) -> None:
        self.error: KafkaError | None = None
        self.last_offsets: dict[int, int] = {}

    def __call__(self, error: KafkaError | None, message: Any) -> None:
        if error is not None:
            self.error = self.error or error
            return
        partition, offset = message.partition(), message.offset()
        self.last_offsets[partition] = max(offset, self.last_offsets.get(partition, -1))


def produce(bootstrap_servers: str, topic: str, records: Iterable[Record]) -> tuple[int, dict[int, int]]:
    """Write ``records`` keyed to ``topic`` and wait for every one; returns (count, last offsets)."""
    producer = _producer(bootstrap_servers)
    delivery = _Delivery()
    count = 0
    for key, value in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=delivery)
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
        if count % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(TIMEOUT_SECONDS)
    if delivery.error is not None or remaining:
        reason = delivery.error or f"{remaining} records still queued after {TIMEOUT_SECONDS:g} s"
        raise DemoError(f"writing to topic {topic!r} on {bootstrap_servers} failed: {reason}")
    return count, delivery.last_offsets


def _json(value: Any) -> bytes:
    return orjson.dumps(value)


def dimension_records(dataset: Dataset) -> dict[str, list[Record]]:
    """The records of both tables: products (then tombstones of the discontinued), customers."""
    products: list[Record] = [(k.encode(), _json(v)) for k, v in dataset.products.items()]
    products += [(k.encode(), None) for k in dataset.discontinued]
    customers: list[Record] = [(k.encode(), _json(v)) for k, v in dataset.customers.items()]
    return {PRODUCTS_TOPIC: products, CUSTOMERS_TOPIC: customers}


def purchase_records(dataset: Dataset) -> Iterator[Record]:
    for purchase in dataset.purchases():
        yield purchase["purchase_id"].encode(), _json(purchase)


def read_purchases(bootstrap_servers: str) -> list[dict[str, Any]]:
    """Every purchase in the ``purchases`` topic, read up to its end (partition EOF)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": "statestore-demo",  # needed even with assign(); nothing is committed
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": 10,
            "allow.auto.create.topics": False,
        }
    )
    try:
        metadata = consumer.list_topics(timeout=10)
        topic = metadata.topics.get(PURCHASES_TOPIC)
        if topic is None or not topic.partitions:
            raise DemoError(
                f"topic {PURCHASES_TOPIC!r} does not exist on {bootstrap_servers}: load the demo data "
                "first with "
                f"`statestore demo --step seed --bootstrap-servers {bootstrap_servers}`"
            )
        partitions = sorted(topic.partitions)
        consumer.assign([TopicPartition(PURCHASES_TOPIC, p, OFFSET_BEGINNING) for p in partitions])
        open_partitions = set(partitions)
        purchases: list[dict[str, Any]] = []
        deadline = time.monotonic() + 120
        while open_partitions:
            if time.monotonic() > deadline:
                raise DemoError(f"reading topic {PURCHASES_TOPIC!r} on {bootstrap_servers} took over 120 s")
            for message in consumer.consume(10_000, timeout=0.5):
                error = message.error()
                if error is None:
                    value = message.value()
                    if value is not None:
                        purchases.append(orjson.loads(value))
                elif error.code() == KafkaError._PARTITION_EOF:
                    open_partitions.discard(message.partition())
                elif error.fatal() or not error.retriable():
                    raise DemoError(
                        f"reading topic {PURCHASES_TOPIC!r} on {bootstrap_servers} failed: {error}"
                    )
        return purchases
    finally:
        consumer.close()


def update_product(bootstrap_servers: str, product_id: str, value: dict[str, Any]) -> tuple[int, int]:
    """Write a new value of one product; returns the (partition, offset) it was written at."""
    _, last_offsets = produce(bootstrap_servers, PRODUCTS_TOPIC, [(product_id.encode(), _json(value))])
    ((partition, offset),) = last_offsets.items()
    return partition, offset
