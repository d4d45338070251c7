"""Lookup joins and the lookup UDF on every supported PySpark, classic and Spark Connect.

The service's URL and token come from the session's Spark conf (``spark.statestore.url`` and
``spark.statestore.authFile``, set by the ``spark`` fixture): no call here passes ``url=``.
"""

from __future__ import annotations

import gc
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StructField, StructType

from clients import StatestoreClient
from clients.exceptions import UnsupportedSparkError
from clients.spark import broadcast, lookup_join, lookup_udf, lookups
from clients.spark.compat import PYSPARK_VERSION, parse_struct
from clients.spark.local_tables import VIEW_PREFIX, drop_unused_views, kept_frame
from clients.spark.plan_cache import plans
from tests.clients.orders import POSITION_SCHEMA, orders, positions_frame, sorted_rows
from tests.clients.shop import (
    CUSTOMER_SCHEMA,
    PRODUCT_SCHEMA,
    RICH_KEYS,
    RICH_SCHEMA,
    as_rows,
    expected_invoices,
    live_product,
    purchases_frame,
)
from tests.clients.spark_matrix.conftest import CONNECT, COUNTS_MISFITS, Service, fields, physical_plan


def test_invoice_chained_join_with_a_computed_key_in_one_pass(spark: SparkSession, service: Service) -> None:
    purchases = purchases_frame(2000)
    numbers = [None if c is None else int(c[1:]) for c in purchases.customer_id]
    lines = zip(purchases.itertuples(index=False), numbers, strict=True)
    rows = [(int(p), product, int(q), number) for (p, product, _, q), number in lines]
    schema = "purchase_id long, product_id string, quantity long, customer_number int"
    df = spark.createDataFrame(rows, schema).repartition(2)
    with_products = lookup_join(
        df, store="products", on="product_id", value_schema=PRODUCT_SCHEMA, prefix="product_"
    )
    # A computed key: "c" and the number on two digits (null numbers give null keys).
    customer_key = F.concat_ws("", F.lit("c"), F.lpad(F.col("customer_number").cast("string"), 2, "0"))
    invoices = lookup_join(
        with_products,
        store="customers",
        on=F.when(F.col("customer_number").isNotNull(), customer_key),
        value_schema=CUSTOMER_SCHEMA,
        prefix="customer_",
        broadcast_bytes=0,  # the customers would be broadcast: here the lookups' own pass is tested
    )
    plan = physical_plan(invoices)
    assert plan.count("MapInArrow") == 1  # chained lookups share one pass
    assert plan.count("Exchange") == 1  # the input's own repartition(2), nothing more
    got = invoices.toPandas().sort_values("purchase_id").reset_index(drop=True)
    expected = expected_invoices(purchases, "left")
    expected = expected.assign(customer_number=numbers).drop(columns=["customer_id"])
    assert sorted(got.columns) == sorted(expected.columns)
    assert as_rows(got[sorted(got.columns)]) == as_rows(expected[sorted(expected.columns)])
    with StatestoreClient(service.url, token=service.token) as client:
        pinned = {info.store: info.position for info in lookups(invoices)}
        assert pinned == {
            "products": str(client.position("products")),
            "customers": str(client.position("customers")),
        }


def test_a_small_store_is_broadcast_where_the_session_takes_arrow_with_the_lookup_s_answers(
    spark: SparkSession,
) -> None:
    purchases = purchases_frame(1000)
    df = spark.createDataFrame(purchases).repartition(2)
    joins = [
        lookup_join(
            df,
            store="customers",
            on="customer_id",
            value_schema=CUSTOMER_SCHEMA,
            prefix="customer_",
            broadcast_bytes=size,
        )
        for size in (1 << 20, 0)
    ]
    broadcast_plan, looked_up_plan = (physical_plan(joined) for joined in joins)
    assert "BroadcastHashJoin" in broadcast_plan
    assert "MapInArrow" not in broadcast_plan
    assert "MapInArrow" in looked_up_plan
    assert "hashpartitioning" not in broadcast_plan  # the rows are not shuffled
    got = [joined.toPandas().sort_values("purchase_id").reset_index(drop=True) for joined in joins]
    assert list(got[0].columns) == list(got[1].columns) == [*df.columns, "customer_name", "customer_country"]
    assert as_rows(got[0]) == as_rows(got[1])
    assert got[0].customer_name.notna().sum() > 500
    info = lookups(joins[0])[0]
    assert info.mismatched_values == 0  # a broadcast store has no misfit: known to be none


