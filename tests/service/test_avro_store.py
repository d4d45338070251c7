"""An ``avro`` store end to end: Confluent's ``AvroSerializer`` writes to the real broker under a
Schema Registry (the tests' stand-in), the service decodes each value once at ingest, and reads
answer JSON documents in the latest schema's shape. Bad records are error entries of their own
problem types; the registry down makes ingest wait, never skip."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fastavro
import httpx
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from clients import StatestoreClient
from clients.exceptions import UnknownSchemaError, ValueUndecodableError
from service.app import create_app
from service.local.broker import LocalBroker
from service.settings import Settings
from tests.clients.conftest import wait_until_ready
from tests.support.kafka import produce
from tests.support.schema_registry import FakeSchemaRegistry, schema_registry
from tests.support.server import serve_app

V1: dict[str, Any] = {
    "type": "record",
    "name": "Customer",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "balance", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "born", "type": {"type": "int", "logicalType": "date"}},
        {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["GOLD", "SILVER"]}},
        {"name": "tags", "type": {"type": "map", "values": "int"}},
        {"name": "photo", "type": "bytes"},
        {"name": "nickname", "type": ["null", "string"], "default": None},
    ],
}
# v2 adds a field (null by default); v3 another: records of every version read in the latest shape.
V2 = {**V1, "fields": [*V1["fields"], {"name": "city", "type": ["null", "string"], "default": None}]}
V3 = {**V2, "fields": [*V2["fields"], {"name": "vip", "type": "boolean", "default": False}]}


def customer(n: int, **more: Any) -> dict[str, Any]:
    return {
        "id": n,
        "name": f"customer {n}",
        "balance": decimal.Decimal("12.34"),
        "born": datetime.date(1990, 1, 2),
        "seen": datetime.datetime(2026, 11, 25, 12, 0, 0, tzinfo=datetime.UTC),
        "tier": "GOLD",
        "tags": {"a": 1},
        "photo": b"\x00\x01",
        "nickname": None if n % 2 else f"nick {n}",
        **more,
    }


def framed(schema_id: int, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    """What ``AvroSerializer`` writes, for a schema registered behind the serializer's back."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return b"\x00" + struct.pack(">I", schema_id) + out.getvalue()


def settings_for(registry: FakeSchemaRegistry, bootstrap: str, topic: str, state_dir: Path) -> Settings:
    return Settings(
        kafka={"bootstrap_servers": bootstrap},
        state_dir=state_dir,
        schema_registry={"url": registry.url},
        stores=[
            {
                "name": "customers",
                "topic": topic,
                "value_format": "avro",
                "indexes": [{"name": "by_city", "field": "city"}],
            }
        ],
    )


