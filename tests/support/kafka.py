"""Test helpers for the real local broker: topics, producing, and the 'last record per key' model."""

from __future__ import annotations

import itertools
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from store import Position

Record = tuple[bytes | None, bytes | None]  # (key, value); a None value is a tombstone


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap_servers: str, topic: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    futures = admin.create_topics(
        [
            NewTopic(
                topic, num_partitions=partitions, replication_factor=1, config={"cleanup.policy": "compact"}
            )
        ]
    )
    for future in futures.values():
        future.result(timeout=15)
    # Wait until the metadata shows every partition.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=5)
        if topic in md.topics and len(md.topics[topic].partitions) == partitions:
            return
        time.sleep(0.05)
    raise AssertionError(f"topic {topic} did not appear with {partitions} partitions")


def add_partitions(bootstrap_servers: str, topic: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    for future in admin.create_partitions([NewPartitions(topic, total)]).values():
        future.result(timeout=15)


class TestProducer(Producer):
    """A producer of test data; remembered (weakly) so that it never outlives its broker."""

    __test__ = False  # not a test class, whatever pytest's name patterns say
    bootstrap_servers: str


_open_producers: weakref.WeakSet[TestProducer] = weakref.WeakSet()


def close_producers(bootstrap_servers: str) -> None:
    """Close every producer still open on the broker at ``bootstrap_servers`` (before it stops):
    one left open would log librdkafka's connection errors, raw, for the rest of the run."""
    for producer in list(_open_producers):
        if producer.bootstrap_servers == bootstrap_servers:
            close_producer(producer)


def close_producer(producer: TestProducer, timeout: float = 5.0) -> None:
    """Deliver what it holds (up to ``timeout``), drop what it could not, and close it."""
    _open_producers.discard(producer)
    producer.flush(timeout)
    producer.purge()
    producer.close()


def make_producer(bootstrap_servers: str, **overrides: str | int) -> TestProducer:
    """A producer for test data, closed at the latest when its broker fixture stops.

    The local broker does not de-duplicate a retried batch (idempotence is not honoured), so a
    retry on a busy machine appends the batch twice. One request in flight keeps such a copy right
    after its original, where it changes no key's last value; only the end offsets move, so tests
    take the end of a topic from :func:`topic_end`, not from delivery reports.
    """
    config: dict[str, str | int] = {
        "bootstrap.servers": bootstrap_servers,
        "linger.ms": 5,
        "batch.num.messages": 10000,
        "queue.buffering.max.messages": 1_000_000,
        "allow.auto.create.topics": False,
        "max.in.flight.requests.per.connection": 1,
    }
    config.update(overrides)
    producer = TestProducer(config)
    producer.bootstrap_servers = bootstrap_servers
    _open_producers.add(producer)
    return producer


def topic_end(
    bootstrap_servers: str, topic: str, at_least: Mapping[int, int] | None = None, timeout: float = 30.0
) -> Position:
    """The next offset of every partition of ``topic``: where a fetch reports the end.

    Reads every partition from its start to its end: the local broker answers a ListOffsets
    "latest" too low (its quirk), and a fetch that starts at the last batch can report that too.
    ``at_least`` are offsets known to exist: the end found must reach them.
    """
    consumer = Consumer(
        {"bootstrap.servers": bootstrap_servers, "group.id": "tests-topic-end", "enable.partition.eof": True}
    )
    try:
        partitions = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        ends: dict[int, int] = {}
        deadline = time.monotonic() + timeout
        while len(ends) < partitions:
            assert time.monotonic() < deadline, f"no end of partition from {topic} in {timeout}s: {ends}"
            for message in consumer.consume(10_000, 0.2):
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    ends[message.partition() or 0] = message.offset() or 0
        end = Position(ends)
        assert end.reaches(at_least or {}), (end, at_least)
        return end
    finally:
        consumer.close()


def produce(
    bootstrap_servers: str,
    topic: str,
    records: Iterable[Record],
    *,
    partitions: int | None = None,
    producer: Producer | None = None,
) -> dict[int, int]:
    """Produce records (round-robin over ``partitions`` when given, else by key hash); flush.

    Returns the number of records sent per partition (when ``partitions`` is given).
    """
    own = producer is None
    producer = producer or make_producer(bootstrap_servers)
    counts: dict[int, int] = {}
    cycle = itertools.cycle(range(partitions)) if partitions else None
    for key, value in records:
        kwargs: dict[str, object] = {}
        if cycle is not None:
            partition = next(cycle)
            kwargs["partition"] = partition
            counts[partition] = counts.get(partition, 0) + 1
        while True:
            try:
                producer.produce(topic, key=key, value=value, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} records were not delivered"
    del own
    return counts


def latest_per_key(records: Iterable[Record]) -> dict[bytes, bytes]:
    """The model of a compacted topic: the last record per key, tombstones removing the key.

    Only valid when all records of one key land on one partition (keyed partitioning).
    """
    model: dict[bytes, bytes] = {}
    for key, value in records:
        if key is None:
            continue
        if value is None:
            model.pop(key, None)
        else:
            model[key] = value
    return model


def model_from_partitioned(records_by_partition: Mapping[int, list[Record]]) -> dict[bytes, bytes]:
    """The same model when each key is written to only one partition (per-partition order holds)."""
    model: dict[bytes, bytes] = {}
    for records in records_by_partition.values():
        model.update(latest_per_key(records))
    return model


def produce_keyed(bootstrap_servers: str, topic: str, records: Iterable[Record], partitioner: str) -> None:
    """Produce ``records`` with librdkafka's ``partitioner`` placing every key (e.g. ``murmur2_random``,
    which places keys as Java clients do); flush."""
    produce(
        bootstrap_servers, topic, records, producer=make_producer(bootstrap_servers, partitioner=partitioner)
    )


def landed_partitions(bootstrap_servers: str, topic: str) -> dict[bytes, set[int]]:
    """For every key of ``topic``, read back from the broker, the partitions its records are on."""
    end = topic_end(bootstrap_servers, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "tests-landed"})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in end])
        seen = dict.fromkeys(end, 0)
        found: dict[bytes, set[int]] = {}
        deadline = time.monotonic() + 30
        while any(seen[p] < end[p] for p in end):
            assert time.monotonic() < deadline, f"could not read {topic} back: at {seen}, end {dict(end)}"
            for message in consumer.consume(10_000, 0.2):
                if message.error() is not None:
                    continue
                partition, key = message.partition() or 0, message.key()
                seen[partition] = (message.offset() or 0) + 1
                if key is not None:
                    found.setdefault(key, set()).add(partition)
        return found
    finally:
        consumer.close()


def produce_timed(
    producer: Producer, topic: str, records: list[tuple[bytes, bytes | None, int]]
) -> list[Message]:
    """Produce ``(key, value, timestamp ms)`` records placed by the producer's partitioner; flush.
    Returns the delivered messages (partition, offset, timestamp) in production order."""
    delivered: dict[int, Message] = {}
    errors: list[KafkaError] = []

    def report(number: int) -> Callable[[KafkaError | None, Message], None]:
        def done(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                errors.append(error)
            delivered[number] = message

        return done

    for number, (key, value, timestamp) in enumerate(records):
        producer.produce(topic, key=key, value=value, timestamp=timestamp, on_delivery=report(number))
        producer.poll(0)
    assert producer.flush(30) == 0, "records were not delivered"
    assert not errors, errors
    return [delivered[n] for n in range(len(records))]


def end_of(messages: Iterable[Message]) -> dict[int, int]:
    """The next offset of every partition ``messages`` were delivered to."""
    ends: dict[int, int] = {}
    for message in messages:
        partition, offset = message.partition(), message.offset()
        assert partition is not None
        assert offset is not None
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    return ends
