"""Reading a changelog topic: record batches, each partition's catch-up, and restore workers' events.

- :func:`poll` and :class:`RecordBatch`: records taken from a consumer (keys, values with ``None``
  for a tombstone, the next offset of every partition read), ready to be written as one atomic
  batch or one SST file, and the fetch events that came with them as :class:`KafkaErrorReport`.
- :class:`Poll`: one poll's records, fetch events and high watermarks, as a record source gives
  them to the materializer (``store.source``).
- :class:`PartitionCatchUp` and :class:`CatchUp`: how far each partition is read against the high
  watermarks that fetch responses report, and whether it is caught up.
- The events a restore worker sends the store's process (:class:`ChunkWritten`,
  :class:`KafkaErrorReport`, :class:`WorkerLog`, :class:`WorkerCaughtUp`, :class:`WorkerFailed`),
  as frames on a pipe (:func:`write_frame`, :func:`read_frame`); a poll as plain values for the
  consumer process's pipe (:meth:`Poll.fields`, :meth:`Poll.from_fields`; frames: ``store.pipes``).
- :func:`describe`: a topic's id and partition count, asked of the broker.

A leaf module: it imports nothing else of this package. The child processes (the scripts
``store/restore_worker.py`` and ``store/consumer_process.py``, see ``store.children``) import it
without the package's ``__init__`` and its dependencies (which keeps their start cheap), so both
sides share one definition of records, catch-up, events and frames.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import select
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicCollection,
    TopicPartition,
)

Meta = tuple[int, int, int]  # (partition, offset, timestamp in ms) of one record
Placer = Callable[[Sequence[bytes], int], Sequence[int]]
"""The producers' rule: the partition of each key among ``n`` partitions (``clients.partitioners``)."""

PLACEMENT_SAMPLE = 1024
"""Records of one batch whose partition is checked at most: a wrong partitioner misplaces most
records, so a sample finds it at once, and the check stays a small share of applying the batch."""


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
    Records with a null key are dropped and counted in ``null_keys``.
    """

    keys: list[bytes] = dataclasses.field(default_factory=list)
    values: list[bytes | None] = dataclasses.field(default_factory=list)
    next_offsets: dict[int, int] = dataclasses.field(default_factory=dict)
    metas: list[Meta] | None = None
    null_keys: int = 0
    partitions: list[int] | None = None
    oldest_timestamp_ms: int | None = None

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
            keys = [keys[i] for i in kept]
            values = [values[i] for i in kept]
            metas = [metas[i] for i in kept] if metas is not None else None
            partitions = [partitions[i] for i in kept] if partitions is not None else None
        self.keys.extend(keys)  # type: ignore[arg-type]  # the null keys were dropped above
        self.values.extend(values)
        if metas is not None and self.metas is not None:
            self.metas.extend(metas)  # type: ignore[arg-type]  # a record always has its partition
        if partitions is not None and self.partitions is not None:
            self.partitions.extend(partitions)  # type: ignore[arg-type]  # a record always has one

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


@dataclasses.dataclass(frozen=True, slots=True)
class Placement:
    """Records whose partition was checked against their key's, those misplaced, and the first one."""

    checked: int
    misplaced: int
    example: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Poll:
    """What one poll of a record source brought: records, the fetch events that came with them
    (end of partition, errors), and the high watermarks of the latest fetch responses."""

    records: RecordBatch
    events: list[KafkaErrorReport]
    high_watermarks: dict[int, int]
    messages: int  # records and events together: none means the broker had nothing to say

    @classmethod
    def of(
        cls,
        messages: list[Message],
        with_metas: bool,
        high_watermarks: dict[int, int],
        with_partitions: bool = False,
    ) -> Poll:
        records = RecordBatch.collecting(with_metas, with_partitions)
        events = records.add(messages)
        return cls(records, events, high_watermarks, len(messages))

    def fields(self) -> list[Any]:
        """The poll as plain values (for a pipe: see :meth:`from_fields`)."""
        records = self.records
        return [
            records.keys,
            records.values,
            records.next_offsets,
            records.metas,
            records.null_keys,
            [(event.code, event.text, event.fatal, event.partition) for event in self.events],
            self.high_watermarks,
            self.messages,
            records.partitions,
            records.oldest_timestamp_ms,
        ]

    @classmethod
    def from_fields(cls, fields: Sequence[Any]) -> Poll:
        keys, values, next_offsets, metas, null_keys, events, highs, messages, partitions, oldest = fields
        records = RecordBatch(keys, values, next_offsets, metas, null_keys, partitions, oldest)
        return cls(records, [KafkaErrorReport(*event) for event in events], highs, messages)


