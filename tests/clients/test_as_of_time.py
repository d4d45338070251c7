"""Reads as of a time through the Python client (sync and async, one service and a sharded one) and
the Spark lookup join: the real broker, real RocksDB, real uvicorn, real Spark local[2]. Every answer
equals the brute-force model; the join equals pandas ``merge_asof`` by key, also with every task
retried mid-join while the dimension changes."""

from __future__ import annotations

import asyncio
import datetime
import json
import random
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StructField, StructType

from clients import AsyncStatestoreClient, StatestoreClient
from clients.exceptions import HistoryExpiredError
from clients.partitioners import PARTITIONERS
from clients.spark import lookup_join, lookups
from service.local.broker import LocalBroker
from service.local.shards import LocalShards
from tests.clients.conftest import real_service, wait_until_ready
from tests.clients.spark_matrix.test_joins import fail_first_attempts
from tests.support.kafka import create_topic, make_producer, unique_topic
from tests.support.timed import Stamped, compacted, produce_stamped, value_at

PARTITIONS = 3
KEYS = [f"sku-{i:02d}" for i in range(12)]
HISTORY = {"retention_offsets": 1_000_000}


def partition_of(key: str) -> int:
    """Where a Java client puts the key: a sharded store checks its records are placed so."""
    return PARTITIONERS["murmur2"].partition(key.encode(), PARTITIONS)


def versions(rng: random.Random, count: int, low: int, high: int, keys: list[str] = KEYS) -> list[Any]:
    """Price versions of random keys, timestamps drawn out of order from ``[low, high]``; tombstones."""
    out = []
    for _ in range(count):
        key = rng.choice(keys)
        value = None if rng.random() < 0.15 else json.dumps({"price": rng.randrange(1, 500)}).encode()
        out.append((key.encode(), value, rng.randint(low, high), partition_of(key)))
    return out


def price(value: bytes | None) -> float | None:
    return None if value is None else float(json.loads(value)["price"])


