"""The Kafka calls of a record source and a restore worker: a poll, offsets, a topic's metadata.

A leaf of ``store.kafka``: it imports nothing else of this package but the batch types.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicCollection, TopicPartition


def poll(consumer: Consumer, max_records: int, timeout: float) -> list[Message]:
    """Whatever is queued (up to ``max_records``); if nothing is, wait up to ``timeout`` for one message.

    A batch call waits until its batch is full or its timeout passes, which would add the timeout
    to every partial batch (a restore's last one, each one of a trickle); waiting for one message
    returns as soon as any arrives.
    """
    messages = consumer.consume(max_records, 0)
    if not messages:
        messages = consumer.consume(1, timeout)
    return messages


def list_offsets(
    consumer: Consumer, topic: str, partitions: Iterable[int], timeout: float
) -> dict[int, tuple[int, int]]:
    """``(first offset, end offset)`` per partition, asked of the broker (ListOffsets).

    The end offset is a lower bound: some brokers answer it too low. Asking also looks up each
    partition's leader, so that an assignment's first fetch goes out at once (without a known
    leader, librdkafka retries the start-offset lookup only after 500 ms). Raises
    ``KafkaException`` when the broker does not answer.
    """
    return {
        partition: consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
        for partition in partitions
    }


def cached_high_watermarks(consumer: Consumer, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """The high watermark per partition from the last fetch responses (no network round trip);
    partitions without a fetch response yet are left out."""
    highs: dict[int, int] = {}
    for partition in partitions:
        high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)[1]
        if high >= 0:
            highs[partition] = high
    return highs


def describe(admin: Any, topic: str, timeout: float) -> tuple[str | None, int] | None:
    """``(topic id, partition count)`` of ``topic``, ``None`` if it does not exist; ``admin`` is an
    ``AdminClient``. Raises ``KafkaException`` (or a timeout) when the broker does not answer."""
    futures = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)
    try:
        description = futures[topic].result(timeout=timeout + 1)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and error.code() in (
            KafkaError.UNKNOWN_TOPIC_OR_PART,
            KafkaError._UNKNOWN_TOPIC,
        ):
            return None
        raise
    topic_id = str(description.topic_id) if description.topic_id is not None else None
    return topic_id, len(description.partitions)
