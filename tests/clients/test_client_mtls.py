"""The sync and async clients and the Spark join present a client certificate to a service that
takes them (mTLS), given as arguments or, for Spark, in the session conf."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from clients import AsyncStatestoreClient, StatestoreClient, UnauthorizedError
from clients.retry import RetryPolicy
from clients.spark import lookup_join, lookup_udf, read_store
from store import InMemoryStore
from tests.clients.conftest import ServeStores
from tests.support.certificates import Authority, Issued


@dataclasses.dataclass
class Mtls:
    url: str
    server_ca: Path
    etl: Issued


@pytest.fixture
def mtls(serve_stores: ServeStores, products_store: InMemoryStore, tmp_path: Path) -> Mtls:
    server_ca = Authority(tmp_path, "server")
    server = server_ca.server()
    clients = Authority(tmp_path, "clients")
    tls = {"certfile": str(server.cert), "keyfile": str(server.key), "client_ca": str(clients.bundle)}
    auth = {
        "mode": "tokens",
        "certificates": [{"name": "etl", "common_name": "spark-etl", "stores": ["products"]}],
    }
    url = serve_stores({"products": (products_store, "json")}, http={"tls": tls}, auth=auth)
    return Mtls(url, server_ca.bundle, clients.issue("etl", "spark-etl", client=True))


def test_the_sync_client_reads_with_a_certificate_pair_or_one_pem_file(mtls: Mtls, tmp_path: Path) -> None:
    with StatestoreClient(
        mtls.url, verify=str(mtls.server_ca), cert=(str(mtls.etl.cert), mtls.etl.key)
    ) as client:
        assert client.get("products", "p001") == {"name": "product 1", "price": 1.5}
        assert client.get_many("products", ["p002", "nope"]) == [{"name": "product 2", "price": 3.0}, None]
    both = tmp_path / "etl-both.pem"
    both.write_bytes(mtls.etl.cert.read_bytes() + mtls.etl.key.read_bytes())
    with StatestoreClient(mtls.url, verify=mtls.server_ca, cert=both) as client:
        assert client.get("products", "p003") == {"name": "product 3", "price": 4.5}
    with (
        StatestoreClient(mtls.url, verify=mtls.server_ca, retry=RetryPolicy(max_attempts=1)) as anonymous,
        pytest.raises(UnauthorizedError),
    ):
        anonymous.get("products", "p001")
    with pytest.raises(ValueError, match=r"cannot use client certificate .*missing\.pem"):
        StatestoreClient(mtls.url, verify=mtls.server_ca, cert=tmp_path / "missing.pem")


def test_the_async_client_reads_with_a_certificate(mtls: Mtls) -> None:
    async def read() -> list[object]:
        async with AsyncStatestoreClient(
            mtls.url, verify=mtls.server_ca, cert=(mtls.etl.cert, mtls.etl.key)
        ) as client:
            return [await client.get("products", "p001"), *(await client.get_many("products", ["p004"]))]

    assert asyncio.run(read()) == [{"name": "product 1", "price": 1.5}, {"name": "product 4", "price": 6.0}]


# Confs a shared session may hold from other tests (the Spark matrix names its own service and
# token file there): a token sent beside the certificate would be judged alone.
SERVICE_CONFS = ("spark.statestore.url", "spark.statestore.token", "spark.statestore.authFile")


@pytest.fixture
def plain_session(spark: SparkSession) -> Iterator[SparkSession]:
    """``spark`` without any statestore service or token in its conf, restored afterwards."""
    held = {key: spark.conf.get(key, None) for key in SERVICE_CONFS}
    for key in SERVICE_CONFS:
        spark.conf.unset(key)
    yield spark
    for key, value in held.items():
        if value is not None:
            spark.conf.set(key, value)


def test_a_spark_lookup_join_udf_and_read_over_mtls_with_arguments_or_the_session_conf(
    plain_session: SparkSession, mtls: Mtls
) -> None:
    spark = plain_session
    purchases = spark.createDataFrame([(1, "p001"), (2, "p010"), (3, "missing")], "id int, product_id string")
    schema = "name string, price double"
    joined = lookup_join(
        purchases,
        store="products",
        on="product_id",
        url=mtls.url,
        value_schema=schema,
        verify=str(mtls.server_ca),
        cert=(str(mtls.etl.cert), str(mtls.etl.key)),
    )
    rows = sorted(tuple(r) for r in joined.collect())
    assert rows == [
        (1, "p001", "product 1", 1.5),
        (2, "p010", "product 10", 15.0),
        (3, "missing", None, None),
    ]
    products = lookup_udf(
        store="products",
        url=mtls.url,
        value_schema=schema,
        verify=str(mtls.server_ca),
        cert=(str(mtls.etl.cert), str(mtls.etl.key)),
        spark=spark,
    )
    looked_up = purchases.withColumn("product", products(F.col("product_id"))).collect()
    assert sorted((r["id"], r["product"] and tuple(r["product"])) for r in looked_up) == [
        (1, ("product 1", 1.5)),
        (2, ("product 10", 15.0)),
        (3, None),
    ]
    confs = {
        "spark.statestore.caFile": str(mtls.server_ca),
        "spark.statestore.certFile": str(mtls.etl.cert),
        "spark.statestore.keyFile": str(mtls.etl.key),
    }
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        by_conf = lookup_join(purchases, store="products", on="product_id", url=mtls.url, value_schema=schema)
        assert sorted(tuple(r) for r in by_conf.collect()) == rows
        whole = read_store(spark, store="products", url=mtls.url, value_schema=schema, consistent=False)
        assert whole.count() == 250
    finally:
        for key in confs:
            spark.conf.unset(key)
    # Without the certificate the driver is refused before any job runs.
    with pytest.raises(UnauthorizedError):
        lookup_join(
            purchases,
            store="products",
            on="product_id",
            url=mtls.url,
            value_schema=schema,
            verify=str(mtls.server_ca),
        )
