"""A natural key written under several key schema ids answers the latest write across them, whatever
order the store reads the topic's partitions in: record by record, after a restore with the bulk
tuning, and after a restart. Producers use confluent-kafka's own ``AvroSerializer`` for keys, with
record timestamps set, on a real broker; the model is computed from the delivery reports."""

from __future__ import annotations

import json
import logging
import random
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from store import Store, StoreTuning
from store.formats.keys import RegistryKeys
from store.formats.schemas import SchemaSource
from store.table import families, winners
from store.table.winners import Entry, Winners
from tests.support.kafka import produce_timed
from tests.support.schema_registry import FakeSchemaRegistry, schema_registry
from tests.support.stores import FAST, bulk_tuning, wait_until
from wire.position import Position

LONG = struct.Struct(">q")
BULK = bulk_tuning(min_records=100, chunk_records=300)
Written = tuple[
    int, int, int, bytes | None, int, int
]  # natural key, schema id, time, value, partition, offset


@pytest.fixture
def registry() -> Iterator[FakeSchemaRegistry]:
    with schema_registry() as running:
        yield running


def model_of(written: list[Written]) -> dict[bytes, bytes]:
    """Per natural key: per schema id its last record (by offset), then the greatest (time, offset,
    partition) across schema ids; absent when that one is a tombstone."""
    latest: dict[tuple[int, int], Written] = {}
    for record in written:
        latest[record[0], record[1]] = (
            record  # one byte key: one partition, so production order is offset order
        )
    best: dict[int, Written] = {}
    for (natural, _), record in latest.items():
        current = best.get(natural)
        if current is None or (record[2], record[5], record[4]) > (current[2], current[5], current[4]):
            best[natural] = record
    return {LONG.pack(n): r[3] for n, r in best.items() if r[3] is not None}


def _table(store: Store, keys: list[bytes]) -> dict[bytes, bytes]:
    with store.view() as view:
        values = view.get_many(keys)
    return {key: value for key, value in zip(keys, values, strict=True) if value is not None}


