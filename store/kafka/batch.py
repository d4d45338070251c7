"""Records taken from a consumer, and the fetch events that came with them.

:class:`RecordBatch`: keys, values with ``None`` for a tombstone and the next offset of every
partition read, ready to be written as one atomic batch or one SST file; :class:`KafkaErrorReport`:
a fetch event or a client error as plain values (the child processes send them over pipes);
:class:`Placement`: how many of a batch's records sit on the partition their key hashes to.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TypeVar

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, Message

_T = TypeVar("_T")
Meta = tuple[int, int, int]  # (partition, offset, timestamp in ms) of one record
Placer = Callable[[Sequence[bytes], int], Sequence[int]]
"""The producers' rule: the partition of each key among ``n`` partitions (``clients.partitioners``)."""

PLACEMENT_SAMPLE = 1024
"""Records of one batch whose partition is checked at most: a wrong partitioner misplaces most
records, so a sample finds it at once, and the check stays a small share of applying the batch."""


@dataclasses.dataclass(frozen=True, slots=True)
class KafkaErrorReport:
    """An error the Kafka client reported: for ``partition`` (a fetch event, end of partition
    included), or for the client as a whole (``partition`` is ``None``)."""

    code: int
    text: str
    fatal: bool
    partition: int | None

    @classmethod
    def of(cls, error: KafkaError, partition: int | None) -> KafkaErrorReport:
        return cls(error.code(), error.str(), error.fatal(), partition)

    @property
    def end_of_partition(self) -> bool:
        """The partition was read up to its high watermark (not an error)."""
        return self.code == KafkaError._PARTITION_EOF