def test_a_broadcast_store_gives_nested_and_timestamp_columns_as_the_lookup_does(spark: SparkSession) -> None:
    df = spark.createDataFrame(list(enumerate(RICH_KEYS)), "i int, k string").repartition(2)
    joins = [
        lookup_join(df, store="rich", on="k", value_schema=RICH_SCHEMA, broadcast_bytes=size)
        for size in (1 << 20, 0)
    ]
    assert ["BroadcastHashJoin" in physical_plan(joined) for joined in joins] == [True, False]
    assert fields(joins[0]) == fields(joins[1])
    broadcast, looked_up = (sorted(joined.collect(), key=lambda row: row.i) for joined in joins)
    assert broadcast == looked_up
    by_key = {row.k: row for row in broadcast}
    assert by_key["k05"].tags == ["t5", "x"][:2]
    assert by_key["k05"].size.w == 1.25
    assert by_key["k05"].n == 2**40 + 5
    assert by_key["k\u00e9"].name == "e"
    assert by_key["k61"].name == "partial"
    assert by_key["k60"].name is None
    assert by_key["absent"].name is None
    assert by_key[None].name is None


def _join_keys(plan: str) -> list[str]:
    """The probe-side keys of each broadcast hash join in ``plan``."""
    return re.findall(r"BroadcastHashJoin \[([^\]]*)\]", plan)


def test_a_broadcast_join_compares_the_row_key_itself_by_its_bytes(spark: SparkSession) -> None:
    keys = ["k05", "K05", "k\u00e9", "k61", None, "absent"]
    rows = [(i, k, None if k is None else k.encode()) for i, k in enumerate(keys)]
    df = spark.createDataFrame(rows, "i int, k string, b binary")
    columns: dict[str, Any] = {"string": "k", "binary": "b"}
    if PYSPARK_VERSION >= (4, 0):  # a case-blind collation must not make "K05" find "k05"
        columns["case-blind"] = F.collate(F.col("k"), "UTF8_LCASE")
    for kind, on in columns.items():
        joins = [
            lookup_join(df, store="rich", on=on, value_schema=RICH_SCHEMA, broadcast_bytes=size)
            for size in (1 << 20, 0)
        ]
        [probed] = _join_keys(physical_plan(joins[0]))
        # The row's own key column is hashed, not a binary copy made of it row by row.
        assert ("as binary" in probed) == (kind == "case-blind"), (kind, probed)
        broadcast, looked_up = (sorted(joined.collect(), key=lambda row: row.i) for joined in joins)
        assert broadcast == looked_up, kind
        found = [row.name for row in broadcast]
        assert found == ["r5", None, "e", "partial", None, None], kind


def test_one_to_many_index_join_matches_a_pandas_merge(spark: SparkSession, service: Service) -> None:
    df, frame = orders(spark)
    joined = lookup_join(
        df, store="positions", index="by_ticker", on="symbol", value_schema=POSITION_SCHEMA, prefix="pos_"
    )
    assert joined.columns == ["order_id", "symbol", "pos_key", "pos_ticker", "pos_quantity", "pos_account"]
    expected = frame.merge(
        positions_frame(service.table("positions")), how="left", left_on="symbol", right_on="pos_ticker"
    )
    assert len(expected) > 3 * len(frame) // 2  # one-to-many: several positions per ticker
    by = ["order_id", "pos_key"]
    assert sorted_rows(joined.toPandas(), by) == sorted_rows(expected, by)
    (info,) = lookups(joined)
    assert (info.store, info.index, info.exact) == ("positions", "by_ticker", False)


def fail_first_attempts() -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A step passing rows through with the task's attempt number, failing every first attempt."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext  # noqa: PLC0415  # on the executor

        context = TaskContext.get()
        assert context is not None
        attempt = context.attemptNumber()
        for batch in batches:
            yield batch.append_column("attempt", pa.array([attempt] * batch.num_rows, pa.int32()))
        if attempt == 0:
            raise RuntimeError("injected failure of a first task attempt")

    return run


