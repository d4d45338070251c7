"""A Spark lookup join on an ``avro`` store types its columns from the store's schema: no
``value_schema`` argument (the service says the schema; ``value_schema`` still overrides it). It takes
Avro keys by their natural value, and as of a position answers a natural key written under two key
schema ids as the current read does."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import SparkSession

from clients.spark import lookup_join
from service.app import create_app
from service.local.broker import LocalBroker
from tests.clients.conftest import wait_until_ready
from tests.service.test_avro_store import V2, customer, settings_for, until
from tests.service.test_registry_key_winners import Topic, _reached, _settings
from tests.support.kafka import produce
from tests.support.schema_registry import schema_registry
from tests.support.server import serve_app


def test_lookup_join_types_columns_from_the_avro_schema(
    broker: LocalBroker, make_topic: Callable[..., str], spark: SparkSession, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = make_topic()
    with schema_registry() as registry:
        serializer = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(V2))
        context = SerializationContext(topic, MessageField.VALUE)
        produce(
            bootstrap,
            topic,
            [(f"c{n}".encode(), serializer(customer(n, city=f"city {n}"), context)) for n in range(30)]
            # Past the driver's sample of 20 values: a record under a schema id the registry lacks.
            + [(b"zz-unknown", b"\x00" + struct.pack(">I", 999) + b"\x02")],
        )
        with serve_app(create_app(settings_for(registry, bootstrap, topic, tmp_path / "state"))) as url:
            wait_until_ready(url)
            info = httpx.get(f"{url}/v1/stores/customers").json()
            assert info["value_schema"].startswith("`id` BIGINT, `name` STRING, `balance` STRING")
            orders = spark.createDataFrame(
                [("o1", "c1"), ("o2", "c4"), ("o3", "nope")], "order string, cid string"
            )
            joined = lookup_join(orders, store="customers", on="cid", url=url)
            types = dict(joined.dtypes)
            assert (types["id"], types["name"], types["city"], types["nickname"]) == (
                "bigint",
                "string",
                "string",
                "string",
            )
            rows = {row["order"]: (row["id"], row["city"], row["tier"]) for row in joined.collect()}
            assert rows == {
                "o1": (1, "city 1", "GOLD"),
                "o2": (4, "city 4", "GOLD"),
                "o3": (None, None, None),
            }
            overridden = lookup_join(orders, store="customers", on="cid", url=url, value_schema="name string")
            assert overridden.columns == ["order", "cid", "name"]
            # A value the store could not decode fails the job, naming it: never a row of nulls.
            broken = spark.createDataFrame([("o4", "c2"), ("o5", "zz-unknown")], "order string, cid string")
            with pytest.raises(Exception, match="unknown-schema"):
                lookup_join(broken, store="customers", on="cid", url=url).collect()


def test_lookup_join_takes_the_natural_value_of_avro_keys(
    broker: LocalBroker, make_topic: Callable[..., str], spark: SparkSession, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = make_topic()
    with schema_registry() as registry:
        client = SchemaRegistryClient({"url": registry.url})
        keys = AvroSerializer(client, json.dumps("long"))
        values = AvroSerializer(client, json.dumps(V2))
        key_context = SerializationContext(topic, MessageField.KEY)
        value_context = SerializationContext(topic, MessageField.VALUE)
        produce(
            bootstrap,
            topic,
            [
                (keys(n, key_context), values(customer(n, city=f"city {n}"), value_context))
                for n in (1, 2, -3)
            ],
        )
        settings = settings_for(registry, bootstrap, topic, tmp_path / "state")
        settings.stores[0].key_format = "avro"
        with serve_app(create_app(settings)) as url:
            wait_until_ready(url)
            orders = spark.createDataFrame([("o1", 2), ("o2", -3), ("o3", 9)], "order string, cid long")
            joined = lookup_join(orders, store="customers", on="cid", url=url)
            rows = {row["order"]: (row["id"], row["city"]) for row in joined.collect()}
            assert rows == {"o1": (2, "city 2"), "o2": (-3, "city -3"), "o3": (None, None)}


def test_lookup_join_as_of_a_position_answers_the_winner_of_two_key_schema_ids_on_one_partition(
    broker: LocalBroker, make_topic: Callable[..., str], spark: SparkSession, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    with schema_registry() as registry:
        topic = Topic(bootstrap, make_topic(partitions=1), registry)
        settings = _settings(registry, bootstrap, tmp_path / "state", topic.topic)
        with serve_app(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as http:
            wait_until_ready(url)
            # Under v2 after v1 on the one partition, older in time: v1's record is the winner.
            topic.write((42, 1, {"name": "c42 v1", "city": "Oslo"}, 2_000))
            end = topic.write((42, 2, {"name": "c42 late", "city": "Rome"}, 1_000))
            until(_reached(http, end), "the records applied")
            orders = spark.createDataFrame([("o1", 42), ("o2", 7)], "order string, cid long")
            joined = lookup_join(orders, store="customers", on="cid", url=url, as_of=str(end))
            rows = {row["order"]: (row["name"], row["city"]) for row in joined.collect()}
            assert rows == {"o1": ("c42 v1", "Oslo"), "o2": (None, None)}