@dataclasses.dataclass(slots=True)
class RecordBatch:
    """Records of one or more polls, in the order read; ``None`` values are tombstones.

    ``next_offsets`` holds, per partition read, the offset after its last record;
    ``oldest_timestamp_ms`` the earliest timestamp of the first record of each partition's run
    (a partition's records come in offset order, so this is the batch's oldest but for
    out-of-order timestamps), ``None`` when none has one. ``metas`` is
    ``None`` unless asked for (a store keeping history needs each record's partition, offset and
    timestamp), and so is ``partitions`` (each record's partition, to check it against its key).
    Records with a null key are dropped and counted in ``null_keys``. ``schema_ids`` holds each
    record's key schema id once keys written through the Schema Registry are decoded (``None``
    otherwise: ``store.table.winners`` resolves a natural key written under several).
    """

    keys: list[bytes] = dataclasses.field(default_factory=list)
    values: list[bytes | None] = dataclasses.field(default_factory=list)
    next_offsets: dict[int, int] = dataclasses.field(default_factory=dict)
    metas: list[Meta] | None = None
    null_keys: int = 0
    partitions: list[int] | None = None
    oldest_timestamp_ms: int | None = None
    schema_ids: list[int | None] | None = None

    @classmethod
    def collecting(cls, with_metas: bool, with_partitions: bool = False) -> RecordBatch:
        return cls(metas=[] if with_metas else None, partitions=[] if with_partitions else None)

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, messages: list[Message]) -> list[KafkaErrorReport]:
        """Append one poll's records; return its fetch events (end of partition, errors).

        This is the hottest loop of a restore: mapping an unbound method over the messages costs
        one C call per message and field, with no bytecode run per message.
        """
        # Truth values only: a KafkaError compared with None raises.
        if any(map(Message.error, messages)):
            reports = [
                KafkaErrorReport.of(message.error(), message.partition())  # type: ignore[arg-type]
                for message in messages
                if message.error() is not None
            ]
            records = [message for message in messages if message.error() is None]
        else:
            reports = []
            records = messages
        if records:
            self._add_records(records)
        return reports

    def _add_records(self, records: list[Message]) -> None:
        keys: list[bytes | None] = list(map(Message.key, records))
        values = list(map(Message.value, records))
        metas = (
            [(message.partition(), message.offset(), message.timestamp()[1]) for message in records]
            if self.metas is not None
            else None
        )
        partitions = list(map(Message.partition, records)) if self.partitions is not None else None
        self._advance(records)
        if None in keys:
            kept = [i for i, key in enumerate(keys) if key is not None]
            self.null_keys += len(keys) - len(kept)
            keys, values = [keys[i] for i in kept], [values[i] for i in kept]
            metas, partitions = _kept(metas, kept), _kept(partitions, kept)
        self.keys.extend(keys)  # type: ignore[arg-type]  # the null keys were dropped above
        self.values.extend(values)
        if metas is not None and self.metas is not None:
            self.metas.extend(metas)  # type: ignore[arg-type]  # a record always has its partition
        if partitions is not None and self.partitions is not None:
            self.partitions.extend(partitions)  # type: ignore[arg-type]  # a record always has one

    def keep(self, kept: list[int]) -> None:
        """Keep only the records at positions ``kept`` (the next offsets stay: every record was read)."""
        self.keys = [self.keys[i] for i in kept]
        self.values = [self.values[i] for i in kept]
        self.metas = _kept(self.metas, kept)
        self.partitions = _kept(self.partitions, kept)
        self.schema_ids = _kept(self.schema_ids, kept)

    def newest_times(self) -> dict[int, int] | None:
        """The greatest record timestamp of each partition (``None`` without ``metas``): it bounds
        the times of the records a store keeping history restores (``store.table.timed``)."""
        if self.metas is None:
            return None
        newest: dict[int, int] = {}
        for partition, _offset, timestamp in self.metas:
            newest[partition] = max(timestamp, newest.get(partition, timestamp))
        return newest

    def placement(self, placer: Placer, topic_partitions: int, sample: int = PLACEMENT_SAMPLE) -> Placement:
        """How many of (a sample of) the batch's records sit on the partition their key hashes to.

        Needs ``partitions`` (a batch collected with them); at most ``sample`` records, evenly
        spread over the batch, are checked.
        """
        partitions = self.partitions
        if not partitions:
            return Placement(0, 0, None)
        step = max(1, -(-len(partitions) // sample))
        keys, actual = self.keys[::step], partitions[::step]
        expected = placer(keys, topic_partitions)
        misplaced = [i for i, (want, got) in enumerate(zip(expected, actual, strict=True)) if want != got]
        example = None
        if misplaced:
            first = misplaced[0]
            example = (
                f"key {keys[first][:32]!r} is on partition {actual[first]} but hashes to"
                f" {expected[first]} of {topic_partitions}"
            )
        return Placement(len(keys), len(misplaced), example)

    def _advance(self, records: list[Message]) -> None:
        # The last record of each partition carries its next offset. A poll mostly holds one or
        # two partitions' runs, so a scan back until every partition is seen would often walk the
        # whole poll in bytecode; searching a reversed list of partitions stays in C.
        backwards = list(map(Message.partition, reversed(records)))
        forwards = backwards[::-1]
        next_offsets = self.next_offsets
        oldest = self.oldest_timestamp_ms
        for partition in set(backwards):
            if partition is None:  # a record always has one; the type allows None
                continue
            next_offset: int = records[len(records) - 1 - backwards.index(partition)].offset() + 1  # type: ignore[operator]
            if next_offset > next_offsets.get(partition, -1):
                next_offsets[partition] = next_offset
            kind, timestamp = records[forwards.index(partition)].timestamp()
            if kind != TIMESTAMP_NOT_AVAILABLE and (oldest is None or timestamp < oldest):
                oldest = timestamp
        self.oldest_timestamp_ms = oldest


def _kept(items: list[_T] | None, kept: list[int]) -> list[_T] | None:
    """The ``kept`` positions of ``items`` (``None`` stays ``None``)."""
    return [items[i] for i in kept] if items is not None else None


@dataclasses.dataclass(frozen=True, slots=True)
class Placement:
    """Records whose partition was checked against their key's, those misplaced, and the first one."""

    checked: int
    misplaced: int
    example: str | None