class PartitionCatchUp:
    """One partition's catch-up: how far it is read, the high watermark of its last fetch
    response, and whether it is caught up.

    It is caught up once its end of partition was reported, or once it is read up to a high
    watermark (that event comes only with the answer to a further fetch, which the broker holds
    for up to ``fetch.wait.max.ms`` since it has nothing to return). ``target`` is what a restore
    must reach at least: the end offset sampled before reading, a lower bound since some brokers
    answer ListOffsets too low, raised once to the first high watermark a fetch reports.
    """

    __slots__ = ("caught_up", "high_watermark", "next_offset", "partition", "refined", "target")

    def __init__(self, partition: int, next_offset: int | None = None, target: int = 0) -> None:
        self.partition = partition
        self.next_offset = next_offset  # after the last record read (None: not known yet)
        self.target = target
        self.high_watermark: int | None = None
        self.refined = False  # whether a fetch response has set the target
        self.caught_up = False

    def saw_high_watermark(self, high: int) -> bool:
        """Take the high watermark of a fetch response; ``True`` if it raised the target."""
        self.high_watermark = high
        raised = False
        if not self.refined:
            self.refined = True
            raised = high > self.target
            self.target = max(self.target, high)
        if self.next_offset is not None and self.next_offset >= high:
            self.caught_up = True
        return raised

    @property
    def unread(self) -> int:
        """Records between the next offset and the last high watermark (0 while either is unknown)."""
        if self.next_offset is None or self.high_watermark is None:
            return 0
        return max(0, self.high_watermark - self.next_offset)


class CatchUp:
    """Every partition's catch-up, driven by what each poll read and reported."""

    def __init__(self, partitions: Iterable[PartitionCatchUp] = ()) -> None:
        self.partitions = {catch_up.partition: catch_up for catch_up in partitions}

    def add(self, catch_up: PartitionCatchUp) -> None:
        self.partitions[catch_up.partition] = catch_up

    def read(self, next_offsets: Mapping[int, int]) -> None:
        """Records were read up to ``next_offsets``."""
        partitions = self.partitions
        for partition, next_offset in next_offsets.items():
            if partition in partitions:
                partitions[partition].next_offset = next_offset

    def ended(self, partitions: Iterable[int]) -> None:
        """These partitions reported their end (or a worker read them to it)."""
        for partition in partitions:
            if partition in self.partitions:
                self.partitions[partition].caught_up = True

    def saw_high_watermarks(self, highs: Mapping[int, int]) -> bool:
        """Take the high watermarks of the last fetch responses; ``True`` if a target was raised."""
        raised = False
        for partition, high in highs.items():
            catch_up = self.partitions.get(partition)
            if catch_up is not None:
                raised = catch_up.saw_high_watermark(high) or raised
        return raised

    @property
    def done(self) -> bool:
        """Every partition is caught up."""
        return all(catch_up.caught_up for catch_up in self.partitions.values())

    @property
    def refined(self) -> bool:
        """Every partition's target comes from a fetch response, not only from ListOffsets."""
        return all(catch_up.refined for catch_up in self.partitions.values())

    @property
    def unread(self) -> int:
        return sum(catch_up.unread for catch_up in self.partitions.values())

    def next_offsets(self) -> dict[int, int]:
        """The next offset per partition, where known."""
        return {
            partition: catch_up.next_offset
            for partition, catch_up in self.partitions.items()
            if catch_up.next_offset is not None
        }

    def targets(self) -> dict[int, int]:
        return {partition: catch_up.target for partition, catch_up in self.partitions.items()}

    def high_watermarks(self) -> dict[int, int]:
        """The latest high watermark known per partition (partitions without one are left out)."""
        return {
            partition: catch_up.high_watermark
            for partition, catch_up in self.partitions.items()
            if catch_up.high_watermark is not None
        }


