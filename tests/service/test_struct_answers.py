"""Arrow answers of stores decoded at ingest: the ``value`` column of a batch get (and the ``row``
column of an index lookup) is a struct typed from the latest schema (projected by ``fields=``), a
value that cannot be typed is null with its problem in the ``error`` column, ``values=stored``
answers the stored documents, and a new schema version registered while serving changes the struct
without a restart. Producers use confluent-kafka's own serializers, through the real broker."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
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

from clients import StatestoreClient
from service.app import create_app
from service.local.broker import LocalBroker
from service.settings import Settings
from tests.clients.conftest import wait_until_ready
from tests.service.test_avro_store import V2, V3, customer, settings_for, until
from tests.support.kafka import produce
from tests.support.schema_registry import schema_registry
from tests.support.serdes import protobuf_message_class
from tests.support.server import serve_app


def arrow_post(http: httpx.Client, path: str, column: str, asked: list[str], **params: str) -> pa.Table:
    """POST an Arrow stream of one ``string`` column to ``path``; the Arrow answer."""
    sink = pa.BufferOutputStream()
    batch = pa.record_batch([pa.array(asked, pa.string())], names=[column])
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    answer = http.post(
        path,
        params=params,
        content=sink.getvalue().to_pybytes(),
        headers={"content-type": "application/vnd.apache.arrow.stream"},
    )
    assert answer.status_code == 200, answer.text
    return pa.ipc.open_stream(answer.content).read_all()


def arrow_get(http: httpx.Client, store: str, keys: list[str], **params: str) -> pa.Table:
    return arrow_post(http, f"/v1/stores/{store}/keys:batchGet", "key", keys, **params)


@dataclass(frozen=True)
class ServedCustomers:
    """An Avro ``customers`` store (indexed ``by_city``) served over HTTP, with what produces to it."""

    http: httpx.Client
    url: str
    topic: str
    registry: SchemaRegistryClient
    context: SerializationContext


ServeCustomers = Callable[..., ServedCustomers]


@pytest.fixture
def serve_customers(
    broker: LocalBroker, make_topic: Callable[..., str], tmp_path: Path
) -> Iterator[ServeCustomers]:
    """Factory: produce customers ``{n: city}`` as schema v2 records (then ``more`` key/value pairs as
    they are) to a new topic and serve it as the Avro store ``customers``, indexed ``by_city``."""
    with contextlib.ExitStack() as stack:
        registry = stack.enter_context(schema_registry())
        client = SchemaRegistryClient({"url": registry.url})

        def serve(cities: dict[int, str], more: Sequence[tuple[bytes, bytes]] = ()) -> ServedCustomers:
            topic = make_topic()
            context = SerializationContext(topic, MessageField.VALUE)
            v2 = AvroSerializer(client, json.dumps(V2))
            records = [(f"c{n}".encode(), v2(customer(n, city=city), context)) for n, city in cities.items()]
            produce(broker.bootstrap_servers, topic, [*records, *more])
            settings = settings_for(registry, broker.bootstrap_servers, topic, tmp_path / topic)
            url = stack.enter_context(serve_app(create_app(settings)))
            http = stack.enter_context(httpx.Client(base_url=url, timeout=30))
            wait_until_ready(url)
            return ServedCustomers(http, url, topic, client, context)

        yield serve


def assert_raw_values_refused(http: httpx.Client, path: str, body: dict[str, list[str]]) -> None:
    """``values=raw`` is not a value of ``values``: a 422 naming the parameter."""
    refused = http.post(path, params={"values": "raw"}, json=body)
    assert (refused.status_code, refused.json()["type"]) == (
        422,
        "urn:statestore:problem:invalid-parameter",
    )


def test_an_avro_stores_arrow_answer_is_a_struct_of_the_latest_schema(
    serve_customers: ServeCustomers, broker: LocalBroker
) -> None:
    served = serve_customers({1: "city 1", 2: "city 2"}, [(b"corrupt", b"\x00\x00\x00\x00\x01\xff\xff\xff")])
    http, url = served.http, served.url
    table = arrow_get(http, "customers", ["c1", "nope", "corrupt", "c2"])
    value = table.schema.field("value").type
    assert pa.types.is_struct(value)
    assert [(f.name, f.type) for f in value][:3] == [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("balance", pa.string()),
    ]
    assert value.get_field_index("tags") < 0  # a map's keys are data: left out
    rows: list[Any] = table.column("value").to_pylist()
    assert (rows[0]["id"], rows[0]["city"], rows[0]["tier"]) == (1, "city 1", "GOLD")
    assert (rows[1], rows[2], rows[3]["name"]) == (None, None, "customer 2")
    assert table.column("error").to_pylist() == [
        None,
        None,
        "urn:statestore:problem:value-undecodable",
        None,
    ]
    projected = arrow_get(http, "customers", ["c2"], fields="name,city")
    assert projected.schema.field("value").type == pa.struct(
        [pa.field("name", pa.string()), pa.field("city", pa.string())]
    )
    assert projected.column("value").to_pylist() == [{"name": "customer 2", "city": "city 2"}]
    python = StatestoreClient(url)
    typed = python.get_arrow("customers", pa.array(["c1"]))
    assert typed.to_pylist()[0]["city"] == "city 1"
    # get_many answers whole values (maps too), asking the stored documents (values=stored).
    assert python.get_many("customers", ["c1"])[0]["tags"] == {"a": 1}
    stored = arrow_get(http, "customers", ["c1"], values="stored")
    assert json.loads(stored.column("value")[0].as_py())["tags"] == {"a": 1}
    assert stored.column_names == ["key", "value"]
    assert_raw_values_refused(http, "/v1/stores/customers/keys:batchGet", {"keys": []})

    # A new version registered while serving: the struct follows it without a restart.
    v3 = AvroSerializer(served.registry, json.dumps(V3))
    c3 = v3(customer(3, city="Rome", vip=True), served.context)
    produce(broker.bootstrap_servers, served.topic, [(b"c3", c3)])
    until(lambda: http.get("/v1/stores/customers/keys/c3").status_code == 200, "c3 applied")
    after = arrow_get(http, "customers", ["c1", "c3"])
    assert [(row["city"], row["vip"]) for row in after.column("value").to_pylist()] == [
        ("city 1", None),
        ("Rome", True),
    ]
    assert http.get("/v1/stores/customers").json()["value_schema"].endswith("`vip` BOOLEAN")


def test_protobuf_and_json_schema_stores_answer_structs_and_serve_their_spark_schema(
    broker: LocalBroker, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    orders, tickets = make_topic(), make_topic()
    order = protobuf_message_class()
    ticket_schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "owner": {"type": "object", "properties": {"team": {"type": "string"}}},
        },
    }
    with schema_registry() as registry:
        client = SchemaRegistryClient({"url": registry.url})
        to_proto = ProtobufSerializer(order, client, {"use.deprecated.format": False})
        context = SerializationContext(orders, MessageField.VALUE)
        produce(bootstrap, orders, [(b"o1", to_proto(order(id=1, name="pen"), context))])
        to_json = JSONSerializer(json.dumps(ticket_schema), client)
        ticket = to_json(
            {"id": 7, "owner": {"team": "core"}}, SerializationContext(tickets, MessageField.VALUE)
        )
        produce(bootstrap, tickets, [(b"t7", ticket)])
        settings = Settings(
            kafka={"bootstrap_servers": bootstrap},
            state_dir=tmp_path / "state",
            schema_registry={"url": registry.url},
            stores=[
                {"name": "orders", "topic": orders, "value_format": "protobuf"},
                {"name": "tickets", "topic": tickets, "value_format": "json_schema"},
            ],
        )
        with serve_app(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as http:
            wait_until_ready(url)
            # protobuf's JSON mapping writes 64-bit integers as strings: so does the struct.
            assert http.get("/v1/stores/orders").json()["value_schema"] == "`id` STRING, `name` STRING"
            assert arrow_get(http, "orders", ["o1"]).column("value").to_pylist() == [
                {"id": "1", "name": "pen"}
            ]
            info = http.get("/v1/stores/tickets").json()
            assert info["value_schema"] == "`id` BIGINT, `owner` STRUCT<`team`: STRING>"
            assert arrow_get(http, "tickets", ["t7"]).column("value").to_pylist() == [
                {"id": 7, "owner": {"team": "core"}}
            ]


def arrow_index(http: httpx.Client, asked: list[str], **params: str) -> pa.Table:
    return arrow_post(http, "/v1/stores/customers/indexes/by_city:batchGet", "value", asked, **params)


def test_an_avro_stores_index_answer_holds_rows_typed_as_the_batch_get_does(
    serve_customers: ServeCustomers,
) -> None:
    served = serve_customers({1: "Rome", 2: "Oslo", 3: "Rome"})
    http = served.http
    table = arrow_index(http, ["Rome", "Paris", "Oslo"])
    assert table.column_names == ["value", "key", "row", "error", "next_after"]
    row_type = table.schema.field("row").type
    assert row_type == arrow_get(http, "customers", ["c1"]).schema.field("value").type
    assert table.column("value").to_pylist() == ["Rome", "Rome", "Paris", "Oslo"]
    assert table.column("key").to_pylist() == [b"c1", b"c3", None, b"c2"]
    rows = table.column("row").to_pylist()
    assert [(r["id"], r["city"], r["tier"]) for r in (rows[0], rows[1], rows[3])] == [
        (1, "Rome", "GOLD"),
        (3, "Rome", "GOLD"),
        (2, "Oslo", "GOLD"),
    ]
    assert rows[2] is None  # no match: one null row
    assert table.column("error").to_pylist() == [None] * 4

    projected = arrow_index(http, ["Oslo"], fields="name,city")
    assert projected.schema.field("row").type == pa.struct(
        [pa.field("name", pa.string()), pa.field("city", pa.string())]
    )
    assert projected.column("row").to_pylist() == [{"name": "customer 2", "city": "Oslo"}]

    stored = arrow_index(http, ["Oslo"], values="stored")
    assert stored.column_names == ["value", "key", "row", "next_after"]
    assert json.loads(stored.column("row")[0].as_py())["tags"] == {"a": 1}
    assert_raw_values_refused(http, "/v1/stores/customers/indexes/by_city:batchGet", {"values": ["Oslo"]})
    # The Python client asks the stored documents and answers whole values.
    found = StatestoreClient(served.url).index_get_many("customers", "by_city", ["Rome"])
    assert [(key, value["city"]) for key, value in found["Rome"]] == [("c1", "Rome"), ("c3", "Rome")]
