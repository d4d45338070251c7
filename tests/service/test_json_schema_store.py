"""A ``json_schema`` store end to end: Confluent's ``JSONSerializer`` writes to the real broker,
the service checks each record's framing and schema id once at ingest and serves the documents."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import httpx
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from service.app import create_app
from service.local.broker import LocalBroker
from service.settings import Settings
from tests.clients.conftest import wait_until_ready
from tests.support.kafka import produce
from tests.support.schema_registry import schema_registry
from tests.support.server import serve_app

TICKET = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "owner": {"type": "object", "properties": {"team": {"type": "string"}}},
    },
}


def test_documents_are_served_and_bad_records_are_error_entries(
    broker: LocalBroker, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = make_topic()
    with schema_registry() as registry:
        serializer = JSONSerializer(json.dumps(TICKET), SchemaRegistryClient({"url": registry.url}))
        context = SerializationContext(topic, MessageField.VALUE)
        produce(
            bootstrap,
            topic,
            [
                (b"t1", serializer({"id": 1, "owner": {"team": "core"}}, context)),
                (b"t2", serializer({"id": 2, "owner": {"team": "web"}}, context)),
                (b"unknown-id", b"\x00" + struct.pack(">I", 77) + b"{}"),
                (b"not-json", b"\x00\x00\x00\x00\x01{oops"),
            ],
        )
        settings = Settings(
            kafka={"bootstrap_servers": bootstrap},
            state_dir=tmp_path / "state",
            schema_registry={"url": registry.url},
            stores=[
                {
                    "name": "tickets",
                    "topic": topic,
                    "value_format": "json_schema",
                    "indexes": [{"name": "by_team", "field": "owner.team"}],
                }
            ],
        )
        with serve_app(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as http:
            wait_until_ready(url)
            assert http.get("/v1/stores/tickets").json()["value_format"] == "json_schema"
            assert http.get("/v1/stores/tickets/keys/t1").json() == {"id": 1, "owner": {"team": "core"}}
            web = http.get("/v1/stores/tickets/indexes/by_team/web").json()
            assert [item["key"] for item in web["items"]] == ["t2"]
            unknown = http.get("/v1/stores/tickets/keys/unknown-id")
            assert (unknown.status_code, unknown.json()["type"]) == (
                502,
                "urn:statestore:problem:unknown-schema",
            )
            bad = http.get("/v1/stores/tickets/keys/not-json")
            assert (bad.status_code, bad.json()["type"]) == (502, "urn:statestore:problem:value-undecodable")
            projected = http.post(
                "/v1/stores/tickets/keys:batchGet",
                params={"fields": "owner.team"},
                json={"keys": ["t1", "t2"]},
            ).json()
            assert projected["values"] == [{"owner": {"team": "core"}}, {"owner": {"team": "web"}}]
