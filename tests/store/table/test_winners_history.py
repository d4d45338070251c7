"""Reads as of a time and as of a position of a store whose natural keys are written under several
key schema ids, on the real broker and real RocksDB, against the brute-force model: as of time
``T`` a natural key answers its record with the greatest ``(timestamp, offset, partition)`` at or
below ``T`` among all its records under every schema id (only those below the position pinned),
absent if that is a tombstone, as a plain key answers its records (KIP-889).

As of a position alone, the rule of the current answers over the records below it
(``test_winners.model_of``), where it is exact (``store.table.winners``, "Reads of the past"). With
records applied in the order of their times, and with late records under other schema ids,
records from before history began among them."""

from __future__ import annotations

import json
import logging
import random
import struct
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from store import HistorySpec, Store
from store.formats.keys import RegistryKeys
from store.formats.schemas import SchemaSource
from store.table import families, winners
from store.table.timed_reader import TimedReader
from tests.store.table.test_winners import Written, model_of
from tests.support.kafka import produce_timed
from tests.support.schema_registry import FakeSchemaRegistry, schema_registry
from tests.support.stores import FAST
from wire.position import Position

LONG = struct.Struct(">q")
KEYS = 40


@pytest.fixture
def registry() -> Iterator[FakeSchemaRegistry]:
    with schema_registry() as running:
        yield running


def value_at(written: Sequence[Written], natural: int, at: int, as_of: Position) -> bytes | None:
    """Brute force: the natural key's record with the greatest (time, offset, partition) at or below
    ``at``, under any schema id, below ``as_of``; ``None`` for none or a tombstone."""
    best: Written | None = None
    for record in written:
        if record[0] != natural or record[2] > at or record[5] >= as_of.get(record[4], 0):
            continue
        if best is None or (record[2], record[5], record[4]) > (best[2], best[5], best[4]):
            best = record
    return None if best is None else best[3]


class Topic:
    """Natural keys written under three versions of the key subject, record times set."""

    def __init__(self, producer: Producer, topic: str, registry: FakeSchemaRegistry) -> None:
        client = SchemaRegistryClient({"url": registry.url})
        self.topic = topic
        self._registry_url = registry.url
        self._producer = producer
        self._context = SerializationContext(topic, MessageField.KEY)
        self._versions = [
            AvroSerializer(client, json.dumps("long")),
            AvroSerializer(client, json.dumps({"type": "long", "doc": "v2"})),
            AvroSerializer(client, json.dumps({"type": "long", "doc": "v3"})),
        ]
        self._ids = [struct.unpack(">I", version(0, self._context)[1:5])[0] for version in self._versions]
        self.written: list[Written] = []

    def started_store(
        self, make_store: Callable[..., Store], directory: Path, hot_entries: int | None = None
    ) -> Store:
        """A store of this topic with history, its keys decoded through the registry, READY."""
        codec = RegistryKeys(
            SchemaSource({"url": self._registry_url}, f"{self.topic}-key", directory), "avro", "s", directory
        )
        tuned = {} if hot_entries is None else {"tuning": FAST.replace(read_cache_entries=hot_entries)}
        store = make_store(
            self.topic,
            **tuned,
            history=HistorySpec(retention_offsets=10**6),
            key_codec=codec,
        )
        assert store.wait_until_ready(60), store.status()
        return store

    def write(self, records: list[tuple[int, int, bytes | None, int]]) -> Position:
        """``(natural key, version, value or None, time)`` records; the topic's end after them."""
        messages = produce_timed(
            self._producer,
            self.topic,
            [(self._versions[v](n, self._context), value, t) for n, v, value, t in records],
        )
        for (natural, version, value, timestamp), message in zip(records, messages, strict=True):
            partition, offset = message.partition() or 0, message.offset() or 0
            self.written.append((natural, self._ids[version], timestamp, value, partition, offset))
        partitions = {w[4] for w in self.written}
        return Position({p: 1 + max(w[5] for w in self.written if w[4] == p) for p in partitions})


def _assert_exact(store: Store, written: Sequence[Written], at: int, as_of: Position) -> None:
    naturals = list(range(KEYS))
    with store.view(as_of, at_time=at) as view:
        assert isinstance(view, TimedReader)
        answers = view.get_many([LONG.pack(n) for n in naturals])
    assert answers == [value_at(written, n, at, as_of) for n in naturals], (at, as_of)


@pytest.mark.parametrize("hot_entries", [0, 1_000], ids=["seeks", "timelines"])
def test_reads_as_of_a_time_equal_the_model_when_each_key_is_read_in_time_order(
    hot_entries: int,
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    registry: FakeSchemaRegistry,
    tmp_path: Path,
) -> None:
    topic = Topic(producer, make_topic(partitions=3), registry)
    store = topic.started_store(make_store, tmp_path / "key-schemas", hot_entries)
    rng = random.Random(2429)
    t0 = 1_700_000_000_000
    ends = []
    for round_number in range(8):
        naturals = rng.sample(range(KEYS), 25)
        records = [
            (
                n,
                rng.randrange(3),
                None if rng.randrange(5) == 0 else b"%d@%d" % (n, round_number),
                t0 + round_number * 1_000 + rng.randrange(1_000),
            )
            for n in naturals
        ]
        end = topic.write(records)
        assert store.wait_for_position(end, 60), store.status()
        ends.append(end)
    times = sorted({w[2] + d for w in topic.written for d in (-1, 0, 1)} | {t0 - 1, t0 + 10_000})
    for at in times[:: 1 if hot_entries else 3]:
        _assert_exact(store, topic.written, at, ends[-1])
    for as_of in ends[1:-1:2]:
        for at in times[::5]:
            _assert_exact(store, topic.written, at, as_of)
    # As of a position alone: the rule of the current answers (``model_of``) over the records below it.
    for as_of in ends:
        below = [w for w in topic.written if w[5] < as_of.get(w[4], 0)]
        expected = model_of(below)
        with store.view(as_of) as view:
            answers = view.get_many([LONG.pack(n) for n in range(KEYS)])
        assert answers == [expected.get(LONG.pack(n)) for n in range(KEYS)], as_of


