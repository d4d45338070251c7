"""Spark lookup joins on real local Spark against the real service, fed by the real broker."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from clients import StatestoreClient
from clients import exceptions as e
from clients.spark import lookup_join, lookup_udf, lookups
from service.local.broker import LocalBroker, free_port
from store import Store
from tests.clients.conftest import real_service
from tests.clients.shop import (
    BAD_PRODUCTS,
    BLOBS,
    CUSTOMER_SCHEMA,
    CUSTOMERS,
    PRODUCT_SCHEMA,
    PRODUCTS,
    TOMBSTONED_CUSTOMERS,
    TOMBSTONED_PRODUCTS,
    as_rows,
    dimension_records,
    expected_invoices,
    live_product,
    purchases_frame,
)
from tests.clients.spark_matrix.conftest import fields
from tests.support.kafka import create_topic, produce, unique_topic


@pytest.fixture(scope="module")
def service(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """products, customers (JSON) and blobs (bytes, binary keys) served by the real service."""
    topics = {name: unique_topic(name) for name in ("products", "customers", "blobs")}
    for topic in topics.values():
        create_topic(broker.bootstrap_servers, topic, partitions=3)
    produce(
        broker.bootstrap_servers,
        topics["products"],
        dimension_records({**PRODUCTS, **BAD_PRODUCTS}, TOMBSTONED_PRODUCTS),
    )
    produce(broker.bootstrap_servers, topics["customers"], dimension_records(CUSTOMERS, TOMBSTONED_CUSTOMERS))
    produce(broker.bootstrap_servers, topics["blobs"], list(BLOBS.items()))
    stores = {
        "products": (topics["products"], "json"),
        "customers": (topics["customers"], "json"),
        "blobs": (topics["blobs"], "bytes"),
    }
    with real_service(broker.bootstrap_servers, tmp_path_factory.mktemp("state"), stores) as url:
        yield url


def invoices(spark: SparkSession, url: str, purchases: pd.DataFrame, how: str, **options: Any) -> DataFrame:
    df = spark.createDataFrame(purchases).repartition(2)
    with_products = lookup_join(
        df,
        store="products",
        on="product_id",
        url=url,
        how=how,
        value_schema=PRODUCT_SCHEMA,
        prefix="product_",
        **options,
    )
    return lookup_join(
        with_products,
        store="customers",
        on=F.col("customer_id"),
        url=url,
        how=how,
        value_schema=CUSTOMER_SCHEMA,
        prefix="customer_",
        **options,
    )


SCANS = "/v1/stores/{store}/scan"
BATCH_GETS = "/v1/stores/{store}/keys:batchGet"


def requests_answered(url: str) -> Counter[str]:
    """The requests the service at ``url`` answered so far, by route (its ``/metrics``)."""
    counts: Counter[str] = Counter()
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=30).text):
        for sample in family.samples:
            if sample.name == "statestore_http_requests_total":
                counts[sample.labels["route"]] += int(sample.value)
    return counts


def requests_of(url: str, action: Callable[[], Any]) -> tuple[Any, Counter[str]]:
    """``action()``'s result, and the requests the service answered meanwhile, by route."""
    before = requests_answered(url)
    result = action()
    return result, requests_answered(url) - before


def test_tasks_needing_most_keys_read_the_stores_whole_with_the_answers_of_batch_gets(
    spark: SparkSession, service: str
) -> None:
    purchases = purchases_frame(3000)
    expected = as_rows(expected_invoices(purchases, "left"))
    # Each task asks for most of the 202 products and 50 customers: it reads both stores whole
    # (neither broadcast: that is the lookup's own path).
    whole, by_scans = requests_of(
        service, invoices(spark, service, purchases, "left", broadcast_bytes=0).toPandas
    )
    fetched, by_gets = requests_of(
        service, invoices(spark, service, purchases, "left", scan_bytes=0, broadcast_bytes=0).toPandas
    )
    for got in (whole, fetched):
        assert as_rows(got.sort_values("purchase_id").reset_index(drop=True)) == expected
    # Each store once: the tasks of a machine share a store one of them read whole.
    assert by_scans[SCANS] == 2
    assert by_scans[BATCH_GETS] == 0
    assert by_gets[SCANS] == 0
    assert by_gets[BATCH_GETS] >= 4


