"""Index lookups answered as Arrow by a store decoded at ingest: the ``row`` column is a struct typed
from the latest schema (projected by ``fields=``), with an ``error`` column, as a batch get's
``value`` is; ``values=stored`` answers the stored documents. Producers use confluent-kafka's own
``AvroSerializer``, through the real broker."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pyarrow as pa
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from clients import StatestoreClient
from service.app import create_app
from service.local.broker import LocalBroker
from tests.clients.conftest import wait_until_ready
from tests.service.test_avro_store import V2, customer, settings_for
from tests.service.test_struct_answers import arrow_get, arrow_post
from tests.support.kafka import produce
from tests.support.schema_registry import schema_registry
from tests.support.server import serve_app


def arrow_index(http: httpx.Client, asked: list[str], **params: str) -> pa.Table:
    return arrow_post(http, "/v1/stores/customers/indexes/by_city:batchGet", "value", asked, **params)


def test_an_avro_stores_index_answer_holds_rows_typed_as_the_batch_get_does(
    broker: LocalBroker, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = make_topic()
    with schema_registry() as registry:
        client = SchemaRegistryClient({"url": registry.url})
        context = SerializationContext(topic, MessageField.VALUE)
        v2 = AvroSerializer(client, json.dumps(V2))
        cities = {1: "Rome", 2: "Oslo", 3: "Rome"}
        produce(
            bootstrap,
            topic,
            [(f"c{n}".encode(), v2(customer(n, city=city), context)) for n, city in cities.items()],
        )
        settings = settings_for(registry, bootstrap, topic, tmp_path / "state")
        with serve_app(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as http:
            wait_until_ready(url)
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
            refused = http.post(
                "/v1/stores/customers/indexes/by_city:batchGet",
                params={"values": "raw"},
                json={"values": ["Oslo"]},
            )
            assert (refused.status_code, refused.json()["type"]) == (
                422,
                "urn:statestore:problem:invalid-parameter",
            )
            # The Python client asks the stored documents and answers whole values.
            found = StatestoreClient(url).index_get_many("customers", "by_city", ["Rome"])
            assert [(key, value["city"]) for key, value in found["Rome"]] == [("c1", "Rome"), ("c3", "Rome")]
