"""One natural key written under two key schema ids, end to end: producers write with confluent-kafka's
own ``AvroSerializer`` (keys under v1 and v2 of the key subject, with record times set) to the real
broker, and every read answers the latest write across the schema ids: a get, a batch get (JSON and
Arrow), a scan (one row per natural key), an index, a read as of a position, the Python client;
after a restart on the same state, and after a restore from the topic into a new state. As of a
position every read answers the same winner, also when one partition holds both key schema ids'
records and the later one is the older in time."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from confluent_kafka import Message
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from clients import StatestoreClient
from service.app import create_app
from service.local.broker import LocalBroker
from service.settings import Settings
from tests.clients.conftest import wait_until_ready
from tests.service.test_avro_store import until
from tests.service.test_registry_keys import CUSTOMER, _arrow_keys
from tests.support.kafka import end_of, make_producer, produce_timed
from tests.support.schema_registry import FakeSchemaRegistry, schema_registry
from tests.support.server import serve_app
from wire.position import Position


@pytest.fixture
def registry() -> Iterator[FakeSchemaRegistry]:
    with schema_registry() as running:
        yield running


class Topic:
    """The test's topic: keys under two versions of the key subject, Avro values, times set."""

    def __init__(self, bootstrap: str, topic: str, registry: FakeSchemaRegistry) -> None:
        client = SchemaRegistryClient({"url": registry.url})
        self.topic = topic
        self._keys = SerializationContext(topic, MessageField.KEY)
        self._values = SerializationContext(topic, MessageField.VALUE)
        self._versions = {
            1: AvroSerializer(client, json.dumps("long")),
            2: AvroSerializer(client, json.dumps({"type": "long", "doc": "the customer number"})),
        }
        self._value = AvroSerializer(client, json.dumps(CUSTOMER))
        self._producer = make_producer(bootstrap)
        self.delivered: list[Message] = []
        self.base = int(time.time() * 1000) - 600_000

    def write(self, *records: tuple[int, int, dict[str, str] | None, int]) -> Position:
        """``(customer, key schema version, value or None, time after base)``; the topic's end."""
        self.delivered += produce_timed(
            self._producer,
            self.topic,
            [
                (
                    self._versions[version](customer, self._keys),
                    None if value is None else self._value(value, self._values),
                    self.base + at,
                )
                for customer, version, value, at in records
            ],
        )
        return Position(end_of(self.delivered))


def _settings(registry: FakeSchemaRegistry, bootstrap: str, state: Path, topic: str) -> Settings:
    store = {
        "name": "customers",
        "topic": topic,
        "key_format": "avro",
        "value_format": "avro",
        "partitioner": "crc32",
        "history": {"retention_ms": 86_400_000},
        "indexes": [{"name": "by_city", "field": "city"}],
    }
    return Settings(
        kafka={"bootstrap_servers": bootstrap},
        state_dir=state,
        schema_registry={"url": registry.url},
        stores=[store],
    )


def _reached(http: httpx.Client, end: Position) -> Callable[[], bool]:
    return lambda: Position.parse(http.get("/v1/stores/customers").json()["position"]).reaches(end)


def _answers(url: str, http: httpx.Client, as_of: str | None = None) -> dict[str, Any]:
    """Every way of reading customers 42 and 43 (as of a position, if one is given)."""
    at = {} if as_of is None else {"as_of": as_of}
    scan = http.get("/v1/stores/customers/scan", params={"prefix": "", **at}).json()
    python = StatestoreClient(url)
    try:
        answers = {
            "get": [http.get(f"/v1/stores/customers/keys/{n}", params=at).json() for n in (42, 43)],
            "batch": http.post(
                "/v1/stores/customers/keys:batchGet", json={"keys": ["42", "43"]}, params=at
            ).json()["values"],
            "arrow": _arrow_keys(http, "customers", pa.array([42, 43], pa.int64()), at),
            "scan": {item["key"]: item["value"] for item in scan["items"]},
            "rome": [
                item["key"]
                for item in http.get("/v1/stores/customers/indexes/by_city/Rome", params=at).json()["items"]
            ],
            "oslo": [
                item["key"]
                for item in http.get("/v1/stores/customers/indexes/by_city/Oslo", params=at).json()["items"]
            ],
            "python": python.get_many("customers", [42, 43], as_of=as_of),
        }
    finally:
        python.close()
    return answers


