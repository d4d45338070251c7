"""A store whose values are decoded at ingest restores in bulk: each restore worker decodes the values
it keeps with its own copy of the store's codec, so the table is what the record-by-record path
writes, undecodable values are counted, and a value shape changed during a bulk restore rebuilds
the store in the new shape. Producers use confluent-kafka's own ``AvroSerializer``."""

from __future__ import annotations

import json
import logging
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from store import Store, StoreTuning
from store.formats import ValueCodec
from store.formats.avro import AvroValues
from store.formats.schemas import SchemaSource
from tests.service.test_avro_store import V1, V2, customer
from tests.support.kafka import Record, latest_per_key
from tests.support.schema_registry import FakeSchemaRegistry, schema_registry
from tests.support.stores import FAST, bulk_tuning, produce_tracked

BULK = bulk_tuning(min_records=100, chunk_records=300)


class CountedCodec:
    """A store's value codec that counts the values the store's own process decodes."""

    def __init__(self, inner: ValueCodec) -> None:
        self.inner = inner
        self.decoded = 0
        self.undecodable_in_workers = 0

    @property
    def undecodable_count(self) -> int:
        return self.inner.undecodable_count

    @property
    def last_undecodable(self) -> str | None:
        return self.inner.last_undecodable

    def decode(self, values: Sequence[bytes | None]) -> list[bytes | None]:
        self.decoded += len(values)
        return self.inner.decode(values)

    def worker_codec(self) -> ValueCodec:
        return self.inner.worker_codec()

    def count_undecodable(self, count: int, example: str | None) -> None:
        self.undecodable_in_workers += count
        self.inner.count_undecodable(count, example)


@pytest.fixture
def registry() -> Iterator[FakeSchemaRegistry]:
    with schema_registry() as running:
        yield running


def avro_codec(registry: FakeSchemaRegistry, topic: str, directory: Path) -> CountedCodec:
    return CountedCodec(AvroValues(SchemaSource({"url": registry.url}, f"{topic}-value", directory), "s"))


def stored(store: Store, keys: list[bytes]) -> list[bytes | None]:
    with store.view() as view:
        return view.get_many(keys)


@pytest.mark.parametrize("tuning", [FAST, BULK], ids=["batch", "bulk"])
def test_a_bulk_restore_decodes_values_in_its_workers_as_the_record_path_does(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    registry: FakeSchemaRegistry,
    tmp_path: Path,
    tuning: StoreTuning,
) -> None:
    topic = make_topic(partitions=3)
    client = SchemaRegistryClient({"url": registry.url})
    context = SerializationContext(topic, MessageField.VALUE)
    v1, v2 = AvroSerializer(client, json.dumps(V1)), AvroSerializer(client, json.dumps(V2))
    v1(customer(0), context)  # registers V1 first: V2 is the latest version
    records: list[Record] = []
    for n in range(6_000):
        key = b"c%04d" % (n % 2_000)
        value = v1(customer(n), context) if n % 2 else v2(customer(n, city=f"city {n}"), context)
        records.append((key, value))
    # The last record of three keys cannot be decoded: an unknown schema id, corrupt bytes, no frame.
    records += [
        (b"c0001", b"\x00" + struct.pack(">I", 999) + b"\x02"),
        (b"c0002", b"\x00\x00\x00\x00\x01\xff\xff\xff"),
        (b"c0003", b'{"id": 3}'),
    ]
    end = produce_tracked(producer, topic, records)
    codec = avro_codec(registry, topic, tmp_path / "schemas")
    store = make_store(topic, tuning=tuning, value_codec=codec)
    assert store.wait_until_ready(120), store.status()
    assert store.wait_for_position(end, 60)

    model = latest_per_key(records)
    keys = sorted(model)
    reference = AvroValues(SchemaSource({"url": registry.url}, f"{topic}-value", tmp_path / "ref"), "ref")
    assert stored(store, keys) == reference.decode([model[key] for key in keys])
    documents = dict(zip(keys, stored(store, keys), strict=True))
    assert orjson.loads(documents[b"c1999"] or b"")["city"] is None  # V1's record, in V2's shape
    assert orjson.loads(documents[b"c1998"] or b"")["city"] == "city 5998"
    assert store.status().undecodable_values == 3
    if tuning is BULK:
        # The first polls are applied before the bulk restore takes over; its workers decode the rest.
        assert codec.decoded < len(records) // 2
        assert codec.undecodable_in_workers == 3
    else:
        assert codec.decoded >= len(records)
        assert codec.undecodable_in_workers == 0


