"""Keys by their natural value end to end, on the real broker: a topic keyed as Java's
``LongSerializer`` writes (8 bytes, big-endian), placed by murmur2 as Java producers do, served by
three shards; and a topic keyed by confluent-kafka's ``IntegerSerializer`` (Java's
``IntegerSerializer`` bytes). Reads by the number find the producer's records on the right shard,
through HTTP, the Python client and a Spark lookup join."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from confluent_kafka.serialization import IntegerSerializer
from pyspark.sql import SparkSession

from clients import StatestoreClient
from clients.natural_keys import KeyFormatError
from clients.partitioners import PARTITIONERS
from clients.spark import lookup_join
from service.local.broker import LocalBroker
from service.local.shards import LocalShards
from tests.clients.conftest import wait_until_ready
from tests.support.kafka import create_topic, make_producer, produce, unique_topic

PARTITIONS = 6
SHARDS = 3
CUSTOMERS = range(-20, 200)


def long_key(number: int) -> bytes:
    """What Java's ``LongSerializer`` writes for ``number``."""
    return struct.pack(">q", number)


@pytest.fixture(scope="module")
def shards(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalShards]:
    bootstrap = broker.bootstrap_servers
    customers, accounts = unique_topic("customers"), unique_topic("accounts")
    for topic in (customers, accounts):
        create_topic(bootstrap, topic, PARTITIONS)
    produce(
        bootstrap,
        customers,
        [(long_key(n), json.dumps({"id": n, "name": f"customer {n}"}).encode()) for n in CUSTOMERS],
        producer=make_producer(bootstrap, partitioner="murmur2_random"),
    )
    to_int = IntegerSerializer()
    produce(
        bootstrap,
        accounts,
        [(to_int(n), f"account {n}".encode()) for n in (7, -1, 2**31 - 1)],
        producer=make_producer(bootstrap, partitioner="murmur2_random"),
    )
    config = {
        "kafka": {"bootstrap_servers": bootstrap},
        "stores": [
            {"name": "customers", "topic": customers, "value_format": "json", "key_format": "long"},
            {"name": "accounts", "topic": accounts, "value_format": "string", "key_format": "int"},
        ],
    }
    base: Path = tmp_path_factory.mktemp("natural")
    with LocalShards(config, SHARDS, base / "state", base / "logs", log_level="WARNING") as running:
        for shard in range(SHARDS):
            wait_until_ready(running.url_of(shard))
        yield running


def test_get_by_number_is_answered_by_the_shard_holding_the_producers_bytes(shards: LocalShards) -> None:
    misplaced = 0
    for number in (42, -7, 0, 199):
        right = PARTITIONERS["murmur2"](long_key(number), PARTITIONS) % SHARDS
        found = httpx.get(f"{shards.url_of(right)}/v1/stores/customers/keys/{number}")
        assert found.status_code == 200, found.text
        assert found.json() == {"id": number, "name": f"customer {number}"}
        wrong = httpx.get(f"{shards.url_of((right + 1) % SHARDS)}/v1/stores/customers/keys/{number}")
        assert wrong.status_code == 421
        assert wrong.json()["shard"] == right
    for shard in range(SHARDS):
        info = httpx.get(f"{shards.url_of(shard)}/v1/stores/customers").json()
        assert info["key_format"] == "long"
        misplaced += info["sharding"]["misplaced_records"]
    assert misplaced == 0
    not_a_long = httpx.get(f"{shards.url_of(0)}/v1/stores/customers/keys/abc")
    assert not_a_long.status_code == 400
    assert not_a_long.json()["key_format"] == "long"


def test_the_client_takes_numbers_and_routes_them(shards: LocalShards) -> None:
    with StatestoreClient(shards.url, deadline=20) as client:
        assert client.get("customers", "42") == {"id": 42, "name": "customer 42"}
        keys = ["-20", "5", "1000", "199"]
        assert client.get_many("customers", keys) == [
            {"id": -20, "name": "customer -20"},
            {"id": 5, "name": "customer 5"},
            None,
            {"id": 199, "name": "customer 199"},
        ]
        # Bytes keys are the stored bytes themselves.
        assert client.get("customers", long_key(3)) == {"id": 3, "name": "customer 3"}
        values = client.get_arrow("customers", pa.array(list(CUSTOMERS), pa.int64()))
        assert [json.loads(v)["id"] for v in values.to_pylist()] == list(CUSTOMERS)
        assert client.get_many("accounts", ["7", "-1", str(2**31 - 1), "8"]) == [
            "account 7",
            "account -1",
            f"account {2**31 - 1}",
            None,
        ]
        with pytest.raises(KeyFormatError, match="long"):
            client.get("customers", "abc")
        with pytest.raises(KeyFormatError, match="int"):
            client.get_many("accounts", [str(2**31)])


def test_a_spark_lookup_join_on_a_long_column(shards: LocalShards, spark: SparkSession) -> None:
    orders = spark.createDataFrame([(1, 42), (2, -3), (3, 5000), (4, 42)], "order_id long, customer_id long")
    joined = lookup_join(
        orders,
        store="customers",
        on="customer_id",
        url=shards.url,
        value_schema="id long, name string",
    )
    rows = {row["order_id"]: (row["id"], row["name"]) for row in joined.collect()}
    assert rows == {1: (42, "customer 42"), 2: (-3, "customer -3"), 3: (None, None), 4: (42, "customer 42")}


def test_a_scan_across_shards_comes_in_the_byte_order_of_the_stored_numbers(shards: LocalShards) -> None:
    with StatestoreClient(shards.url, deadline=20) as client:
        scanned = [key for key, _ in client.scan("customers", page_size=7)]
    page = httpx.get(f"{shards.url_of(0)}/v1/stores/customers/scan", params={"limit": 1000}).json()
    one_shard = [item["key"] for item in page["items"]]
    # Big-endian two's complement: 0 up to the largest, then the most negative up to -1, on every
    # shard alike, so pages of three shards merge into one such listing.
    expected = [str(n) for n in sorted(CUSTOMERS, key=long_key)]
    assert scanned == expected
    assert expected[:2] == ["0", "1"]
    assert expected[-2:] == ["-2", "-1"]
    assert 0 < len(one_shard) < len(expected)
    assert one_shard == [key for key in expected if key in set(one_shard)]