@pytest.mark.parametrize("tuning", [FAST, BULK], ids=["batch", "bulk"])
def test_the_latest_write_across_key_schema_ids_answers_in_any_read_order_and_after_a_restart(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    registry: FakeSchemaRegistry,
    tmp_path: Path,
    tuning: StoreTuning,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    topic = make_topic(partitions=3)
    client = SchemaRegistryClient({"url": registry.url})
    context = SerializationContext(topic, MessageField.KEY)
    versions = [
        AvroSerializer(client, json.dumps("long")),
        AvroSerializer(client, json.dumps({"type": "long", "doc": "v2"})),
        AvroSerializer(client, json.dumps({"type": "long", "doc": "v3"})),
    ]
    ids = [struct.unpack(">I", serializer(0, context)[1:5])[0] for serializer in versions]
    rng = random.Random(24)
    planned: list[tuple[int, int, bytes | None, int]] = []
    for n in range(1_500):
        natural, version = rng.randrange(300), rng.randrange(3)
        value = None if rng.randrange(6) == 0 else b"%d@%d" % (natural, n)
        planned.append((natural, version, value, 1_700_000_000_000 + rng.randrange(5_000)))
    messages = produce_timed(
        producer, topic, [(versions[v](k, context), value, t) for k, v, value, t in planned]
    )
    written: list[Written] = []
    for (natural, version, value, timestamp), message in zip(planned, messages, strict=True):
        assert message.timestamp()[1] == timestamp  # the broker keeps the producer's time
        written.append(
            (natural, ids[version], timestamp, value, message.partition() or 0, message.offset() or 0)
        )
    end = Position({p: 1 + max(w[5] for w in written if w[4] == p) for p in {w[4] for w in written}})
    model = model_of(written)
    assert len(model) > 100

    def keys_codec(name: str) -> RegistryKeys:
        directory = tmp_path / f"{name}.key-schemas"
        return RegistryKeys(
            SchemaSource({"url": registry.url}, f"{topic}-key", directory), "avro", name, directory
        )

    everything = [LONG.pack(n) for n in range(300)]
    store = make_store(topic, tuning=tuning, key_codec=keys_codec("s"))
    assert store.wait_until_ready(120), store.status()
    assert store.wait_for_position(end, 60)
    assert _table(store, everything) == model
    # Natural keys are restored record by record even where a bulk restore would take over: its
    # workers write SST files per share of partitions, and no worker sees a key's other schema ids.
    assert "bulk restore of" not in caplog.text
    store.stop()

    # Restarted on the same copy, the entries decide the records that follow as before.
    more = [
        (n % 300, rng.randrange(3), b"more %d" % n, 1_700_000_000_000 + rng.randrange(6_000))
        for n in range(200)
    ]
    messages = produce_timed(
        producer, topic, [(versions[v](k, context), value, t) for k, v, value, t in more]
    )
    for (natural, version, value, timestamp), message in zip(more, messages, strict=True):
        written.append(
            (natural, ids[version], timestamp, value, message.partition() or 0, message.offset() or 0)
        )
    end = Position({p: 1 + max(w[5] for w in written if w[4] == p) for p in {w[4] for w in written}})
    again = make_store(topic, tuning=tuning, key_codec=keys_codec("s"))
    assert again.wait_until_ready(120), again.status()
    assert again.wait_for_position(end, 60)
    assert _table(again, everything) == model_of(written)


def test_a_winner_replaced_by_an_older_record_of_its_schema_id_gives_way_to_the_next_best() -> None:
    """Pure resolution over an in-memory stand-in for the meta family (ranks, tombstones, promotion)."""
    stored: dict[bytes, bytes] = {}
    rows = {b"k": b"row before"}

    class Family:
        def get(self, keys: list[bytes]) -> list[bytes | None]:
            return [stored.get(key) for key in keys]

    class Batch:
        def put(self, key: bytes, value: bytes, _handle: object) -> None:
            stored[key] = value

    resolver = Winners(Family(), None, rows.get)

    def apply(*records: tuple[int, int, bytes | None, int, int]) -> list[bytes | None]:
        keys, values, _ = resolver.resolve(
            Batch(),
            [b"k"] * len(records),
            [r[2] for r in records],
            [(r[3], r[4], r[1]) for r in records],
            [r[0] for r in records],
        )
        assert set(keys) <= {b"k"}
        for value in values:
            if value is None:
                rows.pop(b"k", None)
            else:
                rows[b"k"] = value
        return values

    # schema id, time, value, partition, offset
    assert apply((1, 100, b"a", 0, 0)) == [b"a"]
    assert apply((2, 200, b"b", 1, 0)) == [b"b"]
    assert apply((1, 150, None, 0, 1)) == []  # an older tombstone under the losing schema id
    assert rows[b"k"] == b"b"
    assert apply((1, 120, b"c", 0, 2)) == []  # an older write under the losing schema id: kept aside
    assert apply((2, 50, b"d", 1, 1)) == [b"c"]  # the winner's schema id went back in time
    entries = winners.decode(stored[winners.PREFIX + b"k"])
    assert entries[2] == Entry(2, 50, 1, 1, True, b"d")
    assert entries[1] == Entry(1, 120, 0, 2, True, None)  # the row holds the winner's value
    assert apply((2, 300, None, 1, 2)) == [None]  # a newer tombstone wins
    assert b"k" not in rows
    assert apply((1, 250, b"e", 0, 3)) == []  # older than the tombstone
    assert apply((2, 260, b"f", 1, 3), (1, 400, b"g", 0, 4)) == [b"f", b"g"]
    assert winners.decode(stored[winners.PREFIX + b"k"])[2].value == b"f"  # moved out of the row


def natural_entries(store: Store) -> dict[int, dict[int, Entry]]:
    """Every natural key's entries as stored in the serving copy's ``meta`` family."""
    serving = store._copies.serving  # the entries are no part of any read: looked at directly
    assert serving is not None
    return {
        LONG.unpack(key[len(winners.PREFIX) :])[0]: winners.decode(stored)
        for key, stored in serving.engine.prefixed(families.META, winners.PREFIX)
    }


def test_the_entries_of_a_key_deleted_under_every_schema_id_are_pruned_once_past_the_grace(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    registry: FakeSchemaRegistry,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=3)
    client = SchemaRegistryClient({"url": registry.url})
    context = SerializationContext(topic, MessageField.KEY)
    versions = [
        AvroSerializer(client, json.dumps("long")),
        AvroSerializer(client, json.dumps({"type": "long", "doc": "v2"})),
        AvroSerializer(client, json.dumps({"type": "long", "doc": "v3"})),
    ]
    ids = [struct.unpack(">I", serializer(0, context)[1:5])[0] for serializer in versions]
    written: list[Written] = []

    def write(records: list[tuple[int, int, bytes | None, int]]) -> Position:
        messages = produce_timed(
            producer, topic, [(versions[v](k, context), value, t) for k, v, value, t in records]
        )
        for (natural, version, value, timestamp), message in zip(records, messages, strict=True):
            written.append(
                (natural, ids[version], timestamp, value, message.partition() or 0, message.offset() or 0)
            )
        partitions = {w[4] for w in written}
        return Position({p: 1 + max(w[5] for w in written if w[4] == p) for p in partitions})

    t0, day = 1_700_000_000_000, 86_400_000
    rng = random.Random(2424)
    # Keys 0-59 written under two schema ids each; 0-19 then deleted under both (long ago), 20-39
    # deleted under both a day later, 40-49 deleted under one of them only; 50-59 stay.
    under = {n: rng.sample(range(3), 2) for n in range(60)}
    first = [(n, v, b"%d v%d" % (n, v), t0 + rng.randrange(1_000)) for n in range(60) for v in under[n]]
    deletes = [(n, v, None, t0 + 2_000 + rng.randrange(1_000)) for n in range(20) for v in under[n]]
    deletes += [(n, v, None, t0 + day + rng.randrange(1_000)) for n in range(20, 40) for v in under[n]]
    deletes += [(n, under[n][0], None, t0 + 2_000) for n in range(40, 50)]
    write(first)
    end = write(deletes)
    tuning = FAST.replace(history_prune_interval_seconds=0.05)

    def keys_codec(name: str) -> RegistryKeys:
        directory = tmp_path / f"{name}.key-schemas"
        return RegistryKeys(
            SchemaSource({"url": registry.url}, f"{topic}-key", directory), "avro", name, directory
        )

    everything = [LONG.pack(n) for n in range(200)]
    store = make_store(topic, tuning=tuning, key_codec=keys_codec("s"))
    assert store.wait_until_ready(120), store.status()
    assert store.wait_for_position(end, 60)
    assert _table(store, everything) == model_of(written)
    # Deleted under every schema id, but no partition has gone a grace past the deletes yet.
    assert set(natural_entries(store)) == set(range(60))

    # Records a day and more later on every partition: the first deletes are past the grace.
    end = write([(n, 0, b"later %d" % n, t0 + day + 5_000) for n in range(100, 130)])
    assert {w[4] for w in written[-30:]} == {0, 1, 2}
    assert store.wait_for_position(end, 60)
    kept = set(range(20, 60)) | set(range(100, 130))
    wait_until(lambda: set(natural_entries(store)) == kept, 30, "the entries of keys 0-19 pruned")
    model = model_of(written)
    assert _table(store, everything) == model
    # A key deleted under one schema id only keeps both entries (its other record answers).
    assert all(len(natural_entries(store)[n]) == 2 for n in range(40, 50))
    store.stop()

    # Restarted on the same copy, and restored from the topic into a new one: the same answers, the
    # same entries left once the restored copy has pruned.
    again = make_store(topic, tuning=tuning, key_codec=keys_codec("s"))
    assert again.wait_until_ready(120), again.status()
    assert again.wait_for_position(end, 60)
    assert set(natural_entries(again)) == kept
    assert _table(again, everything) == model
    again.stop()
    fresh = make_store(topic, name="fresh", tuning=tuning, key_codec=keys_codec("fresh"))
    assert fresh.wait_until_ready(120), fresh.status()
    assert fresh.wait_for_position(end, 60)
    wait_until(lambda: set(natural_entries(fresh)) == kept, 30, "the restored copy's entries pruned")
    assert _table(fresh, everything) == model
