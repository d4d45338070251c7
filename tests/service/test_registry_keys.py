"""Keys written with Confluent's serializers (Avro, Protobuf, JSON Schema) end to end: the producers'
own serializers write to the real broker under the registry stand-in, the service stores every
key by its natural value at ingest, and reads (HTTP, the Python client) take and answer that value,
whichever version of the key subject the producer wrote it under."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from clients import StatestoreClient
from clients.natural_keys import KeyFormatError
from service.app import create_app
from service.local.broker import LocalBroker
from service.settings import Settings
from tests.clients.conftest import wait_until_ready
from tests.service.test_avro_store import until
from tests.support.kafka import produce
from tests.support.schema_registry import FakeSchemaRegistry, schema_registry
from tests.support.server import serve_app

CUSTOMER = {
    "type": "record",
    "name": "Customer",
    "fields": [{"name": "name", "type": "string"}, {"name": "city", "type": "string"}],
}


@pytest.fixture
def registry() -> Iterator[FakeSchemaRegistry]:
    with schema_registry() as running:
        yield running


def _settings(registry: FakeSchemaRegistry, bootstrap: str, state: Path, stores: list[Any]) -> Settings:
    return Settings(
        kafka={"bootstrap_servers": bootstrap},
        state_dir=state,
        schema_registry={"url": registry.url},
        stores=stores,
    )


def _arrow_keys(
    http: httpx.Client, store: str, keys: pa.Array, params: dict[str, str] | None = None
) -> list[Any]:
    sink = pa.BufferOutputStream()
    batch = pa.record_batch([keys], names=["key"])
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    answer = http.post(
        f"/v1/stores/{store}/keys:batchGet",
        content=sink.getvalue().to_pybytes(),
        headers={"content-type": "application/vnd.apache.arrow.stream"},
        params=params,
    )
    assert answer.status_code == 200, answer.text
    table = pa.ipc.open_stream(answer.content).read_all()
    return list(table.column("value").to_pylist())  # a struct: values decoded at ingest


def test_avro_long_keys_are_found_by_number_under_every_key_schema_version(
    broker: LocalBroker, make_topic: Callable[..., str], registry: FakeSchemaRegistry, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = make_topic(partitions=3)
    client = SchemaRegistryClient({"url": registry.url})
    keys = SerializationContext(topic, MessageField.KEY)
    values = SerializationContext(topic, MessageField.VALUE)
    key_v1 = AvroSerializer(client, json.dumps("long"))
    key_v2 = AvroSerializer(client, json.dumps({"type": "long", "doc": "the customer number"}))
    value = AvroSerializer(client, json.dumps(CUSTOMER))
    old = [(key_v1(n, keys), value({"name": f"c{n}", "city": "Oslo"}, values)) for n in (1, 2, 3, -5)]
    produce(bootstrap, topic, old)
    assert key_v1(3, keys) != key_v2(3, keys)  # two schema ids: other bytes for one number
    store = {
        "name": "customers",
        "topic": topic,
        "key_format": "avro",
        "value_format": "avro",
        "partitioner": "crc32",  # the test producer's (librdkafka's default)
        "history": {"retention_ms": 86_400_000},
        "indexes": [{"name": "by_city", "field": "city"}],
    }
    settings = _settings(registry, bootstrap, tmp_path / "state", [store])
    with serve_app(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as http:
        wait_until_ready(url)
        info = http.get("/v1/stores/customers").json()
        assert (info["key_format"], info["key_schema_format"]) == ("long", "avro")
        before = http.get("/v1/stores/customers").json()["position"]
        # The producer moves to a new key schema version while the store serves.
        new = [(key_v2(n, keys), value({"name": f"new c{n}", "city": "Rome"}, values)) for n in (3, 6)]
        produce(bootstrap, topic, new)
        until(lambda: http.get("/v1/stores/customers/keys/6").status_code == 200, "key 6 applied")
        assert http.get("/v1/stores/customers/keys/1").json() == {"name": "c1", "city": "Oslo"}
        assert http.get("/v1/stores/customers/keys/-5").json()["name"] == "c-5"
        # Written under v1 then v2: one key, the record applied last.
        assert http.get("/v1/stores/customers/keys/3").json() == {"name": "new c3", "city": "Rome"}
        assert http.get("/v1/stores/customers/keys/6").json()["city"] == "Rome"
        assert http.get("/v1/stores/customers/keys/7").status_code == 404
        then = http.get("/v1/stores/customers/keys/3", params={"as_of": before})
        assert then.json() == {"name": "c3", "city": "Oslo"}
        bad = http.get("/v1/stores/customers/keys/abc")
        assert (bad.status_code, bad.json()["type"]) == (400, "urn:statestore:problem:bad-key-encoding")
        assert "long" in bad.json()["detail"]
        assert bad.json()["key_format"] == "long"
        batch = http.post("/v1/stores/customers/keys:batchGet", json={"keys": ["1", "6", "99"]}).json()
        assert [v and v["name"] for v in batch["values"]] == ["c1", "new c6", None]
        arrow = _arrow_keys(http, "customers", pa.array([6, 2, 8], pa.int64()))
        assert [v and v["name"] for v in arrow] == ["new c6", "c2", None]
        scan = http.get("/v1/stores/customers/scan", params={"prefix": ""}).json()
        assert sorted(int(item["key"]) for item in scan["items"]) == [-5, 1, 2, 3, 6]
        rome = http.get("/v1/stores/customers/indexes/by_city/Rome").json()
        assert sorted(item["key"] for item in rome["items"]) == ["3", "6"]

        python = StatestoreClient(url)
        assert python.get("customers", 2) == {"name": "c2", "city": "Oslo"}
        many = python.get_many("customers", [6, "1", 100])
        assert [v and v["name"] for v in many] == ["new c6", "c1", None]
        with pytest.raises(KeyFormatError):
            python.get("customers", "abc")
        python.close()


def test_avro_string_keys_are_scanned_by_their_text_prefix(
    broker: LocalBroker, make_topic: Callable[..., str], registry: FakeSchemaRegistry, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = make_topic(partitions=2)
    client = SchemaRegistryClient({"url": registry.url})
    keys = SerializationContext(topic, MessageField.KEY)
    key = AvroSerializer(client, json.dumps("string"))
    records = [(key(name, keys), name.upper().encode()) for name in ("cust-1", "cust-2", "acct-1", "ünï")]
    produce(bootstrap, topic, [*records, (b"\x00\x00\x00\x03\xe7\x02", b"unknown key schema id")])
    store = {"name": "names", "topic": topic, "key_format": "avro", "value_format": "string"}
    settings = _settings(registry, bootstrap, tmp_path / "state", [store])
    with serve_app(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as http:
        wait_until_ready(url)
        assert http.get("/v1/stores/names").json()["key_format"] == "string"
        assert http.get("/v1/stores/names/keys/cust-2").text == "CUST-2"
        assert http.get("/v1/stores/names/keys/ünï").text == "ÜNÏ"
        scan = http.get("/v1/stores/names/scan", params={"prefix": "cust-"}).json()
        assert [item["key"] for item in scan["items"]] == ["cust-1", "cust-2"]
        # A key whose schema id the registry does not know stays under the producer's bytes.
        raw = http.get("/v1/stores/names/keys/AAAAA+cC", params={"key_encoding": "base64"})
        assert raw.text == "unknown key schema id"


def _one_field_message(kind: int, name: str) -> Any:
    proto = descriptor_pb2.FileDescriptorProto(name=f"keys/{name}.proto", package="keys", syntax="proto3")
    message = proto.message_type.add(name=name)
    field = descriptor_pb2.FieldDescriptorProto
    message.field.add(name="id", number=1, type=kind, label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"keys.{name}"))


def test_protobuf_and_json_schema_keys_are_found_by_their_value(
    broker: LocalBroker, make_topic: Callable[..., str], registry: FakeSchemaRegistry, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    orders, tickets = make_topic(), make_topic()
    client = SchemaRegistryClient({"url": registry.url})
    order_id = _one_field_message(descriptor_pb2.FieldDescriptorProto.TYPE_INT64, "OrderId")
    to_proto = ProtobufSerializer(order_id, client, {"use.deprecated.format": False})
    proto_keys = SerializationContext(orders, MessageField.KEY)
    produced = [(to_proto(order_id(id=n), proto_keys), f"order {n}".encode()) for n in (4, 5)]
    produce(bootstrap, orders, produced)
    to_json = JSONSerializer(json.dumps({"type": "string"}), client)
    json_keys = SerializationContext(tickets, MessageField.KEY)
    produce(bootstrap, tickets, [(to_json(t, json_keys), f"ticket {t}".encode()) for t in ("T-1", "T-2")])
    stores = [
        {"name": "orders", "topic": orders, "key_format": "protobuf", "value_format": "string"},
        {"name": "tickets", "topic": tickets, "key_format": "json_schema", "value_format": "string"},
    ]
    settings = _settings(registry, bootstrap, tmp_path / "state", stores)
    with serve_app(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as http:
        wait_until_ready(url)
        assert http.get("/v1/stores/orders").json()["key_format"] == "long"
        assert http.get("/v1/stores/orders/keys/5").text == "order 5"
        assert http.get("/v1/stores/orders/keys/five").status_code == 400
        assert http.get("/v1/stores/tickets").json()["key_format"] == "string"
        assert http.get("/v1/stores/tickets/keys/T-2").text == "ticket T-2"
        scan = http.get("/v1/stores/tickets/scan", params={"prefix": "T-"}).json()
        assert [item["key"] for item in scan["items"]] == ["T-1", "T-2"]


def test_the_key_format_is_pending_until_the_first_key_is_decoded(
    broker: LocalBroker, make_topic: Callable[..., str], registry: FakeSchemaRegistry, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = make_topic()
    store = {"name": "accounts", "topic": topic, "key_format": "avro", "value_format": "string"}
    settings = _settings(registry, bootstrap, tmp_path / "state", [store])
    with serve_app(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as http:
        wait_until_ready(url)
        # No key decoded yet: the store says so (the configured format), and holds nothing.
        assert http.get("/v1/stores/accounts").json()["key_format"] == "avro"
        python = StatestoreClient(url)
        assert python.get("accounts", 7) is None
        key = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps("long"))
        produce(bootstrap, topic, [(key(7, SerializationContext(topic, MessageField.KEY)), b"seven")])
        until(lambda: http.get("/v1/stores/accounts/keys/7").status_code == 200, "key 7 applied")
        assert http.get("/v1/stores/accounts").json()["key_format"] == "long"
        # The same client asks again (a pending format is never kept) and sends 7 as a long.
        assert python.get("accounts", 7) == "seven"
        assert python.get_many("accounts", [7, 8]) == ["seven", None]
        python.close()