# -- restore workers' events ------------------------------------------------------------------


def newest_per_partition(metas: Iterable[tuple[int, int, int]]) -> dict[int, int]:
    """The greatest timestamp of each partition's records (``Meta`` tuples)."""
    newest: dict[int, int] = {}
    for partition, _offset, timestamp in metas:
        if timestamp > newest.get(partition, -(2**63)):
            newest[partition] = timestamp
    return newest


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkWritten:
    """A worker wrote a chunk's SST file (``None``: no record of the chunk had a key), and how many
    of its records it checked against their key's partition, and found misplaced (plain fields:
    frames carry only values both sides can read)."""

    sst_path: Path | None
    next_offsets: dict[int, int]
    records: int
    null_keys: int
    checked: int = 0
    misplaced: int = 0
    misplaced_example: str | None = None
    newest_times: dict[int, int] | None = None  # per partition, when the store keeps history

    @property
    def placement(self) -> Placement:
        return Placement(self.checked, self.misplaced, self.misplaced_example)


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerCaughtUp:
    """A worker read all its partitions up to their high watermarks and exits."""

    next_offsets: dict[int, int]


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerLog:
    """A log line of a worker's Kafka client (``level``: a ``logging`` level)."""

    level: int
    facility: str
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerFailed:
    """A worker failed (or exited without a word); it is gone."""

    text: str


WorkerEvent = ChunkWritten | KafkaErrorReport | WorkerLog | WorkerCaughtUp | WorkerFailed
_EVENT_TYPES: dict[str, type[WorkerEvent]] = {
    kind.__name__: kind for kind in (ChunkWritten, KafkaErrorReport, WorkerLog, WorkerCaughtUp, WorkerFailed)
}
_FRAME_HEADER = struct.Struct(">I")  # a frame: its length, then a pickle of (worker, kind, fields)
# Writes to a pipe up to this size are atomic (POSIX guarantees at least 512; Linux has 4096).
_ATOMIC_WRITE_BYTES = getattr(select, "PIPE_BUF", 512)
_LONGEST_TEXT = 200


def write_frame(fd: int, worker: int, event: WorkerEvent) -> None:
    """Write one event of ``worker`` to the file descriptor ``fd`` in a single atomic write, so
    frames of workers sharing one pipe never interleave."""
    fields = [getattr(event, field.name) for field in dataclasses.fields(event)]
    frame = pickle.dumps((worker, type(event).__name__, fields), protocol=pickle.HIGHEST_PROTOCOL)
    if _FRAME_HEADER.size + len(frame) > _ATOMIC_WRITE_BYTES:
        # Only error texts can be long; shortened, the frame fits.
        fields = [_shorten(value) for value in fields]
        frame = pickle.dumps((worker, type(event).__name__, fields), protocol=pickle.HIGHEST_PROTOCOL)
    os.write(fd, _FRAME_HEADER.pack(len(frame)) + frame)


def read_frame(stream: IO[bytes]) -> tuple[int, WorkerEvent]:
    """The next ``(worker, event)`` from ``stream``.

    Raises ``EOFError`` at the end of the stream, ``ValueError`` for a frame that is not one.
    """
    header = stream.read(_FRAME_HEADER.size)
    if len(header) < _FRAME_HEADER.size:
        raise EOFError("the event stream ended")
    (length,) = _FRAME_HEADER.unpack(header)
    try:
        worker, kind, fields = pickle.loads(stream.read(length))
        return worker, _EVENT_TYPES[kind](*fields)
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not an event frame: {exc!r}") from exc


def _shorten(value: Any) -> Any:
    return value[:_LONGEST_TEXT] + "..." if isinstance(value, str) and len(value) > _LONGEST_TEXT else value