def test_a_consistent_join_gives_the_same_rows_across_retries_while_the_dimension_changes(
    spark: SparkSession, service: Service
) -> None:
    df, frame = orders(spark, 200)

    def join(positions: dict[str, Any], tickers: dict[str, Any]) -> DataFrame:
        with_positions = lookup_join(
            df, store="positions", index="by_ticker", on="symbol", value_schema=POSITION_SCHEMA,
            prefix="pos_", **positions,
        )  # fmt: skip
        return lookup_join(
            with_positions, store="tickers", on="symbol", value_schema="price double", prefix="ticker_",
            **tickers,
        )  # fmt: skip

    service.call("change", on=True)
    try:
        first = join({"consistent": True}, {"consistent": True})
        pinned = {info.store: info.position for info in lookups(first)}
        assert all(info.exact for info in lookups(first))
        assert first.schema["pos_key"].metadata["statestore"]["as_of"] == pinned["positions"]
        clean = first.toPandas()
        # The same join rerun as of the reported positions, every task failing once and retried.
        again = join({"as_of": pinned["positions"]}, {"as_of": pinned["tickers"]})
        schema = StructType([*again.schema.fields, StructField("attempt", IntegerType())])
        retried = again.mapInArrow(fail_first_attempts(), schema).toPandas()
        with StatestoreClient(service.url, token=service.token) as client:
            moved_on = client.position("positions")
    finally:
        service.call("change", on=False)
    assert set(retried.pop("attempt")) == {1}  # every row comes from a retried task
    by = ["order_id", "pos_key"]
    assert sorted_rows(retried, by) == sorted_rows(clean, by)
    # The dimension did change meanwhile, and the rows are those of the pinned positions.
    assert str(moved_on) != pinned["positions"]
    positions = positions_frame(service.table("positions", pinned["positions"]))
    prices = pd.DataFrame(
        [(k, v["price"]) for k, v in service.table("tickers", pinned["tickers"]).items() if "price" in v],
        columns=["symbol", "ticker_price"],
    )
    expected = frame.merge(positions, how="left", left_on="symbol", right_on="pos_ticker").merge(
        prices, on="symbol", how="left"
    )
    assert sorted_rows(clean, by) == sorted_rows(expected, by)


def test_the_lookup_udf_gives_what_the_join_gives(spark: SparkSession) -> None:
    products = lookup_udf(store="products", value_schema=PRODUCT_SCHEMA)
    keys = [f"p{i:03d}" for i in range(170, 210)] + ["bad2", None]
    ids = spark.createDataFrame([(k,) for k in keys], "product_id string")
    # Tiny Arrow batches: answers must still line up with rows when batches are looked up in groups.
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "7")
    try:
        rows = ids.withColumn("product", products(F.col("product_id"))).collect()
        joined = lookup_join(ids, store="products", on="product_id", value_schema=PRODUCT_SCHEMA).collect()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    got = {row.product_id: (row.product.asDict() if row.product is not None else None) for row in rows}
    assert got == {key: live_product(key) for key in keys}
    as_joined = {r.product_id: None if r.name is None else r.asDict() for r in joined}
    assert {k: None if v is None else {"product_id": k, **v} for k, v in got.items()} == as_joined
    texts = lookup_udf(store="customers")  # no schema: the JSON documents as text
    (row,) = ids.limit(1).select(texts(F.lit("c01")).alias("c")).collect()
    assert '"customer 1"' in row.c
    if CONNECT:
        with pytest.raises(UnsupportedSparkError, match="lookup_join with misfit_column"):
            _ = products.info.mismatched_values
    else:
        assert products.info.mismatched_values == 1  # bad2, counted by the accumulator


def test_values_not_fitting_the_schema_are_null_marked_and_counted(spark: SparkSession) -> None:
    df = spark.createDataFrame([("bad1",), ("bad2",), ("bad1",), ("p001",), ("zzz",)], "product_id string")
    marked = lookup_join(
        df, store="products", on="product_id", value_schema=PRODUCT_SCHEMA, misfit_column="misfit"
    )
    rows = sorted((r.product_id, r.name, r.price, r.misfit) for r in marked.collect())
    assert rows == [
        ("bad1", None, None, True),
        ("bad1", None, None, True),
        ("bad2", None, None, True),
        ("p001", "product 1", 1.25, False),
        ("zzz", None, None, False),
    ]
    plain = lookup_join(df, store="products", on="product_id", how="inner", value_schema=PRODUCT_SCHEMA)
    assert plain.columns == ["product_id", "name", "price", "category"]
    assert sorted(r.product_id for r in plain.collect()) == ["bad1", "bad1", "bad2", "p001"]
    for result in (marked, plain):
        (info,) = lookups(result)
        if COUNTS_MISFITS:
            assert info.mismatched_values == 3
        else:
            with pytest.raises(UnsupportedSparkError, match=r"PySpark 3\.5.*misfit_column"):
                _ = info.mismatched_values


