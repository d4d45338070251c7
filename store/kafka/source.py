"""Where the materializer's poll-and-apply step takes its records from.

The step (``store.lifecycle.apply_loop``) sees only a :class:`RecordSource`: polls of records with the fetch
events and high watermarks that came with them (``store.kafka.batch.Poll``), and the topic's metadata.
``store.kafka.child_source.ChildConsumerSource`` runs the Kafka client in a child process, so that a
crash inside it cannot take the reads with it (the default); :class:`ConsumerSource` runs it in the
store's own process (``ConsumerTuning.consumer_in_child_process`` off). The catch-up bookkeeping
(``store.kafka.batch.CatchUp``) does not depend on where polls come from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from store.kafka.batch import KafkaErrorReport
from store.kafka.calls import cached_high_watermarks, list_offsets, poll
from store.kafka.client import TopicInfo, TransientSourceError, describe_topic, new_admin, new_consumer
from store.kafka.log import KafkaLog
from store.kafka.polls import Poll


class RecordSource(Protocol):
    """Polls of one topic's records, from offsets the materializer chooses, and its metadata.

    Every method raises ``TransientSourceError`` when the broker cannot answer (a new session
    starts after a backoff).
    """

    def describe(self, timeout: float) -> TopicInfo | None:
        """The topic's id and partition count, ``None`` if it does not exist."""
        ...

    def list_offsets(self, partitions: Iterable[int], timeout: float) -> dict[int, tuple[int, int]]:
        """``(first offset, end offset)`` per partition, asked of the broker; the end offset is a
        lower bound (some brokers answer it too low). ``TransientSourceError`` if unanswered."""
        ...

    def assign(self, starts: Mapping[int, int]) -> None:
        """Read exactly these partitions, each from its offset (``OFFSET_BEGINNING``: its first)."""
        ...

    def add_partitions(self, partitions: Iterable[int]) -> None:
        """Read these partitions too, from their first offset (the topic grew)."""
        ...

    def poll(self, with_metas: bool, with_partitions: bool = False) -> Poll:
        """Whatever is ready (waiting briefly when nothing is); ``with_metas``: with each record's
        partition, offset and timestamp (``RecordBatch.metas``); ``with_partitions``: with each
        record's partition (``RecordBatch.partitions``)."""
        ...

    def close(self) -> None: ...


class ConsumerSource:
    """A manually assigned confluent-kafka consumer (no group, no commits) and an admin client,
    in this process.

    ``on_client_error`` is called, on the polling thread, for errors the client reports for itself
    (the broker unreachable, ...): they come with no poll. librdkafka's log lines go to
    ``kafka_log``.
    """

    def __init__(
        self,
        store_name: str,
        topic: str,
        kafka: Mapping[str, Any],
        on_client_error: Callable[[KafkaErrorReport], None],
        kafka_log: KafkaLog,
        max_records: int,
        timeout: float,
    ) -> None:
        self._topic = topic
        self._max_records = max_records
        self._timeout = timeout
        self._partitions: list[int] = []

        def client_error(error: KafkaError) -> None:
            on_client_error(KafkaErrorReport.of(error, None))

        self._consumer = new_consumer(store_name, kafka, client_error, kafka_log)
        self._admin = new_admin(kafka, kafka_log)

    def describe(self, timeout: float) -> TopicInfo | None:
        info = describe_topic(self._admin, self._topic, timeout)
        self._admin.poll(0)  # serves the admin client's log lines
        return info

    def list_offsets(self, partitions: Iterable[int], timeout: float) -> dict[int, tuple[int, int]]:
        offsets: dict[int, tuple[int, int]] = {}
        for partition in partitions:
            try:
                offsets.update(list_offsets(self._consumer, self._topic, [partition], timeout))
            except KafkaException as exc:
                raise TransientSourceError(
                    f"cannot read the offsets of {self._topic}[{partition}]: {exc}"
                ) from exc
        return offsets

    def assign(self, starts: Mapping[int, int]) -> None:
        self._consumer.assign([TopicPartition(self._topic, p, offset) for p, offset in starts.items()])
        self._partitions = sorted(starts)

    def add_partitions(self, partitions: Iterable[int]) -> None:
        added = [TopicPartition(self._topic, p, OFFSET_BEGINNING) for p in partitions]
        self._consumer.incremental_assign(added)
        self._partitions = sorted({*self._partitions, *(tp.partition for tp in added)})

    def poll(self, with_metas: bool, with_partitions: bool = False) -> Poll:
        consumer = self._consumer
        messages = poll(consumer, self._max_records, self._timeout)
        highs = cached_high_watermarks(consumer, self._topic, self._partitions)
        return Poll.of(messages, with_metas, highs, with_partitions)

    def close(self) -> None:
        self._consumer.close()
