"""A Spark lookup join on an ``avro`` store types its columns from the store's schema: no
``value_schema`` argument (the service says the schema; ``value_schema`` still overrides it). It takes
Avro keys by their natural value, and as of a position answers a natural key written under two key
schema ids as the current read does."""

from __future__ import annotations

import json
import struct
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import DataFrame, SparkSession

from clients.spark import lookup_join, plan, plan_cache
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


Rows = dict[str, dict[str, Any]]


class RecordedBatchGets:
    """The service's app, the ``fields`` asked by each of its batch gets recorded (``None``: whole
    values). ``state`` is the app's, so ``serve_app`` finds its settings."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.state = app.state
        self.fields: list[str | None] = []

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] == "http" and scope["path"].endswith("keys:batchGet"):
            asked = parse_qs(scope.get("query_string", b"").decode()).get("fields")
            self.fields.append(asked[0] if asked else None)
        await self.app(scope, receive, send)

    def taken(self) -> list[str | None]:
        fields, self.fields = self.fields, []
        return fields


def test_a_join_needing_some_fields_of_an_avro_store_asks_only_those_with_the_same_answers(
    broker: LocalBroker,
    make_topic: Callable[..., str],
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = make_topic()
    with schema_registry() as registry:
        serializer = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(V2))
        context = SerializationContext(topic, MessageField.VALUE)
        records = [(f"c{n}".encode(), customer(n, city=None if n % 3 else f"city {n}")) for n in range(30)]
        produce(
            bootstrap,
            topic,
            [(key, serializer(record, context)) for key, record in records]
            + [(b"zz-unknown", b"\x00" + struct.pack(">I", 999) + b"\x02")],
        )
        app = RecordedBatchGets(create_app(settings_for(registry, bootstrap, topic, tmp_path / "state")))
        with serve_app(app) as url:
            wait_until_ready(url)
            orders = spark.createDataFrame(
                [(f"o{n}", f"c{n % 33}") for n in range(40)], "order string, cid string"
            )

            def joined(value_schema: str | None, frame: DataFrame = orders) -> tuple[Rows, list[str | None]]:
                """The rows by order (a misfit column last), and the ``fields`` each batch get asked."""
                monkeypatch.setattr(plan, "plans", plan_cache.PlanCache())  # planned afresh
                df = lookup_join(
                    frame, store="customers", on="cid", url=url, value_schema=value_schema,
                    misfit_column="misfit",
                )  # fmt: skip
                return {row["order"]: row.asDict() for row in df.collect()}, app.taken()

            whole, asked_whole = joined(None)
            assert set(asked_whole) == {None}  # all of the fields: whole values
            cases = {
                "name string, nickname string, city string": "name,nickname,city",
                "city string, nickname int": "city,nickname",  # a nickname is no int: misfits
                "nickname string, nope long": "nickname",  # a field the store lacks: null, unasked
                "`a.b` string, name string": None,  # not a name fields= can send: whole values
            }
            for value_schema, fields in cases.items():
                projected, asked = joined(value_schema)
                assert asked
                assert set(asked) == {fields}, value_schema
                with monkeypatch.context() as whole_values:
                    whole_values.setattr(plan, "typed_projection", lambda names, served: None)
                    unprojected, asked_whole = joined(value_schema)
                assert set(asked_whole) == {None}
                assert projected == unprojected, value_schema
            narrow, _ = joined("name string, nickname string, city string")
            names = ("cid", "name", "nickname", "city", "misfit")
            assert narrow == {
                order: {"order": order} | {n: row[n] for n in names} for order, row in whole.items()
            }
            assert (narrow["o3"]["city"], narrow["o4"]["city"], narrow["o31"]["name"]) == (
                "city 3",
                None,
                None,
            )
            misfits = joined("city string, nickname int")[0]
            # Even customers have a nickname (odd ones null): the orders of c0, c2, ... c28.
            assert sorted(order for order, row in misfits.items() if row["misfit"]) == sorted(
                f"o{n}" for n in range(40) if n % 33 < 30 and n % 33 % 2 == 0
            )
            # A value the store could not decode still fails the job, naming it.
            broken = spark.createDataFrame([("o1", "c2"), ("o2", "zz-unknown")], "order string, cid string")
            with pytest.raises(Exception, match="unknown-schema"):
                joined("name string, city string", broken)
            assert set(app.taken()) == {"name,city"}