def test_a_lookup_asks_spark_for_its_input_columns_once_and_a_chained_one_not_at_all(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    purchases = purchases_frame(200)
    df = spark.createDataFrame(purchases)
    for ddl in (PRODUCT_SCHEMA, CUSTOMER_SCHEMA):  # before PySpark 4.0 parsed by Spark, once a process
        parse_struct(spark, ddl)
    frame_type = type(df)
    asked: list[str] = []

    def counted(name: str, original: Any) -> property:
        # Under Spark Connect each is an analysis of the whole plan on the server (the lookups'
        # Python functions included); counted when the client asks, not PySpark's own code.
        def get(self: DataFrame) -> Any:
            if "/clients/spark/" in sys._getframe(1).f_code.co_filename:
                asked.append(name)
            return original.__get__(self, type(self))  # a property, or a cached one

        return property(get)

    for name in ("schema", "columns", "dtypes"):
        monkeypatch.setattr(frame_type, name, counted(name, frame_type.__dict__[name]))
    with_products = lookup_join(
        df, store="products", on="product_id", value_schema=PRODUCT_SCHEMA, prefix="product_"
    )
    assert asked == ["schema"]  # the input's columns: the key's type, clashes, what the task keeps
    asked.clear()
    invoices = lookup_join(
        with_products, store="customers", on="customer_id", value_schema=CUSTOMER_SCHEMA, prefix="customer_"
    )
    assert asked == []  # a lookup's result knows its columns
    monkeypatch.undo()
    got = invoices.toPandas().sort_values("purchase_id").reset_index(drop=True)
    expected = expected_invoices(purchases, "left")
    assert list(got.columns) == list(expected.columns)
    assert as_rows(got) == as_rows(expected)


def test_planning_a_lookup_reads_the_session_conf_in_two_round_trips_under_connect(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    # Under Spark Connect every conf read is a round trip to the server; classic ones read the
    # local JVM's conf, one key at a time.
    owner, name = (type(spark.client), "config") if CONNECT else (type(spark.conf), "get")  # type: ignore[attr-defined]
    original = getattr(owner, name)

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        if "/clients/spark/" in sys._getframe(1).f_code.co_filename:  # the client's, not PySpark's own
            asked.append(name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    df = spark.createDataFrame([("p001",)], "product_id string")
    joined = lookup_join(df, store="products", on="product_id", value_schema=PRODUCT_SCHEMA)
    # The URL and the token (or its file), then the TLS files: six keys, in two reads under Connect.
    assert len(asked) == (2 if CONNECT else 6)
    monkeypatch.undo()
    assert [row.name for row in joined.collect()] == ["product 1"]


def test_a_broadcast_store_goes_to_spark_once_a_session_and_is_freed_with_its_last_dataframe(
    spark: SparkSession, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []

    def counted(session: SparkSession, table: pa.Table, schema: StructType) -> DataFrame:
        made.append(schema.simpleString())
        return kept_frame(session, table, schema)

    monkeypatch.setattr(broadcast, "kept_frame", counted)
    df = spark.createDataFrame(list(enumerate(RICH_KEYS)), "i int, k string")

    def joined() -> DataFrame:  # options of this test's own: no other test planned this read
        return lookup_join(df, store="rich", on="k", value_schema=RICH_SCHEMA, batch_size=1357)

    def kept_views() -> set[str]:
        return {t.name for t in spark.catalog.listTables() if t.name.startswith(VIEW_PREFIX)}

    before = kept_views()
    asked = service.requests()
    runs = [joined() for _ in range(3)]  # planned again at the same position: the same store read
    assert all("BroadcastHashJoin" in physical_plan(run) for run in runs)
    rows = [sorted(run.collect(), key=lambda row: row.i) for run in runs]
    # Planned: the store's info, a sample and one Arrow page read by the driver; planned again: the
    # info only. The jobs ask the service nothing.
    assert service.requests() - asked == {"/v1/stores/{store}": 3, "/v1/stores/{store}/scan": 2}
    assert rows[0] == rows[1] == rows[2]
    assert len(made) == 1  # the table went to Spark once; later jobs use what Spark keeps
    # PySpark 3.5 Connect keeps it as a view (no local checkpoint there); others keep no view.
    views = kept_views() - before
    assert len(views) == (1 if CONNECT and PYSPARK_VERSION < (4, 0) else 0)
    # Once the kept read and every DataFrame made from it are gone, nothing refers to the view.
    plans.clear()
    del runs
    gc.collect()
    dropped = drop_unused_views()
    assert set(dropped) >= views
    assert not views & kept_views()