def until(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s: {what}")


@pytest.fixture
def registry() -> Iterator[FakeSchemaRegistry]:
    with schema_registry() as running:
        yield running


def test_values_are_decoded_at_ingest_in_the_latest_shape_and_bad_ones_are_errors(
    broker: LocalBroker, make_topic: Callable[..., str], registry: FakeSchemaRegistry, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = make_topic(partitions=2)
    client = SchemaRegistryClient({"url": registry.url})
    context = SerializationContext(topic, MessageField.VALUE)
    v1, v2 = AvroSerializer(client, json.dumps(V1)), AvroSerializer(client, json.dumps(V2))
    produce(
        bootstrap,
        topic,
        [
            (b"c1", v1(customer(1), context)),
            (b"c2", v1(customer(2), context)),
            (b"c3", v2(customer(3, city="Oslo"), context)),
            (b"unknown-id", b"\x00" + struct.pack(">I", 999) + b"\x02"),
            (b"corrupt", b"\x00\x00\x00\x00\x01\xff\xff\xff"),
            (b"unframed", b'{"id": 1}'),
        ],
    )
    state = tmp_path / "state"
    with serve_app(create_app(settings_for(registry, bootstrap, topic, state))) as url:
        wait_until_ready(url)
        http = httpx.Client(base_url=url, timeout=30)
        info = http.get("/v1/stores/customers").json()
        assert info["value_format"] == "avro"
        one = http.get("/v1/stores/customers/keys/c1").json()
        assert one == {
            "id": 1,
            "name": "customer 1",
            "balance": "12.34",
            "born": "1990-01-02",
            "seen": "2026-11-25T12:00:00+00:00",
            "tier": "GOLD",
            "tags": {"a": 1},
            "photo": "AAE=",
            "nickname": None,
            "city": None,
        }
        assert http.get("/v1/stores/customers/keys/c3").json()["city"] == "Oslo"
        unknown = http.get("/v1/stores/customers/keys/unknown-id")
        assert (unknown.status_code, unknown.json()["type"]) == (502, "urn:statestore:problem:unknown-schema")
        assert "999" in unknown.json()["detail"]
        assert info["undecodable_values"] == 3
        assert 'statestore_undecodable_values_total{store="customers"} 3.0' in http.get("/metrics").text
        for key in ("corrupt", "unframed"):
            bad = http.get(f"/v1/stores/customers/keys/{key}")
            assert (bad.status_code, bad.json()["type"]) == (502, "urn:statestore:problem:value-undecodable")
        batch = http.post(
            "/v1/stores/customers/keys:batchGet", json={"keys": ["c2", "corrupt", "unknown-id", "nope"]}
        ).json()
        assert batch["values"][0]["nickname"] == "nick 2"
        assert batch["values"][1:] == [None, None, None]
        assert [(e["index"], e["type"].rsplit(":", 1)[1]) for e in batch["errors"]] == [
            (1, "value-undecodable"),
            (2, "unknown-schema"),
        ]
        # The Python client raises the value's own problem, by JSON and by Arrow, never a null.
        with StatestoreClient(url) as reader:
            for asked, problem in (("unknown-id", UnknownSchemaError), ("corrupt", ValueUndecodableError)):
                with pytest.raises(problem):
                    reader.get_many("customers", ["c2", asked])
                with pytest.raises(problem, match=asked):
                    reader.get_arrow("customers", pa.array([b"c2", asked.encode()], pa.binary()))
            fine = reader.get_arrow("customers", pa.array([b"c2", b"nope"], pa.binary()))
            assert fine.field("name").to_pylist() == ["customer 2", None]
            # Arrow scan pages (what whole-store reads take) too.
            with pytest.raises(ValueUndecodableError, match="corrupt"):
                list(reader.scan_arrow("customers"))
            (page,) = reader.scan_arrow("customers", b"c2")
            assert page.column("key").to_pylist() == [b"c2"]
            assert json.loads(page.column("value")[0].as_py())["name"] == "customer 2"
        oslo = http.get("/v1/stores/customers/indexes/by_city/Oslo").json()
        assert [item["key"] for item in oslo["items"]] == ["c3"]
        projected = http.get("/v1/stores/customers/indexes/by_city/Oslo", params={"fields": "name,tags.a"})
        assert [item["value"] for item in projected.json()["items"]] == [
            {"name": "customer 3", "tags": {"a": 1}}
        ]
        in_batch = http.post(
            "/v1/stores/customers/indexes/by_city:batchGet",
            params={"fields": "id"},
            json={"values": ["Oslo"]},
        ).json()
        assert in_batch["results"][0]["items"] == [{"key": "c3", "value": {"id": 3}}]

        # The registry goes down; a producer registers a third version elsewhere and writes with it.
        registry.down()
        v3_id = registry.register(f"{topic}-value", json.dumps(V3))
        produce(bootstrap, topic, [(b"c4", framed(v3_id, V3, customer(4, city="Rome", vip=True)))])
        until(
            lambda: "schema registry" in (http.get("/v1/stores/customers").json().get("last_error") or ""),
            "the store says why ingest waits",
        )
        # Ingest waits: the record is not skipped, nothing wrong is answered meanwhile.
        assert http.get("/v1/stores/customers/keys/c4").status_code == 404
        assert http.get("/v1/stores/customers/keys/c1").json()["id"] == 1
        registry.up()
        until(lambda: http.get("/v1/stores/customers/keys/c4").status_code == 200, "c4 applied")
        four = http.get("/v1/stores/customers/keys/c4").json()
        assert (four["city"], four["vip"]) == ("Rome", True)
        # The new version is picked up without a restart: every record answers in its shape.
        assert http.get("/v1/stores/customers/keys/c1").json()["vip"] is None
        http.close()

    # A restart while the registry is down still serves (schemas kept in the state dir).
    registry.down()
    produce(bootstrap, topic, [(b"c5", v2(customer(5, city="Oslo"), context))])
    with serve_app(create_app(settings_for(registry, bootstrap, topic, state))) as url:
        wait_until_ready(url)
        with httpx.Client(base_url=url, timeout=30) as http:
            assert http.get("/v1/stores/customers/keys/c5").json()["city"] == "Oslo"
            oslo = http.get("/v1/stores/customers/indexes/by_city/Oslo").json()
            assert [item["key"] for item in oslo["items"]] == ["c3", "c5"]


def test_a_registry_down_at_start_makes_the_store_wait_then_restore(
    broker: LocalBroker, make_topic: Callable[..., str], registry: FakeSchemaRegistry, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = make_topic()
    client = SchemaRegistryClient({"url": registry.url})
    serializer = AvroSerializer(client, json.dumps(V1))
    context = SerializationContext(topic, MessageField.VALUE)
    produce(bootstrap, topic, [(f"c{n}".encode(), serializer(customer(n), context)) for n in range(20)])
    registry.down()
    with serve_app(create_app(settings_for(registry, bootstrap, topic, tmp_path / "state"))) as url:
        http = httpx.Client(base_url=url, timeout=30)
        until(
            lambda: "schema registry" in (http.get("/v1/stores/customers").json().get("last_error") or ""),
            "the store says why it waits",
        )
        assert http.get("/v1/stores/customers").json()["state"] != "READY"
        registry.up()
        wait_until_ready(url)
        assert http.get("/v1/stores/customers/keys/c7").json()["name"] == "customer 7"
        http.close()