def test_a_shape_changed_during_a_bulk_restore_rebuilds_the_store_in_the_new_shape(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    registry: FakeSchemaRegistry,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = make_topic(partitions=2)
    client = SchemaRegistryClient({"url": registry.url})
    context = SerializationContext(topic, MessageField.VALUE)
    v1 = AvroSerializer(client, json.dumps(V1))
    first = [(b"a%04d" % n, v1(customer(n), context)) for n in range(600)]
    end = produce_tracked(producer, topic, first)
    schemas = tmp_path / "schemas"
    before = make_store(topic, tuning=BULK, value_codec=avro_codec(registry, topic, schemas))
    assert before.wait_until_ready(120), before.status()
    assert before.wait_for_position(end, 60)
    assert b"city" not in (stored(before, [b"a0000"])[0] or b"")  # V1's shape
    before.stop()

    # While the store is down, more records of the first version, then a second version: the next
    # start applies its first polls (first version), then restores in bulk, and its workers meet
    # the new shape.
    produce_tracked(producer, topic, [(b"m%04d" % n, v1(customer(n), context)) for n in range(3_000)])
    v2 = AvroSerializer(client, json.dumps(V2))
    second = [(b"b%04d" % n, v2(customer(n, city="Oslo"), context)) for n in range(600)]
    end = produce_tracked(producer, topic, second)
    with caplog.at_level(logging.WARNING):
        after = make_store(topic, tuning=BULK, value_codec=avro_codec(registry, topic, schemas))
        assert after.wait_until_ready(120), after.status()
        assert after.wait_for_position(end, 60)
    rebuilt = [
        r.getMessage() for r in caplog.records if "rebuilding from the earliest offsets" in r.getMessage()
    ]
    assert rebuilt
    assert "restore worker" in rebuilt[0]
    assert "ShapeChangedError" in rebuilt[0]
    values = stored(after, [b"a0000", b"a0599", b"m2999", b"b0000"])
    assert [orjson.loads(v or b"null")["city"] for v in values] == [None, None, None, "Oslo"]
    assert all(b'"city"' in (v or b"") for v in values)  # every record in V2's shape


def test_a_registry_down_during_a_bulk_restore_makes_it_wait_then_go_on(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    registry: FakeSchemaRegistry,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=2)
    subject = f"{topic}-value"
    client = SchemaRegistryClient({"url": registry.url})
    context = SerializationContext(topic, MessageField.VALUE)
    v1, v2 = AvroSerializer(client, json.dumps(V1)), AvroSerializer(client, json.dumps(V2))
    records = [(b"a%04d" % n, v1(customer(n), context)) for n in range(3_000)]
    records += [(b"b%04d" % n, v2(customer(n, city="Oslo"), context)) for n in range(600)]
    end = produce_tracked(producer, topic, records)
    # The store knows the first version and the latest from an earlier run; the second version's
    # schema it has never fetched, and the registry is down when the restore workers need it.
    schemas = tmp_path / "schemas"
    known = SchemaSource({"url": registry.url}, subject, schemas)
    v1_id = registry.register(subject, json.dumps(V1))
    known.schema(v1_id)
    assert known.latest() is not None
    registry.down()
    store = make_store(topic, tuning=BULK, value_codec=avro_codec(registry, topic, schemas))
    deadline = time.monotonic() + 60
    while "schema registry" not in (store.status().last_error or ""):
        assert time.monotonic() < deadline, store.status()
        time.sleep(0.1)
    assert "restore worker" in (store.status().last_error or "")  # said by the bulk restore
    assert not store.wait_until_ready(1)  # nothing skipped: not READY while a schema is missing
    registry.up()
    assert store.wait_until_ready(120), store.status()
    assert store.wait_for_position(end, 60)
    values = stored(store, [b"a0000", b"b0599"])
    assert [orjson.loads(v or b"null")["city"] for v in values] == [None, "Oslo"]
    assert store.status().undecodable_values == 0
