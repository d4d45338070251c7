"""A ``protobuf`` store end to end: Confluent's ``ProtobufSerializer`` writes to the real broker,
the service decodes each value once at ingest with the registry's descriptor and serves JSON."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import httpx
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from service.app import create_app
from service.local.broker import LocalBroker
from service.settings import Settings
from tests.clients.conftest import wait_until_ready
from tests.support.kafka import produce
from tests.support.schema_registry import schema_registry
from tests.support.serdes import protobuf_message_class
from tests.support.server import serve_app


def test_messages_are_decoded_at_ingest_and_bad_records_are_error_entries(
    broker: LocalBroker, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = make_topic()
    order = protobuf_message_class()
    with schema_registry() as registry:
        serializer = ProtobufSerializer(
            order, SchemaRegistryClient({"url": registry.url}), {"use.deprecated.format": False}
        )
        context = SerializationContext(topic, MessageField.VALUE)
        produce(
            bootstrap,
            topic,
            [
                (b"o1", serializer(order(id=1, name="pen"), context)),
                (b"o2", serializer(order(id=2), context)),
                (b"unknown-id", b"\x00" + struct.pack(">I", 404) + b"\x00\x08\x01"),
                (b"corrupt", b"\x00\x00\x00\x00\x01\x00\xff\xff\xff"),
            ],
        )
        settings = Settings(
            kafka={"bootstrap_servers": bootstrap},
            state_dir=tmp_path / "state",
            schema_registry={"url": registry.url},
            stores=[
                {
                    "name": "orders",
                    "topic": topic,
                    "value_format": "protobuf",
                    "indexes": [{"name": "by_name", "field": "name"}],
                }
            ],
        )
        with serve_app(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as http:
            wait_until_ready(url)
            assert http.get("/v1/stores/orders").json()["value_format"] == "protobuf"
            # protobuf's JSON mapping: int64 as a string, unset scalars their default.
            assert http.get("/v1/stores/orders/keys/o1").json() == {"id": "1", "name": "pen"}
            assert http.get("/v1/stores/orders/keys/o2").json() == {"id": "2", "name": ""}
            pens = http.get("/v1/stores/orders/indexes/by_name/pen").json()
            assert [item["key"] for item in pens["items"]] == ["o1"]
            unknown = http.get("/v1/stores/orders/keys/unknown-id")
            assert (unknown.status_code, unknown.json()["type"]) == (
                502,
                "urn:statestore:problem:unknown-schema",
            )
            bad = http.get("/v1/stores/orders/keys/corrupt")
            assert (bad.status_code, bad.json()["type"]) == (502, "urn:statestore:problem:value-undecodable")
            assert http.get("/v1/stores/orders").json()["undecodable_values"] == 2