@pytest.fixture(scope="module")
def dimension(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A price dimension with ~10 versions a key, served by one service and by two shards."""
    rng = random.Random(889)
    topic = unique_topic("prices")
    create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    producer = make_producer(broker.bootstrap_servers)
    before = produce_stamped(producer, topic, versions(rng, 24, 1_000, 2_000, KEYS[:8]))
    config = {
        "kafka": {"bootstrap_servers": broker.bootstrap_servers},
        "stores": [
            {
                "name": "prices",
                "topic": topic,
                "value_format": "json",
                "history": HISTORY,
                "partitioner": "murmur2",
            }
        ],
    }
    base = tmp_path_factory.mktemp("as_of_time")
    with (
        real_service(
            broker.bootstrap_servers,
            base / "one",
            {"prices": (topic, "json")},
            {"prices": {"history": HISTORY}},
        ) as url,
        LocalShards(config, 2, base / "shards", base / "logs", log_level="WARNING") as shards,
    ):
        for shard in range(2):
            wait_until_ready(shards.url_of(shard))
        log = compacted(before)
        for low in (6_000, 3_000, 9_000, 2_000):
            log += produce_stamped(producer, topic, versions(rng, 30, low, low + 3_000))
        end = {p: max(r.offset for r in log if r.partition == p) + 1 for p in range(PARTITIONS)}
        yield {
            "topic": topic,
            "producer": producer,
            "url": url,
            "sharded": shards.url,
            "log": log,
            "floor": max(r.timestamp for r in before),
            "end": ",".join(f"{p}:{o}" for p, o in end.items()),
            "rng": rng,
        }


def probes(dimension: dict[str, Any]) -> list[int]:
    log: list[Stamped] = dimension["log"]
    times = {dimension["floor"], 20_000}
    for record in log:
        times.update({record.timestamp - 1, record.timestamp, record.timestamp + 1})
    return sorted(t for t in times if t >= dimension["floor"])


@pytest.mark.parametrize("where", ["url", "sharded"])
def test_client_get_and_get_many_as_of_times_equal_the_model(dimension: dict[str, Any], where: str) -> None:
    log: list[Stamped] = dimension["log"]
    times = probes(dimension)
    rng = random.Random(where)
    with StatestoreClient(dimension[where], deadline=30) as client:
        # Every shard caught up: one key waits only on its own shard's part of the position.
        client.get_many("prices", KEYS, min_position=dimension["end"])
        for at in times[::5]:
            key = rng.choice([*KEYS, "never"])
            assert client.get("prices", key, as_of_time=at) == (
                None
                if value_at(log, key.encode(), at) is None
                else json.loads(value_at(log, key.encode(), at))
            ), (key, at)
        keys = [rng.choice([*KEYS, "never"]) for _ in range(300)]
        asked = [rng.choice(times) for _ in keys]
        expected = [value_at(log, k.encode(), t) for k, t in zip(keys, asked, strict=True)]
        expected_json = [None if v is None else json.loads(v) for v in expected]
        assert client.get_many("prices", keys, as_of_times=asked) == expected_json
        moments = [datetime.datetime.fromtimestamp(t / 1000, tz=datetime.UTC) for t in asked]
        assert client.get_many("prices", keys, as_of_times=moments) == expected_json
        view = client.consistent("prices")
        assert view.get_many(keys, as_of_times=asked) == expected_json
        # Below every record applied before history began: no shard answers it. (A shard's floor is
        # that of its own partitions, so one just below the whole store's floor may be answered.)
        with pytest.raises(HistoryExpiredError) as expired:
            client.get_many("prices", keys[:2], as_of_times=[dimension["floor"], 999])
        if where == "url":
            assert expired.value.time_floor == dimension["floor"]

    async def read_async() -> list[Any]:
        async with AsyncStatestoreClient(dimension[where], deadline=30) as aio:
            single = await aio.get("prices", keys[0], as_of_time=asked[0])
            return [single, *(await aio.get_many("prices", keys, as_of_times=asked))]

    assert asyncio.run(read_async()) == [expected_json[0], *expected_json]


def expected_join(
    facts: pd.DataFrame, log: list[Stamped], as_of: dict[int, int] | None = None
) -> pd.DataFrame:
    """The model: pandas merge_asof by key of each fact with the latest version at its time."""
    rows = [
        (r.key.decode(), r.timestamp, r.offset, price(r.value))
        for r in log
        if as_of is None or r.offset < as_of.get(r.partition, 0)
    ]
    history = pd.DataFrame(rows, columns=["sku", "at", "offset", "expected"])
    history = history.sort_values(["at", "offset"], kind="stable")
    left = facts.sort_values("at", kind="stable")
    merged = pd.merge_asof(left, history[["sku", "at", "expected"]], on="at", by="sku", direction="backward")
    return merged.sort_values("fact").reset_index(drop=True)


def facts_frame(dimension: dict[str, Any], count: int) -> pd.DataFrame:
    rng = random.Random(count)
    times = probes(dimension)
    return pd.DataFrame(
        {
            "fact": range(count),
            "sku": [rng.choice([*KEYS, "never"]) for _ in range(count)],
            "at": [rng.choice(times) for _ in range(count)],
        }
    )


@pytest.mark.parametrize("where", ["url", "sharded"])
def test_point_in_time_lookup_join_equals_merge_asof(
    spark: SparkSession, dimension: dict[str, Any], where: str
) -> None:
    facts = facts_frame(dimension, 2_000)
    df = spark.createDataFrame(facts).repartition(3)
    df = df.withColumn("ts", F.timestamp_millis("at"))
    with StatestoreClient(dimension[where]) as client:
        # Every shard caught up: one key waits only on its own shard's part of the position.
        client.get_many("prices", KEYS, min_position=dimension["end"])
    joined = lookup_join(
        df, store="prices", on="sku", url=dimension[where], value_schema="price double", as_of_time="ts"
    )
    # Chained: a plain lookup of the latest price joins the same pass.
    both = lookup_join(
        joined, store="prices", on="sku", url=dimension[where], value_schema="price double", prefix="now_"
    )
    got = both.toPandas().sort_values("fact").reset_index(drop=True)
    expected = expected_join(facts, dimension["log"])
    assert got["price"].tolist() == pytest.approx(expected["expected"].tolist(), nan_ok=True)
    # The plain lookup reads the latest value: the last record by offset, whatever its time.
    latest = {record.key.decode(): price(record.value) for record in compacted(dimension["log"])}
    assert got["now_price"].fillna(-1).tolist() == [latest.get(k) or -1 for k in got["sku"]]
    assert all(info.exact for info in lookups(both)[:1])
    # Inner drops the rows with no version at their time; epoch ms as a long column works the same.
    inner = lookup_join(
        df,
        store="prices",
        on="sku",
        url=dimension[where],
        value_schema="price double",
        as_of_time=F.col("at"),
        how="inner",
    ).toPandas()
    kept = expected.dropna(subset=["expected"])
    assert sorted(inner["fact"]) == sorted(kept["fact"])


def test_a_point_in_time_join_retried_mid_join_gives_the_same_rows_while_the_dimension_changes(
    spark: SparkSession, dimension: dict[str, Any]
) -> None:
    url = dimension["url"]
    facts = facts_frame(dimension, 600)
    df = spark.createDataFrame(facts).repartition(2)
    with StatestoreClient(url) as client:
        # Every shard caught up: one key waits only on its own shard's part of the position.
        client.get_many("prices", KEYS, min_position=dimension["end"])
    joined = lookup_join(df, store="prices", on="sku", url=url, value_schema="price double", as_of_time="at")
    pinned = lookups(joined)[0].position
    clean = joined.toPandas().sort_values("fact").reset_index(drop=True)
    # Late records inside the facts' times: a read that is not pinned would now answer otherwise.
    late = produce_stamped(
        dimension["producer"], dimension["topic"], versions(dimension["rng"], 40, dimension["floor"], 12_000)
    )
    as_of = {int(p): int(o) for p, o in (part.split(":") for part in pinned.split(","))}
    assert not expected_join(facts, [*dimension["log"], *late])["expected"].equals(
        expected_join(facts, dimension["log"])["expected"]
    )
    schema = StructType([*joined.schema.fields, StructField("attempt", IntegerType())])
    retried = joined.mapInArrow(fail_first_attempts(), schema).toPandas()
    assert set(retried.pop("attempt")) == {1}  # every row comes from a retried task
    retried = retried.sort_values("fact").reset_index(drop=True)
    pd.testing.assert_frame_equal(retried, clean)
    expected = expected_join(facts, [*dimension["log"], *late], as_of)
    assert clean["price"].tolist() == pytest.approx(expected["expected"].tolist(), nan_ok=True)
    dimension["log"] += late


def test_a_fact_older_than_the_history_fails_the_join(spark: SparkSession, dimension: dict[str, Any]) -> None:
    df = spark.createDataFrame(pd.DataFrame({"sku": ["sku-01"], "at": [dimension["floor"] - 1]}))
    joined = lookup_join(
        df, store="prices", on="sku", url=dimension["url"], value_schema="price double", as_of_time="at"
    )
    with pytest.raises(Exception, match=r"history-expired|HistoryExpired|as_of_time"):
        joined.collect()
