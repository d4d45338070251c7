"""read_store, the data source, and the session's conf defaults, on every supported PySpark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from clients import exceptions as e
from clients.spark import lookup_join, read_store, register_data_source
from clients.spark.compat import PYSPARK_VERSION
from tests.clients.shop import CUSTOMER_SCHEMA, PRODUCT_SCHEMA
from tests.clients.spark_matrix.conftest import CONNECT, Service

FIELDS = ("name", "price", "category")


def fitting(document: Any) -> dict[str, Any] | None:
    """What ``PRODUCT_SCHEMA`` makes of a stored document: its fields, or ``None`` if it does not fit."""
    if not isinstance(document, dict) or not isinstance(document.get("name", ""), str):
        return None
    if not isinstance(document.get("price", 0.0), float | int) or isinstance(document.get("price"), bool):
        return None
    return {f: document.get(f) for f in FIELDS}


def rows_of(df: DataFrame, partitions: set[int] | None = None) -> dict[str, dict[str, Any] | None]:
    """The rows read, by key (``None``: the value did not fit); ``partitions`` gets the Spark
    partitions that held rows."""
    rows = {}
    for row in df.withColumn("part", F.spark_partition_id()).collect():
        values = {f: row[f] for f in FIELDS}
        rows[row.key] = None if row.misfit else values
        if partitions is not None:
            partitions.add(row.part)
    return rows


def expected_rows(service: Service, position: str) -> dict[str, dict[str, Any] | None]:
    return {key: fitting(document) for key, document in service.table("products", position).items()}


def test_read_store_reads_one_pinned_version_in_key_ranges(spark: SparkSession, service: Service) -> None:
    schema = PRODUCT_SCHEMA
    df = read_store(spark, store="products", value_schema=schema, partitions=4, misfit_column="misfit")
    pinned = df.schema["key"].metadata["statestore"]["as_of"]
    assert df.columns == ["key", "name", "price", "category", "misfit"]
    partitions: set[int] = set()
    before = rows_of(df, partitions)
    assert before == expected_rows(service, pinned)
    assert len(before) > 180  # products, bad values and seeds; tombstoned ones are gone
    assert len(partitions) >= 2  # the keys were split into ranges read by different partitions
    # The store moves on; a read at the pinned position still answers the same version.
    service.call("products", rows={"p001": {"name": "renamed", "price": 1.0}, "p999": {"name": "new"}})
    again = read_store(spark, store="products", value_schema=schema, position=pinned, misfit_column="misfit")
    assert rows_of(again) == before
    now = rows_of(read_store(spark, store="products", value_schema=schema, misfit_column="misfit"))
    assert now["p001"] == {"name": "renamed", "price": 1.0, "category": None}
    assert "p999" in now
    assert "p999" not in before
    # A store without history can only be read at least at a position.
    with pytest.raises(e.HistoryNotKeptError) as refused:
        read_store(spark, store="customers", value_schema=CUSTOMER_SCHEMA)
    assert any("consistent=False" in note for note in refused.value.__notes__)
    latest = read_store(spark, store="customers", value_schema=CUSTOMER_SCHEMA, consistent=False, prefix="c0")
    assert sorted(r.key for r in latest.collect()) == [f"c{i:02d}" for i in range(10)]


def test_the_data_source_reads_what_read_store_reads(spark: SparkSession, service: Service) -> None:
    if PYSPARK_VERSION < (4, 0):  # no Python data sources before 4.0: a clear error says so
        needs = r"needs PySpark 4\.0 or newer; this is PySpark 3\.5"
        with pytest.raises(e.UnsupportedSparkError, match=needs):
            register_data_source(spark)
        return
    register_data_source(spark)
    pinned = read_store(spark, store="products").schema["key"].metadata["statestore"]["as_of"]
    df = (
        spark.read.format("statestore_http")
        .option("store", "products")
        .option("position", pinned)
        .option("partitions", "3")
        .schema("key string, name string, price double, category string")
        .load()
    )
    got = {r.key: {f: r[f] for f in FIELDS} for r in df.collect()}
    expected = expected_rows(service, pinned)
    assert got == {k: v or dict.fromkeys(FIELDS) for k, v in expected.items()}
    reader = spark.read.format("statestore_http").option("store", "customers")
    whole = reader.option("consistent", "false").load()
    assert whole.columns == ["key", "value"]
    assert '"customer 1"' in {r.key: r.value for r in whole.collect()}["c01"]


def test_the_session_conf_gives_url_and_token_and_arguments_override_it(
    spark: SparkSession, service: Service, tmp_path: Path
) -> None:
    df = spark.createDataFrame([("c01",)], "customer_id string")

    def name(**arguments: Any) -> str:
        joined = lookup_join(
            df, store="customers", on="customer_id", value_schema=CUSTOMER_SCHEMA, planning_deadline=2.0,
            **arguments,
        )  # fmt: skip
        (row,) = joined.collect()
        return str(row.name)

    assert name() == "customer 1"  # URL and token file from the conf
    with pytest.raises(e.UnauthorizedError):
        name(token="wrong")  # token= overrides the conf
    spark.conf.set("spark.statestore.url", "http://127.0.0.1:9")
    try:
        with pytest.raises(e.DeadlineExceededError):
            name()
        assert name(url=service.url) == "customer 1"  # url= overrides the conf
        spark.conf.unset("spark.statestore.url")
        with pytest.raises(ValueError, match=r"pass url= or set spark\.statestore\.url"):
            name()
    finally:
        spark.conf.set("spark.statestore.url", service.url)
    if not CONNECT:  # Connect hides confs named *token* from its clients; the message says so
        spark.conf.set("spark.statestore.token", "wrong")
        try:
            with pytest.raises(e.UnauthorizedError):
                name()  # the token beats the token file
        finally:
            spark.conf.unset("spark.statestore.token")
        return
    token_file = spark.conf.get("spark.statestore.authFile")
    try:
        spark.conf.set("spark.statestore.authFile", str(tmp_path / "missing"))
        with pytest.raises(ValueError, match="cannot be read on the driver"):
            name()
        spark.conf.unset("spark.statestore.authFile")
        with pytest.raises(e.UnauthorizedError) as refused:
            name()
        assert any("spark.statestore.authFile" in note for note in refused.value.__notes__)
    finally:
        spark.conf.set("spark.statestore.authFile", token_file)
