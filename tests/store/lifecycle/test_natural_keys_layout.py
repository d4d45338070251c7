"""A copy records how it keeps its keys (as read; by natural value; which shard's share of natural
keys), and a copy kept otherwise than configured now is rebuilt from the topic, the reason logged:
another shard count would leave keys of other shards in it, or miss its own. Keys are written with
confluent-kafka's own ``AvroSerializer`` under two key schema versions on the real broker."""

from __future__ import annotations

import functools
import json
import logging
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from clients.partitioners import PARTITIONERS, place
from store import Store
from store.formats.keys import RegistryKeys
from store.formats.schemas import SchemaSource
from store.lifecycle.sharding import StoreSharding
from tests.support.kafka import end_of, produce_timed
from tests.support.schema_registry import FakeSchemaRegistry, schema_registry
from wire.position import Position

LONG = struct.Struct(">q")
PARTITIONS = 4


@pytest.fixture
def registry() -> Iterator[FakeSchemaRegistry]:
    with schema_registry() as running:
        yield running


def _natural(shards: int, shard: int = 0) -> StoreSharding:
    return StoreSharding(shards, shard, "crc32", functools.partial(place, "crc32"), by_natural_key=True)


def _held(store: Store) -> set[int]:
    with store.view() as view:
        values = view.get_many([LONG.pack(n) for n in range(100)])
    return {n for n, value in enumerate(values) if value is not None}


def test_a_copy_kept_for_another_share_of_natural_keys_or_as_read_is_rebuilt(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    registry: FakeSchemaRegistry,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    client = SchemaRegistryClient({"url": registry.url})
    context = SerializationContext(topic, MessageField.KEY)
    v1 = AvroSerializer(client, json.dumps("long"))
    v2 = AvroSerializer(client, json.dumps({"type": "long", "doc": "v2"}))
    records = [(v1(n, context), b"v1 %d" % n, 1_000) for n in range(100)]
    records += [(v2(n, context), b"v2 %d" % n, 2_000) for n in range(0, 100, 3)]
    end = Position(end_of(produce_timed(producer, topic, records)))

    def keys() -> RegistryKeys:
        directory = tmp_path / "key-schemas"
        return RegistryKeys(
            SchemaSource({"url": registry.url}, f"{topic}-key", directory), "avro", "s", directory
        )

    def share(shards: int) -> set[int]:
        return {n for n in range(100) if PARTITIONERS["crc32"](LONG.pack(n), PARTITIONS) % shards == 0}

    half = make_store(topic, key_codec=keys(), sharding=_natural(2))
    assert half.wait_until_ready(60), half.status()
    assert half.wait_for_position(end, 30)
    assert _held(half) == share(2)
    both = min(n for n in share(2) if n % 3 == 0)  # written under v1, then v2
    with half.view() as view:
        assert view.get(LONG.pack(both)) == b"v2 %d" % both  # the latest write across the schema ids
    half.stop()

    with caplog.at_level(logging.WARNING, logger="store"):
        third = make_store(topic, key_codec=keys(), sharding=_natural(3))
        assert third.wait_until_ready(60), third.status()
        assert third.wait_for_position(end, 30)
    assert _held(third) == share(3)
    assert any("winners; shard 0 of 2 by crc32" in r.getMessage() for r in caplog.records)
    third.stop()

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="store"):
        raw = make_store(topic)  # keys as read: the producers' bytes
        assert raw.wait_until_ready(60), raw.status()
        assert raw.wait_for_position(end, 30)
    with raw.view() as view:
        assert view.get(v2(3, context)) == b"v2 3"
        assert view.get(LONG.pack(3)) is None
    assert any("are now kept as read" in r.getMessage() for r in caplog.records)
