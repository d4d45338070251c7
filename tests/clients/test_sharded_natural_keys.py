"""A sharded store of keys written through the Schema Registry, end to end: three shard processes over
one 6-partition topic whose keys confluent-kafka's own ``AvroSerializer`` wrote under two versions of
the key subject (so one customer is two producers' keys, on two partitions, often of two shards).
Each shard reads every partition and keeps the natural keys that hash to it; the client and Spark
find every customer on one shard, with the latest write across the schema ids as its value."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pandas as pd
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import SparkSession

from clients import StatestoreClient
from clients.spark import lookup_join, read_store
from service.local.broker import LocalBroker
from service.local.shards import LocalShards
from tests.clients.conftest import wait_until_ready
from tests.service.test_registry_keys import CUSTOMER
from tests.support.kafka import create_topic, end_of, make_producer, produce_timed, unique_topic
from tests.support.schema_registry import FakeSchemaRegistry, schema_registry
from wire.position import Position

PARTITIONS = 6
SHARDS = 3
CUSTOMERS = 120


def _value(n: int, version: int) -> dict[str, str]:
    return {"name": f"c{n} v{version}", "city": "Rome" if version == 2 else "Oslo"}


def _model() -> dict[int, dict[str, str]]:
    """Everyone under v1 at time 1000; the even ones again under v2 at 2000; tombstones under v1 at
    1500 for every fifth (older than v2's writes: only the odd ones go), under v2 at 3000 for every
    tenth (newer than any write: they go)."""
    model: dict[int, dict[str, str]] = {}
    for n in range(CUSTOMERS):
        if n % 10 == 0 or (n % 5 == 0 and n % 2 == 1):
            continue
        model[n] = _value(n, 2 if n % 2 == 0 else 1)
    return model


@pytest.fixture(scope="module")
def sharded(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Position]]:
    bootstrap = broker.bootstrap_servers
    topic = unique_topic("customers")
    create_topic(bootstrap, topic, PARTITIONS)
    base_time = int(time.time() * 1000) - 600_000
    with schema_registry() as registry:
        end = _write(registry, bootstrap, topic, base_time)
        config = {
            "kafka": {"bootstrap_servers": bootstrap},
            "schema_registry": {"url": registry.url},
            "stores": [
                {
                    "name": "customers",
                    "topic": topic,
                    "key_format": "avro",
                    "value_format": "avro",
                    "partitioner": "crc32",  # the test producer's (librdkafka's default)
                    "history": {"retention_ms": 3_600_000},
                    "indexes": [{"name": "by_city", "field": "city"}],
                }
            ],
        }
        state: Path = tmp_path_factory.mktemp("sharded-natural")
        with LocalShards(config, SHARDS, state / "state", state / "logs", log_level="WARNING") as shards:
            for shard in range(SHARDS):
                wait_until_ready(shards.url_of(shard))
            yield shards.url, end


def _write(registry: FakeSchemaRegistry, bootstrap: str, topic: str, base: int) -> Position:
    client = SchemaRegistryClient({"url": registry.url})
    keys, values = (
        SerializationContext(topic, MessageField.KEY),
        SerializationContext(topic, MessageField.VALUE),
    )
    v1 = AvroSerializer(client, json.dumps("long"))
    v2 = AvroSerializer(client, json.dumps({"type": "long", "doc": "the customer number"}))
    value = AvroSerializer(client, json.dumps(CUSTOMER))
    records = [(v1(n, keys), value(_value(n, 1), values), base + 1_000) for n in range(CUSTOMERS)]
    records += [(v2(n, keys), value(_value(n, 2), values), base + 2_000) for n in range(0, CUSTOMERS, 2)]
    records += [(v1(n, keys), None, base + 1_500) for n in range(0, CUSTOMERS, 5)]
    records += [(v2(n, keys), None, base + 3_000) for n in range(0, CUSTOMERS, 10)]
    return Position(end_of(produce_timed(make_producer(bootstrap), topic, records)))


def _shard_url(template: str, shard: int) -> str:
    return template.replace("{shard}", str(shard))


def test_every_shard_reads_every_partition_and_keeps_the_natural_keys_that_hash_to_it(
    sharded: tuple[str, Position],
) -> None:
    url, end = sharded
    held: list[int] = []
    with StatestoreClient(url, deadline=30) as client:
        assert client.position("customers").reaches(end) or _waited(client, end)
    for shard in range(SHARDS):
        base = _shard_url(url, shard)
        info = httpx.get(f"{base}/v1/stores/customers").json()
        assert info["key_format"] == "long"
        sharding = info["sharding"]
        assert (sharding["routing"], sharding["partitions"]) == ("natural_key", list(range(PARTITIONS)))
        assert sorted(Position.parse(info["position"])) == list(range(PARTITIONS))
        scan = httpx.get(f"{base}/v1/stores/customers/scan", params={"prefix": "", "limit": 1000}).json()
        held += [int(item["key"]) for item in scan["items"]]
    # Every customer on exactly one shard.
    assert sorted(held) == sorted(_model())
    some = next(iter(_model()))
    answers = [httpx.get(f"{_shard_url(url, s)}/v1/stores/customers/keys/{some}") for s in range(SHARDS)]
    assert sorted(a.status_code for a in answers) == [200, 421, 421]


def _waited(client: StatestoreClient, end: Position) -> bool:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if client.position("customers").reaches(end):
            return True
        time.sleep(0.1)
    return False


def test_the_client_finds_every_customer_on_its_shard_with_its_latest_write(
    sharded: tuple[str, Position],
) -> None:
    url, end = sharded
    model = _model()
    asked = list(range(CUSTOMERS + 10))
    with StatestoreClient(url, deadline=30) as client:
        assert _waited(client, end)
        assert client.get_many("customers", asked, min_position=end) == [model.get(n) for n in asked]
        assert [client.get("customers", n) for n in asked[:30]] == [model.get(n) for n in asked[:30]]
        scanned = {int(key): value for key, value in client.scan("customers", "")}
        assert scanned == model
        rome = client.index_get_many("customers", "by_city", ["Rome"])["Rome"]
        assert sorted((int(key), value) for key, value in rome) == [
            (n, v) for n, v in sorted(model.items()) if v["city"] == "Rome"
        ]
        paged = list(client.index_lookup("customers", "by_city", "Rome", page_size=7))
        assert paged == [(str(n), v) for n, v in sorted(model.items()) if v["city"] == "Rome"]
        position = client.position("customers")
        # A whole position pins every shard (each reads every partition).
        assert client.get_many("customers", asked[:20], as_of=position) == [model.get(n) for n in asked[:20]]


def test_a_spark_lookup_join_finds_every_customer(sharded: tuple[str, Position], spark: SparkSession) -> None:
    url, end = sharded
    model = _model()
    with StatestoreClient(url, deadline=30) as client:
        assert _waited(client, end)
    facts = spark.createDataFrame(
        pd.DataFrame({"order": range(CUSTOMERS + 10), "cid": range(CUSTOMERS + 10)})
    )
    joined = lookup_join(facts.repartition(3), store="customers", on="cid", url=url)
    got = {row["cid"]: (row["name"], row["city"]) for row in joined.collect()}
    assert got == {
        n: (model[n]["name"], model[n]["city"]) if n in model else (None, None) for n in range(CUSTOMERS + 10)
    }
    whole = read_store(
        spark,
        store="customers",
        url=url,
        partitions=3,
        value_schema="name string, city string",
    )
    # Natural number keys read as their decimal text, as scans and index rows answer them.
    assert sorted((int(row["key"]), row["name"], row["city"]) for row in whole.collect()) == [
        (n, value["name"], value["city"]) for n, value in sorted(model.items())
    ]
