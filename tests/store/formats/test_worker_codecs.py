"""A value codec's copy for a restore worker (``ValueCodec.worker_codec``): it crosses a pickle as the
job does, decodes exactly as the store's own codec, counts its own undecodable values without
logging them, and what it counted is added to the store's count (and logged there). Values are
written by confluent-kafka's own serializers through the Schema Registry stand-in."""

from __future__ import annotations

import json
import logging
import pickle
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from store.formats import ValueCodec
from store.formats.avro import AvroValues
from store.formats.json_schema import JsonSchemaValues
from store.formats.protobuf import ProtobufValues
from store.formats.schemas import SchemaSource
from tests.service.test_avro_store import V2, customer
from tests.support.schema_registry import FakeSchemaRegistry, schema_registry
from tests.support.serdes import protobuf_message_class

TOPIC = "things"
CONTEXT = SerializationContext(TOPIC, MessageField.VALUE)
BAD = [b"\x00\x00\x00\x03\xe7\x02", b"\x00\x00\x00\x00\x01\xff\xff\xff\xff", b"no frame"]


@pytest.fixture
def registry() -> Iterator[FakeSchemaRegistry]:
    with schema_registry() as running:
        yield running


def _avro(client: SchemaRegistryClient) -> list[bytes | None]:
    serializer = AvroSerializer(client, json.dumps(V2))
    return [serializer(customer(n, city=f"city {n}"), CONTEXT) for n in range(3)]


def _protobuf(client: SchemaRegistryClient) -> list[bytes | None]:
    order = protobuf_message_class()
    serializer = ProtobufSerializer(order, client, {"use.deprecated.format": False})
    return [serializer(order(id=n, name=f"pen {n}"), CONTEXT) for n in range(3)]


def _json_schema(client: SchemaRegistryClient) -> list[bytes | None]:
    schema = {"type": "object", "properties": {"id": {"type": "integer"}}}
    serializer = JSONSerializer(json.dumps(schema), client)
    return [serializer({"id": n}, CONTEXT) for n in range(3)]


CASES: dict[str, tuple[Callable[[SchemaRegistryClient], list[bytes | None]], Callable[..., ValueCodec]]] = {
    "avro": (_avro, lambda schemas: AvroValues(schemas, "things")),
    "protobuf": (_protobuf, lambda schemas: ProtobufValues(schemas, "things")),
    "json_schema": (_json_schema, lambda schemas: JsonSchemaValues(schemas, "things")),
}


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_a_workers_copy_decodes_as_the_store_and_its_count_is_added_to_the_stores(
    fmt: str, registry: FakeSchemaRegistry, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    produce, make = CASES[fmt]
    values = [*produce(SchemaRegistryClient({"url": registry.url})), None, *BAD]
    serialized = "serialized" if fmt == "protobuf" else None
    codec = make(SchemaSource({"url": registry.url}, f"{TOPIC}-value", tmp_path / "schemas", fmt=serialized))
    wanted = codec.decode(values[:3])  # the store decoded some values already

    copy = pickle.loads(pickle.dumps(codec.worker_codec()))  # as the job crosses to the worker
    with caplog.at_level(logging.ERROR, logger="store.formats"):
        decoded = copy.decode(values)
    assert decoded[:4] == [*wanted, None]
    assert all(value is not None and value.startswith(b"\x00statestore:undecodable") for value in decoded[4:])
    assert copy.undecodable_count == len(BAD)
    assert copy.last_undecodable is not None
    # The copy logs nothing (the store's process does); the registry client's own lines aside.
    assert not [record for record in caplog.records if record.name.startswith("store")]
    assert codec.undecodable_count == 0

    with caplog.at_level(logging.ERROR, logger="store.formats"):
        codec.count_undecodable(copy.undecodable_count, copy.last_undecodable)
    assert codec.undecodable_count == len(BAD)
    store_records = [r for r in caplog.records if r.name.startswith("store")]
    assert [r.getMessage().count("values of a bulk restore cannot be decoded") for r in store_records] == [1]
    # The store's own codec still decodes alike after handing out a copy.
    assert codec.decode(values[:3]) == wanted


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_a_copy_made_before_any_value_was_decoded_needs_no_registry_for_the_latest_version(
    fmt: str, registry: FakeSchemaRegistry, tmp_path: Path
) -> None:
    # A bootstrap from nothing: the store hands out copies before it decoded a value, and the
    # workers then decode the latest version's records with the schemas cached when it did.
    produce, make = CASES[fmt]
    values = produce(SchemaRegistryClient({"url": registry.url}))
    serialized = "serialized" if fmt == "protobuf" else None
    codec = make(SchemaSource({"url": registry.url}, f"{TOPIC}-value", tmp_path / "schemas", fmt=serialized))

    copy = pickle.loads(pickle.dumps(codec.worker_codec()))
    registry.down()
    decoded = copy.decode(values)  # raises RegistryUnavailableError if a copy had to ask
    registry.up()
    assert copy.undecodable_count == 0
    assert decoded == codec.decode(values)
    assert all(value is not None and not value.startswith(b"\x00statestore") for value in decoded)