def test_a_natural_key_answers_its_latest_write_across_key_schema_ids_after_restarts_and_restores(
    broker: LocalBroker, make_topic: Callable[..., str], registry: FakeSchemaRegistry, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = Topic(bootstrap, make_topic(partitions=3), registry)
    old42, new42 = {"name": "c42 v1", "city": "Oslo"}, {"name": "c42 v2", "city": "Rome"}
    old43, late43 = {"name": "c43 v1", "city": "Oslo"}, {"name": "c43 late", "city": "Rome"}
    end = topic.write((42, 1, old42, 1_000), (43, 1, old43, 1_000))
    settings = _settings(registry, bootstrap, tmp_path / "state", topic.topic)
    with serve_app(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as http:
        wait_until_ready(url)
        until(_reached(http, end), "the first records applied")
        before = http.get("/v1/stores/customers").json()["position"]
        # Written under v1, then under v2: v2's record is the latest write.
        # 43 under v2 is written after, but its record time is older than v1's: v1's stays.
        # A tombstone under v1, older than 42's write under v2, deletes nothing.
        end = topic.write((42, 2, new42, 2_000), (43, 2, late43, 500), (42, 1, None, 1_500))
        until(_reached(http, end), "the second records applied")
        expected = {
            "get": [new42, old43],
            "batch": [new42, old43],
            "arrow": [new42, old43],
            "scan": {"42": new42, "43": old43},
            "rome": ["42"],
            "oslo": ["43"],
            "python": [new42, old43],
        }
        assert _answers(url, http) == expected
        then = http.get("/v1/stores/customers/keys/42", params={"as_of": before})
        assert then.json() == old42

    # Restarted on the same state: the same answers, and the entries still decide what follows.
    with serve_app(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as http:
        wait_until_ready(url)
        assert _answers(url, http) == expected
        end = topic.write((43, 2, None, 800))  # v2's record of 43 was not the winner: no change
        until(_reached(http, end), "the tombstone of 43 under v2 applied")
        assert http.get("/v1/stores/customers/keys/43").json() == old43
        # A tombstone under v2, newer than every write of 42: 42 is gone.
        end = topic.write((42, 2, None, 3_000))
        until(_reached(http, end), "the tombstone of 42 under v2 applied")
        assert http.get("/v1/stores/customers/keys/42").status_code == 404
        gone = _answers(url, http)
        assert gone["batch"] == gone["arrow"] == gone["python"] == [None, old43]
        assert (gone["scan"], gone["rome"], gone["oslo"]) == ({"43": old43}, [], ["43"])

    # Restored from the topic into a new state: the partitions are read in another order, same answers.
    fresh = _settings(registry, bootstrap, tmp_path / "fresh", topic.topic)
    with serve_app(create_app(fresh)) as url, httpx.Client(base_url=url, timeout=30) as http:
        wait_until_ready(url)
        until(_reached(http, end), "the topic restored")
        assert _answers(url, http) == gone


def test_reads_as_of_a_position_answer_the_winner_when_one_partition_holds_two_key_schema_ids(
    broker: LocalBroker, make_topic: Callable[..., str], registry: FakeSchemaRegistry, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = Topic(bootstrap, make_topic(partitions=1), registry)
    c42, late42 = {"name": "c42 v1", "city": "Oslo"}, {"name": "c42 late", "city": "Rome"}
    c43 = {"name": "c43 v1", "city": "Oslo"}
    settings = _settings(registry, bootstrap, tmp_path / "state", topic.topic)
    with serve_app(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as http:
        wait_until_ready(url)
        # History has begun: both records of each customer are versions, on the one partition.
        # Under v2 after v1, each older in time than v1's: a late write, a late tombstone.
        first = topic.write((42, 1, c42, 2_000), (43, 1, c43, 2_000))
        end = topic.write((42, 2, late42, 1_000), (43, 2, None, 1_000))
        until(_reached(http, end), "the records applied")
        assert {message.partition() for message in topic.delivered} == {0}
        expected = {
            "get": [c42, c43],
            "batch": [c42, c43],
            "arrow": [c42, c43],
            "scan": {"42": c42, "43": c43},
            "rome": [],
            "oslo": ["42", "43"],
            "python": [c42, c43],
        }
        assert _answers(url, http) == expected
        assert _answers(url, http, str(end)) == expected
        assert _answers(url, http, str(first)) == expected