@pytest.mark.parametrize("broadcast_bytes", [0, 1 << 20], ids=["looked-up", "broadcast-if-small"])
def test_a_lookup_planned_again_on_an_unchanged_store_asks_the_service_only_its_info(
    spark: SparkSession, service: str, broadcast_bytes: int
) -> None:
    purchases = purchases_frame(3000)
    expected = as_rows(expected_invoices(purchases, "left"))

    def planned_and_run() -> pd.DataFrame:
        # A job planning its lookups anew, as a scheduled job does every run (batch_size: options of
        # this test's own, so no other test planned this read before).
        got = invoices(
            spark,
            service,
            purchases,
            "left",
            batch_size=4000 + broadcast_bytes,
            broadcast_bytes=broadcast_bytes,
        ).toPandas()
        return got.sort_values("purchase_id").reset_index(drop=True)

    runs = [requests_of(service, planned_and_run) for _ in range(3)]
    for got, _ in runs:
        assert as_rows(got) == expected
    first, *again = (answered - Counter({"/metrics": 1}) for _, answered in runs)
    # Each store's info, its sample of values and one whole read: by the tasks (which share it),
    # or, for the customers broadcast, by the driver. The driver's read of the products (as small)
    # finds values not fitting the schema: their tasks look them up and count those.
    assert first == {"/v1/stores/{store}": 2, SCANS: 5 if broadcast_bytes else 4}
    # Planned again at the same copy and position: each store's info, nothing else.
    assert again == [Counter({"/v1/stores/{store}": 2})] * 2


def test_a_consistent_lookup_reads_the_store_whole_as_of_the_pinned_position(
    spark: SparkSession, broker: LocalBroker, tmp_path: Path
) -> None:
    topic = unique_topic("versions")
    create_topic(broker.bootstrap_servers, topic, partitions=1)
    produce(broker.bootstrap_servers, topic, [(b"k%03d" % i, b'{"version": 1}') for i in range(300)])
    history = {"versions": {"history": {"retention_offsets": 100_000}}}
    with real_service(
        broker.bootstrap_servers, tmp_path / "state", {"versions": (topic, "json")}, history
    ) as url:
        df = spark.createDataFrame([(f"k{i % 350:03d}",) for i in range(2000)], "k string").repartition(2)
        # All pinned now, at offset 300; the store then moves on. The first two are looked up by
        # the tasks (by batch gets, by a whole read), the third broadcast (read by the driver now).
        joins = {
            (scan_bytes, broadcast_bytes): lookup_join(
                df,
                store="versions",
                on="k",
                url=url,
                value_schema="version int",
                consistent=True,
                scan_bytes=scan_bytes,
                broadcast_bytes=broadcast_bytes,
            )
            for scan_bytes, broadcast_bytes in ((0, 0), (1 << 20, 0), (1 << 20, 1 << 20))
        }
        updates = [(b"k%03d" % i, b'{"version": 2}') for i in range(350)] + [(b"k001", None)]
        produce(broker.bootstrap_servers, topic, updates)
        with StatestoreClient(url) as client:
            client.get("versions", "k001", min_position="0:651", default=None)  # waits for all of them
        rows = []
        for (scan_bytes, broadcast_bytes), joined in joins.items():
            got, answered = requests_of(url, joined.collect)
            rows.append(sorted((row.k, row.version) for row in got))
            if broadcast_bytes:
                assert answered[SCANS] == answered[BATCH_GETS] == 0
            else:
                assert answered[SCANS if scan_bytes else BATCH_GETS] >= 1
                assert answered[BATCH_GETS if scan_bytes else SCANS] == 0
    expected = sorted((f"k{i % 350:03d}", 1 if i % 350 < 300 else None) for i in range(2000))
    assert rows == [expected] * 3


