"""The Kafka side of materialization: consumer settings, topic metadata, error classes.

Nothing here ever writes to Kafka: no consumer group is joined, no offset is committed, no topic
is created (logging disabled, as in KIP-813). The topic is the only source of truth.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from store.kafka.batch import KafkaErrorReport
from store.kafka.calls import describe

logger = logging.getLogger(__name__)

# Settings the materializer owns; a user's value for them would break the guarantees.
_OWNED = {
    # librdkafka insists on a group id even for manual assignment; it is never joined or committed.
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,  # the only reliable "caught up to the high watermark" signal
    "auto.offset.reset": "error",  # an invalid stored offset must trigger a rebuild, not a silent skip
    "allow.auto.create.topics": False,
}
# Defaults a user may override.
_DEFAULTS: dict[str, Any] = {
    # Some brokers answer fetches with far more than asked; without this a full local queue makes
    # librdkafka back off for a whole second.
    "fetch.queue.backoff.ms": 10,
    "queued.max.messages.kbytes": 262144,
    "reconnect.backoff.max.ms": 5000,
    "topic.metadata.refresh.interval.ms": 60000,
    "log_level": 3,
}
# Admin-client settings are the connection and security subset of the user's settings.
_CONSUMER_ONLY_PREFIXES = ("fetch.", "queued.", "enable.", "auto.", "group.", "isolation.", "allow.")


class TransientSourceError(Exception):
    """A problem a retry may fix: broker unreachable, topic missing for now, metadata changed."""


class RebuildRequired(Exception):
    """The stored offsets no longer describe the topic; the store must restore from earliest."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def consumer_config(store_name: str, kafka: Mapping[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = dict(_DEFAULTS)
    config.update(kafka)
    config.setdefault("client.id", f"statestore-{store_name}")
    config["group.id"] = f"statestore-{store_name}-never-joined"
    config.update(_OWNED)
    return config


def admin_config(kafka: Mapping[str, Any]) -> dict[str, Any]:
    config = {k: v for k, v in kafka.items() if not k.startswith(_CONSUMER_ONLY_PREFIXES)}
    config.setdefault("log_level", 3)
    return config


@dataclasses.dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: str | None
    partitions: int


def describe_topic(admin: AdminClient, topic: str, timeout: float) -> TopicInfo | None:
    """The topic's id and partition count, or ``None`` when the topic does not exist."""
    try:
        described = describe(admin, topic, timeout)
    except KafkaException as exc:
        raise TransientSourceError(f"cannot describe topic {topic!r}: {exc}") from exc
    except Exception as exc:  # timeouts surface as concurrent.futures errors
        raise TransientSourceError(f"cannot describe topic {topic!r}: {exc!r}") from exc
    return None if described is None else TopicInfo(topic, *described)


class TopicWatch:
    """The topic's metadata, checked now and then: deleted, recreated, or partitions added or removed.

    ``describe(timeout)`` asks the broker (``RecordSource.describe``).
    """

    def __init__(self, describe: Callable[[float], TopicInfo | None], info: TopicInfo) -> None:
        self._describe = describe
        self.info = info
        self.partitions = info.partitions

    def check(self, timeout: float = 10.0) -> list[int]:
        """The partitions added since the last check.

        Raises ``TransientSourceError`` when the topic was deleted (the session waits for it) and
        ``RebuildRequired`` when it was recreated or lost partitions.
        """
        info = self.info
        current = self._describe(timeout)
        if current is None:
            raise TransientSourceError(f'topic "{info.name}" was deleted; waiting for it to come back')
        if info.topic_id is not None and current.topic_id is not None and current.topic_id != info.topic_id:
            raise RebuildRequired(
                f'topic "{info.name}" was deleted and recreated'
                f" (topic id {info.topic_id} is now {current.topic_id})"
            )
        if current.partitions < self.partitions:
            raise RebuildRequired(
                f'topic "{info.name}" shrank from {self.partitions} to {current.partitions} partitions'
            )
        added = list(range(self.partitions, current.partitions))
        self.partitions = current.partitions
        return added


def new_consumer(store_name: str, kafka: Mapping[str, Any], on_error: Any, logger: Any) -> Consumer:
    """A consumer for the store; ``logger`` takes librdkafka's log lines (``store.kafka.log``)."""
    config = consumer_config(store_name, kafka)
    config["error_cb"] = on_error
    config["logger"] = logger
    try:
        return Consumer(config)
    except (KafkaException, ValueError, TypeError) as exc:
        raise TransientSourceError(f'cannot create the consumer for store "{store_name}": {exc}') from exc


def new_admin(kafka: Mapping[str, Any], logger: Any) -> AdminClient:
    """An admin client (topic metadata only); ``logger`` takes librdkafka's log lines."""
    return AdminClient({**admin_config(kafka), "logger": logger})


def check_fetch_error(report: KafkaErrorReport, topic: str) -> None:
    """Raise for a fetch error the session cannot go on with; return for one a retry may fix.

    ``RebuildRequired`` when the stored offsets are out of range, ``TransientSourceError`` when
    the topic or partition is gone, or the error is fatal (the consumer is recreated).
    """
    where = f"{topic}[{report.partition}]" if report.partition is not None else "the topic"
    if report.code in OUT_OF_RANGE_CODES:
        raise RebuildRequired(
            f"the stored offset of {where} is out of range ({report.text}): the topic was truncated,"
            " recreated, or its retention passed the store"
        )
    if report.code in TOPIC_GONE_CODES:
        raise TransientSourceError(f"{where} is gone ({report.text}); waiting for the topic")
    if report.fatal:
        raise TransientSourceError(f"fatal consumer error on {where}: {report.text}; recreating the consumer")


# Error codes seen on fetch that mean the stored offsets are no longer valid.
OUT_OF_RANGE_CODES = frozenset({KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE})
# Error codes that mean the topic (or one of its partitions) went away.
TOPIC_GONE_CODES = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
)
