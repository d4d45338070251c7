"""Reads as of a time and as of a position of a store whose natural keys are written under several
key schema ids, on the real broker and real RocksDB, against the brute-force model: as of time
``T`` a natural key answers its record with the greatest ``(timestamp, offset, partition)`` at or
below ``T`` among all its records under every schema id (only those below the position pinned),
absent if that is a tombstone, as a plain key answers its records (KIP-889).

As of a position alone, the rule of the current answers over the records below it
(``test_winners.model_of``), also when one partition holds a natural key's records under two schema
ids, the later by offset older in time (``store.table.winners``, "Reads of the past"); also once
history's pruning passed them. With records applied in the order of their times, and with late
records under other schema ids, records from before history began among them."""

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
from store.table.corruption import entries
from store.table.history import scan_versions
from store.table.history_keys import parse_version_value, version_value
from store.table.timed_reader import TimedReader
from tests.store.table.test_winners import Written, model_of
from tests.support.kafka import produce_timed
from tests.support.schema_registry import FakeSchemaRegistry, schema_registry
from tests.support.stores import FAST, wait_until
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
        self,
        make_store: Callable[..., Store],
        directory: Path,
        hot_entries: int | None = None,
        retention_offsets: int = 10**6,
    ) -> Store:
        """A store of this topic with history, its keys decoded through the registry, READY."""
        codec = RegistryKeys(
            SchemaSource({"url": self._registry_url}, f"{self.topic}-key", directory), "avro", "s", directory
        )
        tuned = {} if hot_entries is None else {"tuning": FAST.replace(read_cache_entries=hot_entries)}
        if retention_offsets < 10**6:  # pruned soon after the floor moves
            tuned = {"tuning": FAST.replace(history_prune_interval_seconds=0.05)}
        store = make_store(
            self.topic,
            **tuned,
            history=HistorySpec(retention_offsets=retention_offsets),
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


def _two_schema_ids_on_a_partition(written: Sequence[Written], natural: int, as_of: Position) -> bool:
    """Whether one partition holds records of the natural key below ``as_of`` under two schema ids."""
    seen: dict[int, set[int]] = {}
    for record in written:
        if record[0] == natural and record[5] < as_of.get(record[4], 0):
            seen.setdefault(record[4], set()).add(record[1])
    return any(len(ids) > 1 for ids in seen.values())


def _versions_of(store: Store, key: bytes) -> int:
    """How many versions the serving copy's history holds of ``key``."""
    serving = store._copies.serving  # what pruning left is no part of any read: counted directly
    assert serving is not None
    return len(scan_versions(serving.engine.family(families.HISTORY).iter(), key))


def _assert_exact_as_of(store: Store, written: Sequence[Written], as_of: Position) -> None:
    """As of a position alone: the rule of the current answers over the records below it."""
    expected = model_of([w for w in written if w[5] < as_of.get(w[4], 0)])
    with store.view(as_of) as view:
        answers = view.get_many([LONG.pack(n) for n in range(KEYS)])
    assert answers == [expected.get(LONG.pack(n)) for n in range(KEYS)], as_of


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
    # As of a position alone: the rule over the records below it, also for the natural keys that
    # one partition holds under two schema ids.
    for as_of in ends:
        assert sum(_two_schema_ids_on_a_partition(written, n, as_of) for n in range(KEYS)) >= 5
        _assert_exact_as_of(store, written, as_of)


def test_reads_as_of_a_position_weigh_two_key_schema_ids_on_one_partition_by_the_winner_rule(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    registry: FakeSchemaRegistry,
    tmp_path: Path,
) -> None:
    topic = Topic(producer, make_topic(partitions=1), registry)
    store = topic.started_store(make_store, tmp_path / "key-schemas")
    t0 = 1_700_000_000_000
    # On the one partition, each key under a second schema id after the first, the later one by
    # offset older in time (a late record): a live one, a tombstone, one after a tombstone; and a
    # key whose later record is the newer in time too.
    first = topic.write(
        [
            (1, 1, b"1 new", t0 + 200),
            (2, 0, b"2 live", t0 + 200),
            (3, 0, None, t0 + 300),
            (4, 1, b"4 old", t0),
        ]
    )
    end = topic.write(
        [
            (1, 0, b"1 late", t0 + 100),
            (2, 1, None, t0 + 100),
            (3, 1, b"3 late", t0 + 200),
            (4, 0, b"4 new", t0 + 1),
        ]
    )
    assert store.wait_for_position(end, 60), store.status()
    expected = [b"1 new", b"2 live", None, b"4 new"]
    assert model_of(topic.written) == {LONG.pack(n + 1): v for n, v in enumerate(expected) if v is not None}
    naturals = [LONG.pack(n) for n in (1, 2, 3, 4)]
    with store.view() as view:
        assert view.get_many(naturals) == expected  # the current answers
    with store.view(end) as view:
        assert view.get_many(naturals) == expected
        assert [view.get(key) for key in naturals] == expected
        scanned = view.prefix_scan(b"")
    assert scanned.items == [(LONG.pack(1), b"1 new"), (LONG.pack(2), b"2 live"), (LONG.pack(4), b"4 new")]
    with store.view(first) as view:
        assert view.get_many(naturals) == [b"1 new", b"2 live", None, b"4 old"]
    # Reads as of a time weigh the same versions, and a store's history read whole holds their values.
    with store.view(end, at_time=t0 + 150) as view:
        assert isinstance(view, TimedReader)
        assert view.get_many(naturals) == [b"1 late", None, None, b"4 new"]
        rows = view.history_page(None, 100, 1 << 20)
    assert rows is not None
    assert sorted(value for value in rows.values if value) == sorted(w[3] for w in topic.written if w[3])


def test_reads_as_of_a_position_stay_exact_once_pruning_passed_two_key_schema_ids_on_one_partition(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    registry: FakeSchemaRegistry,
    tmp_path: Path,
) -> None:
    topic = Topic(producer, make_topic(partitions=1), registry)
    store = topic.started_store(make_store, tmp_path / "key-schemas", retention_offsets=2)
    t0 = 1_700_000_000_000
    # Key 1 under v1 at offset 0; under v2 at offsets 1 and 2, the first newer in time than v1's
    # record and the second older: as of any position past offset 2, v1's record answers.
    topic.write([(1, 0, b"a", t0 + 150), (1, 1, b"b", t0 + 200), (1, 1, b"c", t0 + 100)])
    end = topic.write([(2, 0, b"%d" % i, t0 + 300 + i) for i in range(5)])  # offsets 3 to 7
    assert store.wait_for_position(end, 60), store.status()
    floor = Position({0: 6})
    wait_until(lambda: store.history_floor() == floor, 30, "the history floor to move")
    # Key 2's versions at offsets 3 and 4 are superseded below the floor: pruning has passed once
    # they are gone.
    wait_until(lambda: _versions_of(store, LONG.pack(2)) == 3, 30, "pruning to pass below the floor")
    for as_of in (floor, end):
        _assert_exact_as_of(store, topic.written, as_of)
        with store.view(as_of) as view:
            assert view.get(LONG.pack(1)) == b"a"


def _winners_changes_only(store: Store) -> None:
    """Make the store's copy one begun by a version whose history kept the winners' changes only:
    without the marker (no part of any read: removed directly)."""
    serving = store._copies.serving
    assert serving is not None
    assert winners.history_reason(serving.engine.family(families.META), True) is None
    batch = serving.engine.new_batch()
    batch.delete(b"natural_history", serving.engine.handle(families.META))
    serving.engine.write(batch)


def _without_key_schema_ids(store: Store) -> None:
    """Make the store's copy one begun by a version that kept every record without its key schema
    id: its versions and its marker as that version wrote them (no part of any read: rewritten
    directly)."""
    serving = store._copies.serving
    assert serving is not None
    engine = serving.engine
    batch = engine.new_batch()
    history = engine.handle(families.HISTORY)
    for history_key, stored in list(entries(engine.family(families.HISTORY).iter(), b"")):
        batch.put(history_key, version_value(*parse_version_value(stored)), history)
    batch.put(b"natural_history", b"every record", engine.handle(families.META))
    engine.write(batch)


@pytest.mark.parametrize(
    ("older", "reason"),
    [
        (_winners_changes_only, "reads of the past now need every record"),
        (
            _without_key_schema_ids,
            "reads as of a position now weigh each record by the key schema id it was written under",
        ),
    ],
    ids=["winners-changes-only", "without-key-schema-ids"],
)
def test_a_copy_whose_history_an_older_version_began_is_rebuilt(
    older: Callable[[Store], None],
    reason: str,
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    registry: FakeSchemaRegistry,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="store")
    topic = Topic(producer, make_topic(partitions=1), registry)
    t0 = 1_700_000_000_000

    store = topic.started_store(make_store, tmp_path / "key-schemas")
    # Under v1 after v2 on the one partition, older in time: v2's record answers.
    end = topic.write([(1, 1, b"new", t0 + 200), (1, 0, b"late", t0 + 100)])
    assert store.wait_for_position(end, 60)
    older(store)
    store.stop()
    assert "rebuilding" not in caplog.text

    again = topic.started_store(make_store, tmp_path / "key-schemas")
    assert f"{reason}; rebuilding from the earliest offsets" in caplog.text
    assert again.wait_for_position(end, 60)
    with again.view() as view:
        assert view.get(LONG.pack(1)) == b"new"
    with again.view(end) as view:
        assert view.get(LONG.pack(1)) == b"new"