def test_no_exchange_is_added_by_two_chained_lookups(spark: SparkSession, service: str) -> None:
    df = spark.range(100).select(
        F.format_string("p%03d", "id").alias("product_id"), F.lit("c01").alias("customer_id")
    )
    assert df._jdf.queryExecution().executedPlan().toString().count("Exchange") == 0
    products = lookup_join(
        df, store="products", on="product_id", url=service, value_schema=PRODUCT_SCHEMA, prefix="p_"
    )
    # Customers (all fitting the schema) would be broadcast: here the lookups' own path is tested.
    fused = lookup_join(
        products, store="customers", on="customer_id", url=service, value_schema=CUSTOMER_SCHEMA,
        prefix="c_", broadcast_bytes=0,
    )  # fmt: skip
    # The second key comes from the first lookup's output, so the lookups run one after the other.
    dependent = lookup_join(
        products,
        store="customers",
        on=F.col("p_category"),
        url=service,
        value_schema=CUSTOMER_SCHEMA,
        prefix="c_",
        broadcast_bytes=0,
    )
    for chained, passes in ((fused, 1), (dependent, 2)):
        plan = chained._jdf.queryExecution().executedPlan().toString()
        assert plan.count("MapInArrow") == passes
        assert plan.count("Exchange") == 0
        # String key columns go to the tasks as they are; only an expression gets a key column.
        assert ("__statestore_key_" in plan) == (chained is dependent)
    fused_rows = {r.product_id: (r.p_name, r.c_name) for r in fused.collect()}
    assert fused_rows["p001"] == ("product 1", "customer 1")
    assert fused_rows["p099"] == ("product 99", "customer 1")
    assert len(fused_rows) == 100
    assert {r.c_name for r in dependent.collect()} == {None}


@pytest.mark.parametrize("how", ["left", "inner"])
def test_a_small_store_whose_values_fit_is_broadcast_with_the_answers_of_the_lookup(
    spark: SparkSession, service: str, how: str
) -> None:
    df = spark.createDataFrame(purchases_frame(3000)).repartition(2)

    def join(store: str, schema: str, **options: Any) -> DataFrame:
        return lookup_join(
            df, store=store, on="customer_id" if store == "customers" else "product_id", url=service,
            how=how, value_schema=schema, prefix="x_", batch_size=7000 + len(how), **options,
        )  # fmt: skip

    # Planning reads the customers whole on the driver: the info, a sample, one Arrow page.
    broadcast, planning = requests_of(service, lambda: join("customers", CUSTOMER_SCHEMA))
    assert planning - Counter({"/metrics": 1}) == {"/v1/stores/{store}": 1, SCANS: 2}
    looked_up = join("customers", CUSTOMER_SCHEMA, broadcast_bytes=0)
    plan = broadcast._jdf.queryExecution().executedPlan().toString()
    assert "BroadcastHashJoin" in plan
    assert "MapInArrow" not in plan
    assert "hashpartitioning" not in plan  # the rows are not shuffled
    assert "MapInArrow" in looked_up._jdf.queryExecution().executedPlan().toString()
    # The same names, types and metadata (the lookup's store and position; its id is its own).
    assert fields(broadcast) == fields(looked_up)
    got, running = requests_of(service, broadcast.collect)
    assert running[SCANS] == running[BATCH_GETS] == 0
    expected = looked_up.collect()
    assert sorted(got) == sorted(expected)
    assert len(got) == (3000 if how == "left" else len([r for r in expected if r.x_name is not None]))
    assert {r.x_name for r in got} >= {"customer 1", "customer 47"}
    info = lookups(broadcast)[0]
    assert (info.store, info.mismatched_values) == ("customers", 0)
    assert info.position == lookups(looked_up)[0].position
    # Values not fitting the schema (two bad products), or a store above the bound: looked up.
    for other in (join("products", PRODUCT_SCHEMA), join("customers", CUSTOMER_SCHEMA, broadcast_bytes=100)):
        assert "MapInArrow" in other._jdf.queryExecution().executedPlan().toString()


def test_inner_join_drops_absent_tombstoned_and_null_keys(spark: SparkSession, service: str) -> None:
    purchases = purchases_frame(1500)
    # Several Arrow batches per task, so they are regrouped before the lookups.
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "200")
    try:
        got = invoices(spark, service, purchases, "inner").toPandas()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    got = got.sort_values("purchase_id").reset_index(drop=True)
    expected = expected_invoices(purchases, "inner")
    assert 0 < len(expected) < len(purchases)
    assert as_rows(got) == as_rows(expected)


