"""One contender set of ``python -m bench spark``, in the interpreter of one PySpark version.

Client side only (PySpark and ``clients.spark``), so it runs in an environment without the server,
e.g. the PySpark 3.5 one ``make test`` builds. ``bench/spark_bench.py`` starts it once per PySpark
version and session kind, against the same stores, and prints the results side by side; it prints
one JSON line of seconds per contender.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from clients.spark import lookup_join
from clients.spark.compat import is_connect
from tests.support.spark_session import local_session

PRODUCT_SCHEMA = "name string, price double, category string"
CUSTOMER_SCHEMA = "name string, country string"


def best_seconds(run: Callable[[], None], rounds: int) -> float:
    run()  # warm-up: JIT, Python workers, file cache
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def session(connect: str | None) -> SparkSession:
    if connect:
        return SparkSession.builder.remote(connect).getOrCreate()
    return local_session("local[2]", "2g")


def data(spark: SparkSession, folder: Path, facts: int, keys: int) -> tuple[DataFrame, DataFrame, DataFrame]:
    """The facts and both dimensions as Parquet (written once, the same for every run)."""
    paths = {name: str(folder / name) for name in ("facts", "products", "customers")}
    if not (folder / "facts").exists():
        (
            spark.range(0, facts, 1, 2)
            .select(
                F.col("id").alias("purchase_id"),
                F.format_string("p%06d", (F.rand(7) * keys).cast("int")).alias("product_id"),
                F.format_string("c%06d", (F.rand(8) * keys).cast("int")).alias("customer_id"),
                (F.col("id") % 5 + 1).alias("quantity"),
            )
            .write.parquet(paths["facts"])
        )
        spark.range(0, keys, 1, 2).select(
            F.format_string("p%06d", "id").alias("product_id"),
            F.format_string("product %d", "id").alias("name"),
            (F.col("id") % 997 + 0.99).alias("price"),
            F.format_string("c%d", F.col("id") % 13).alias("category"),
        ).write.parquet(paths["products"])
        names = F.array(*(F.lit(c) for c in ("FR", "DE", "NL", "IT")))
        countries = F.element_at(names, (F.col("id") % 4 + 1).cast("int"))
        spark.range(0, keys, 1, 2).select(
            F.format_string("c%06d", "id").alias("customer_id"),
            F.format_string("customer %d", "id").alias("name"),
            countries.alias("country"),
        ).write.parquet(paths["customers"])
    facts_df = spark.read.parquet(paths["facts"])
    products = spark.read.parquet(paths["products"]).withColumnRenamed("name", "product_name")
    customers = spark.read.parquet(paths["customers"]).withColumnRenamed("name", "customer_name")
    return facts_df, products, customers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_runner", description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--connect", default=None, help="a Spark Connect URL (sc://...); default: classic")
    parser.add_argument("--data", type=Path, required=True, help="folder of the Parquet inputs")
    parser.add_argument("--facts", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    spark = session(args.connect)
    facts, products, customers = data(spark, args.data, args.facts, args.keys)

    def sink(df: DataFrame) -> Callable[[], None]:
        return lambda: df.write.format("noop").mode("overwrite").save()

    def one_lookup() -> DataFrame:
        return lookup_join(
            facts, store="products", on="product_id", url=args.url, value_schema=PRODUCT_SCHEMA,
            prefix="product_",
        )  # fmt: skip

    def two_lookups() -> DataFrame:
        return lookup_join(
            one_lookup(), store="customers", on="customer_id", url=args.url, value_schema=CUSTOMER_SCHEMA,
            prefix="customer_",
        )  # fmt: skip

    results: dict[str, float] = {}
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", str(64 * 1024 * 1024))
    broadcast = facts.join(F.broadcast(products), "product_id", "left")
    results["broadcast hash join"] = best_seconds(sink(broadcast), args.rounds)
    results["lookup_join"] = best_seconds(sink(one_lookup()), args.rounds)
    results["two chained lookup_joins"] = best_seconds(sink(two_lookups()), args.rounds)
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    merge = facts.join(products, "product_id", "left").join(customers, "customer_id", "left")
    results["two sort-merge joins"] = best_seconds(sink(merge), args.rounds)
    import pyspark  # noqa: PLC0415

    kind = "connect" if is_connect(spark) else "classic"
    print(json.dumps({"pyspark": pyspark.__version__, "session": kind, **results}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
