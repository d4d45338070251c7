"""Records produced with explicit timestamps, and the brute-force model of reads as of a time."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from confluent_kafka import KafkaError, Message, Producer


@dataclasses.dataclass(frozen=True)
class Stamped:
    """One record as the broker stored it, with the timestamp the producer set."""

    partition: int
    offset: int
    key: bytes
    value: bytes | None
    timestamp: int


def produce_stamped(
    producer: Producer, topic: str, records: Iterable[tuple[bytes, bytes | None, int, int]]
) -> list[Stamped]:
    """Produce ``(key, value, timestamp_ms, partition)`` records in order, flush, and return them
    with the offsets the delivery reports gave them."""
    delivered: list[Stamped] = []
    errors: list[KafkaError] = []

    def report(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            errors.append(error)
            return
        partition, offset, key = message.partition(), message.offset(), message.key()
        assert partition is not None
        assert offset is not None
        assert key is not None
        delivered.append(Stamped(partition, offset, key, message.value(), message.timestamp()[1]))

    for key, value, timestamp, partition in records:
        producer.produce(topic, value, key, partition=partition, timestamp=timestamp, on_delivery=report)
    assert producer.flush(30) == 0, "records still unsent after 30 s"
    assert not errors, errors
    return delivered


def value_at(
    records: Sequence[Stamped], key: bytes, at: int, as_of: Mapping[int, int] | None = None
) -> bytes | None:
    """Brute force: the value of ``key``'s record with the greatest (timestamp, offset) at or below
    ``at`` (only records below ``as_of`` when given); ``None`` for none or a tombstone."""
    best: Stamped | None = None
    for record in records:
        if record.key != key or record.timestamp > at:
            continue
        if as_of is not None and record.offset >= as_of.get(record.partition, 0):
            continue
        if best is None or (record.timestamp, record.offset) > (best.timestamp, best.offset):
            best = record
    return None if best is None else best.value


def table_at(
    records: Sequence[Stamped], at: int, as_of: Mapping[int, int] | None = None
) -> dict[bytes, bytes]:
    """Every key's value as of ``at`` (absent keys left out)."""
    table = {}
    for key in {record.key for record in records}:
        value = value_at(records, key, at, as_of)
        if value is not None:
            table[key] = value
    return table


def compacted(records: Iterable[Stamped]) -> list[Stamped]:
    """Each key's last record by offset: what history begins from for records applied before it
    (a compacted topic keeps no more, so the table starts each key's history there)."""
    last: dict[bytes, Stamped] = {}
    for record in sorted(records, key=lambda record: (record.partition, record.offset)):
        last[record.key] = record
    return list(last.values())