def compacted(written: Sequence[Written]) -> list[Written]:
    """Each (natural key, schema id)'s last record by offset: what a copy keeps of the records applied
    before its history began (a compacted topic keeps no more)."""
    last: dict[tuple[int, int], Written] = {}
    for record in sorted(written, key=lambda w: (w[4], w[5])):
        last[record[0], record[1]] = record
    return list(last.values())


def _one_schema_id_a_partition(written: Sequence[Written], natural: int, as_of: Position) -> bool:
    """Whether the natural key's records below ``as_of`` sit on partitions holding one schema id each."""
    seen: dict[int, set[int]] = {}
    for record in written:
        if record[0] == natural and record[5] < as_of.get(record[4], 0):
            seen.setdefault(record[4], set()).add(record[1])
    return all(len(ids) == 1 for ids in seen.values())


@pytest.mark.parametrize("hot_entries", [0, 1_000], ids=["seeks", "timelines"])
def test_reads_as_of_a_time_equal_the_model_with_late_records_under_other_schema_ids(
    hot_entries: int,
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    registry: FakeSchemaRegistry,
    tmp_path: Path,
) -> None:
    topic = Topic(producer, make_topic(partitions=3), registry)
    rng = random.Random(2430)
    t0 = 1_700_000_000_000

    def records(count: int, spread: int) -> list[tuple[int, int, bytes | None, int]]:
        return [
            (
                rng.randrange(KEYS),
                rng.randrange(3),
                None if rng.randrange(5) == 0 else b"%d" % rng.randrange(10**6),
                t0 + rng.randrange(spread),
            )
            for _ in range(count)
        ]

    # Before history begins: every key written, under one to three schema ids, in any time order.
    topic.write([(n, rng.randrange(3), b"first %d" % n, t0 + rng.randrange(5_000)) for n in range(KEYS)])
    topic.write(records(80, 5_000))
    store = topic.started_store(make_store, tmp_path / "key-schemas", hot_entries)
    written = compacted(topic.written)
    floor = max(w[2] for w in topic.written)
    # After: times in any order, also older than records of the same key under other schema ids.
    ends = []
    for _ in range(3):
        before = len(topic.written)
        end = topic.write(records(70, 10_000))
        written += topic.written[before:]
        assert store.wait_for_position(end, 60), store.status()
        ends.append(end)
    times = sorted({w[2] + d for w in written for d in (-1, 0, 1)} | {floor, t0 + 20_000})
    times = [t for t in times if t >= floor]
    for at in times[:: 1 if hot_entries else 2]:
        _assert_exact(store, written, at, ends[-1])
    for as_of in ends[:-1]:
        for at in times[::4]:
            _assert_exact(store, written, at, as_of)
    # As of a position alone: the rule over the records below it, where no partition holds records
    # of a natural key under two schema ids (module doc).
    for as_of in ends:
        below = [w for w in written if w[5] < as_of.get(w[4], 0)]
        expected = model_of(below)
        naturals = [n for n in range(KEYS) if _one_schema_id_a_partition(written, n, as_of)]
        assert len(naturals) >= 5
        with store.view(as_of) as view:
            answers = view.get_many([LONG.pack(n) for n in naturals])
        assert answers == [expected.get(LONG.pack(n)) for n in naturals], as_of


def test_a_copy_whose_history_holds_only_the_winners_changes_is_rebuilt(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    registry: FakeSchemaRegistry,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="store")
    topic = Topic(producer, make_topic(partitions=3), registry)
    t0 = 1_700_000_000_000

    store = topic.started_store(make_store, tmp_path / "key-schemas")
    end = topic.write([(1, 1, b"b", t0 + 200), (1, 0, b"a", t0 + 100)])
    assert store.wait_for_position(end, 60)
    # A copy begun by a version whose history kept the winners' changes only has no marker.
    serving = store._copies.serving  # the marker is no part of any read: removed directly
    assert serving is not None
    assert winners.history_reason(serving.engine.family(families.META), True) is None
    batch = serving.engine.new_batch()
    batch.delete(b"natural_history", serving.engine.handle(families.META))
    serving.engine.write(batch)
    store.stop()
    assert "rebuilding" not in caplog.text

    again = topic.started_store(make_store, tmp_path / "key-schemas")
    assert "reads of the past now need every record; rebuilding from the earliest offsets" in caplog.text
    assert again.wait_for_position(end, 60)
    with again.view() as view:
        assert view.get(LONG.pack(1)) == b"b"
