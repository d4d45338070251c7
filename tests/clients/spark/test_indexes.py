"""One-to-many Spark lookups through an index, and consistent (``as_of``) lookups across task retries.

Real local Spark, the real service, fed by the real broker: the positions/tickers example.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import SparkSession

from clients import StatestoreClient
from clients import exceptions as e
from clients.spark import lookup_join, lookup_udf, lookups
from service.local.broker import LocalBroker
from tests.clients.conftest import real_service
from tests.clients.orders import POSITION_SCHEMA, orders, positions_frame, sorted_rows
from tests.clients.portfolio import INDEX, TICKERS, position_round, ticker
from tests.support.kafka import create_topic, make_producer, unique_topic
from tests.support.stores import Delivered, end_of, model_as_of, produce_logged, wait_until


def partition_of(key: bytes) -> int:
    return sum(key) % 2


class Feed:
    """The service of positions and tickers, and every record delivered to their topics."""

    def __init__(self, url: str, topics: dict[str, str], broker: LocalBroker) -> None:
        self.url = url
        self.topics = topics
        self.producer = make_producer(broker.bootstrap_servers)
        self.delivered: dict[str, list[Delivered]] = {name: [] for name in topics}
        self.lock = threading.Lock()

    def produce(
        self, store: str, records: list[tuple[bytes | None, bytes | None]], wait: bool = True
    ) -> None:
        delivered = produce_logged(self.producer, self.topics[store], records, partitions=partition_of)
        with self.lock:
            self.delivered[store] += delivered
            end = end_of(self.delivered[store])
        if wait:
            with StatestoreClient(self.url) as client:
                wait_until(lambda: client.position(store).reaches(end), 30, f"{store} at {end}")

    def table(self, store: str, as_of: str | None = None) -> dict[str, Any]:
        """The store's rows per the topic (as of a position, default: everything delivered)."""
        with self.lock:
            records = list(self.delivered[store])
        position = end_of(records) if as_of is None else dict(_parse(as_of))
        return {k.decode(): json.loads(v) for k, v in model_as_of(records, position).items()}


def _parse(text: str) -> Iterator[tuple[int, int]]:
    for part in filter(None, text.split(",")):
        partition, offset = part.split(":")
        yield int(partition), int(offset)


@pytest.fixture(scope="module")
def feed(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Feed]:
    topics = {name: unique_topic(name) for name in ("positions", "tickers")}
    seeds = [(b"seed-a", b'{"seed": 1}'), (b"seed-b", b'{"seed": 2}')]  # one per partition
    history = {"history": {"retention_offsets": 1_000_000}}
    for topic in topics.values():
        create_topic(broker.bootstrap_servers, topic, partitions=2)
    feed = Feed("", topics, broker)
    for name, topic in topics.items():
        # History starts where a store is when first READY: start with both partitions non-empty.
        feed.delivered[name] += produce_logged(feed.producer, topic, seeds, partitions=partition_of)
    stores = {name: (topic, "json") for name, topic in topics.items()}
    extra = {"positions": {**INDEX, **history}, "tickers": history}
    with real_service(broker.bootstrap_servers, tmp_path_factory.mktemp("state"), stores, extra) as url:
        feed.url = url
        feed.produce("tickers", [(s.encode(), ticker(s, 10.0 + i)) for i, s in enumerate(TICKERS)])
        feed.produce("positions", position_round(seed=1, count=400, ids=150))
        # Positions moved between tickers and deleted, a ticker deleted.
        feed.produce("positions", position_round(seed=2, count=150, ids=150))
        feed.produce("tickers", [(b"IBM", None)])
        yield feed


def test_tickers_to_positions_through_the_index_match_a_pandas_merge(spark: SparkSession, feed: Feed) -> None:
    # how="left" runs on every PySpark version and session kind: tests/clients/spark_matrix.
    how = "inner"
    df, frame = orders(spark)
    joined = lookup_join(
        df,
        store="positions",
        index="by_ticker",
        on="symbol",
        url=feed.url,
        how=how,  # type: ignore[arg-type]
        value_schema=POSITION_SCHEMA,
        prefix="pos_",
    )
    plan = joined._jdf.queryExecution().executedPlan().toString()
    assert plan.count("Exchange") == 1  # the input's own repartition(2), nothing more
    assert joined.columns == ["order_id", "symbol", "pos_key", "pos_ticker", "pos_quantity", "pos_account"]
    got = joined.toPandas()
    expected = frame.merge(
        positions_frame(feed.table("positions")), how=how, left_on="symbol", right_on="pos_ticker"
    )
    assert len(expected) > 3 * len(frame) // 2  # one-to-many: several positions per ticker
    assert sorted_rows(got, ["order_id", "pos_key"]) == sorted_rows(expected, ["order_id", "pos_key"])
    missing = {r.symbol for r in got.itertuples() if r.pos_key is None}
    assert missing == (set() if how == "inner" else {None, "NOPE", "GHOST"})
    (info,) = lookups(joined)
    assert (info.store, info.index, info.exact) == ("positions", "by_ticker", False)


def test_positions_to_tickers_by_key_after_the_index_join_in_one_pass(
    spark: SparkSession, feed: Feed
) -> None:
    df, frame = orders(spark, 120)
    positions = lookup_join(
        df, store="positions", index="by_ticker", on="symbol", url=feed.url, how="inner",
        value_schema=POSITION_SCHEMA, prefix="pos_",
    )  # fmt: skip
    # The ticker of each position, through the tickers' own key (IBM was deleted: nulls).
    both = lookup_join(
        positions, store="tickers", on="pos_ticker", url=feed.url, value_schema="name string, price double",
        prefix="ticker_",
    )  # fmt: skip
    tickers = pd.DataFrame(
        [(k, v["name"], v["price"]) for k, v in feed.table("tickers").items() if "name" in v],
        columns=["pos_ticker", "ticker_name", "ticker_price"],
    )
    expected = frame.merge(
        positions_frame(feed.table("positions")), left_on="symbol", right_on="pos_ticker"
    ).merge(tickers, on="pos_ticker", how="left")
    by = ["order_id", "pos_key"]
    assert sorted_rows(both.toPandas(), by) == sorted_rows(expected, by)
    assert {r.ticker_name for r in both.collect() if r.pos_ticker == "IBM"} == {None}


def test_consistent_udf_and_driver_checks(spark: SparkSession, feed: Feed) -> None:
    tickers = lookup_udf(store="tickers", url=feed.url, value_schema="name string", consistent=True)
    with StatestoreClient(feed.url) as client:
        assert client.position("tickers").reaches(dict(_parse(tickers.position)))
    df = spark.createDataFrame([("AAPL",), ("IBM",)], "symbol string")
    names = {
        r.symbol: r.t.name if r.t else None
        for r in df.select("symbol", tickers("symbol").alias("t")).collect()
    }
    assert names == {"AAPL": "AAPL Inc.", "IBM": None}
    with pytest.raises(e.UnknownIndexError):
        lookup_join(df, store="positions", index="by_nothing", on="symbol", url=feed.url)
    with pytest.raises(e.HistoryExpiredError):
        lookup_join(df, store="tickers", on="symbol", url=feed.url, as_of="0:0,1:0")
    with pytest.raises(ValueError, match="not both"):
        lookup_join(df, store="tickers", on="symbol", url=feed.url, as_of="0:5", min_position="0:5")