def test_binary_keys_give_binary_values_and_the_udf_matches_the_join(
    spark: SparkSession, service: str
) -> None:
    keys = [b"\x00\xff" + bytes([i]) for i in range(40)] + [None]
    df = spark.createDataFrame([(i, k) for i, k in enumerate(keys)], "id int, k binary")
    joined = {row.id: row.value for row in lookup_join(df, store="blobs", on="k", url=service).collect()}
    assert joined == {i: (None if k is None else BLOBS.get(k)) for i, k in enumerate(keys)}

    products = lookup_udf(store="products", url=service, value_schema=PRODUCT_SCHEMA)
    ids = spark.createDataFrame([(f"p{i:03d}",) for i in range(170, 210)] + [(None,)], "product_id string")
    # Tiny Arrow batches: answers must still line up with rows when batches are looked up in groups.
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "7")
    try:
        rows = ids.withColumn("product", products(F.col("product_id"))).collect()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert len(rows) == 41
    for row in rows:
        assert (row.product.asDict() if row.product is not None else None) == live_product(row.product_id)


def test_the_driver_fails_fast_on_unusable_lookups(spark: SparkSession, service: str) -> None:
    df = spark.createDataFrame([("p001",)], "product_id string")
    down = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(e.DeadlineExceededError, match="failed") as unreachable:
        lookup_join(df, store="products", on="product_id", url=down, planning_deadline=1.0)
    assert isinstance(unreachable.value.last_error, e.TransportError)
    assert any("checked on the driver" in note for note in unreachable.value.__notes__)
    with pytest.raises(e.UnknownStoreError):
        lookup_join(df, store="nope", on="product_id", url=service)
    with pytest.raises(e.SchemaMismatchError, match="bytes values"):
        lookup_join(df, store="blobs", on="product_id", url=service, value_schema="x string")
    with pytest.raises(e.SchemaMismatchError, match="does not fit"):
        lookup_join(
            df, store="products", on="product_id", url=service, value_schema="title string, weight int"
        )
    with pytest.raises(ValueError, match="prefix"):
        lookup_join(
            df.withColumn("name", F.lit("x")),
            store="products",
            on="product_id",
            url=service,
            value_schema="name string",
        )
    with pytest.raises(e.UnknownStoreError):
        lookup_udf(store="nope", url=service)


def test_tasks_read_at_least_the_pinned_position_while_the_dimension_changes(
    spark: SparkSession, broker: LocalBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The service listens to a store once a read waits for a position: the updates are produced
    # only then, so the tasks are seen waiting for them, whatever the speed of the machine.
    waited = threading.Event()
    add_listener = Store.add_listener

    def noting_waits(store: Store, listener: Callable[[], None]) -> Callable[[], None]:
        remove = add_listener(store, listener)
        waited.set()
        return remove

    monkeypatch.setattr(Store, "add_listener", noting_waits)
    topic = unique_topic("prices")
    create_topic(broker.bootstrap_servers, topic, partitions=1)
    produce(broker.bootstrap_servers, topic, [(f"k{i}".encode(), b'{"version": 1}') for i in range(50)])
    with real_service(broker.bootstrap_servers, tmp_path / "state", {"prices": (topic, "json")}) as url:
        df = spark.createDataFrame([(f"k{i % 50}",) for i in range(400)], "k string").repartition(2)
        # Pin ahead of the store: the 50 updates produced while the job runs end at offset 100.
        joined = lookup_join(
            df, store="prices", on="k", url=url, value_schema="version int", min_position="0:100"
        )
        assert lookups(joined)[0].position == "0:100"

        def update() -> None:
            if not waited.wait(120):  # no task waited: the job fails on its own
                return
            produce(
                broker.bootstrap_servers, topic, [(f"k{i}".encode(), b'{"version": 2}') for i in range(50)]
            )

        updater = threading.Thread(target=update)
        updater.start()
        try:
            versions = [row.version for row in joined.collect()]
        finally:
            updater.join()
        assert versions == [2] * 400
        # A lookup planned now pins the updated position and reads it.
        again = lookup_join(df, store="prices", on="k", url=url, value_schema="version int")
        assert lookups(again)[0].position == "0:100"
        assert {row.version for row in again.collect()} == {2}
