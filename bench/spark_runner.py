"""One contender set of ``python -m bench spark``, in the interpreter of one PySpark version.

Client side only (PySpark and ``clients.spark``), so it runs in an environment without the server,
e.g. the PySpark 3.5 one ``make test`` builds. ``bench/spark_bench.py`` starts it once per PySpark
version and session kind, against the same stores, and prints the results side by side; it prints
one JSON line of seconds per contender.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import random
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from clients.spark import lookup_join
from clients.spark.compat import is_connect
from tests.support.spark_session import local_session

PRODUCT_SCHEMA = "name string, price double, category string"
CUSTOMER_SCHEMA = "name string, country string"


def round_seconds(runs: dict[str, Callable[[], None]], rounds: int) -> dict[str, list[float]]:
    """Each contender's seconds in each of ``rounds`` rounds, the rounds interleaved (one of each in
    turn), so a spell of load from elsewhere on the machine falls on every contender alike. Each
    round runs them in an order of its own (shuffled, the same from run to run), so none always runs
    right after the same other one: the garbage a job leaves is collected in the next."""
    for run in runs.values():
        run()  # warm-up: JIT, Python workers, file cache
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for turn in range(rounds):
        random.Random(turn).shuffle(names)
        for name in names:
            started = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - started)
    return times


def best_seconds(runs: dict[str, Callable[[], None]], rounds: int) -> dict[str, float]:
    """Each contender's best of ``rounds`` interleaved rounds (:func:`round_seconds`)."""
    return {name: min(seconds) for name, seconds in round_seconds(runs, rounds).items()}


def join_strategies(df: DataFrame) -> list[str]:
    """The join operators of ``df``'s physical plan (``explain`` prints it, on classic and Connect)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        df.explain()
    return re.findall(
        r"(BroadcastHashJoin|SortMergeJoin|ShuffledHashJoin|BroadcastNestedLoopJoin)", printed.getvalue()
    )


def _passed(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Spark's Arrow batches back as they came: the cost of taking the rows through Python at all."""
    yield from batches


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

    def one_lookup(**options: Any) -> DataFrame:
        return lookup_join(
            facts, store="products", on="product_id", url=args.url, value_schema=PRODUCT_SCHEMA,
            prefix="product_", **options,
        )  # fmt: skip

    def two_lookups(**options: Any) -> DataFrame:
        return lookup_join(
            one_lookup(**options), store="customers", on="customer_id", url=args.url,
            value_schema=CUSTOMER_SCHEMA, prefix="customer_", **options,
        )  # fmt: skip

    # Spark's defaults decide the baselines' strategy (a 100k-row dimension is broadcast); with
    # broadcast off, the sort-merge joins a job would get for dimensions above the threshold.
    spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")
    broadcast = facts.join(products, "product_id", "left")
    two_broadcasts = broadcast.join(customers, "customer_id", "left")
    plans = {
        "broadcast join": join_strategies(broadcast),
        "two broadcast joins": join_strategies(two_broadcasts),
    }
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    merge = facts.join(products, "product_id", "left").join(customers, "customer_id", "left")
    plans["two sort-merge joins"] = join_strategies(merge)
    spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")
    for name, found in plans.items():
        wanted = "SortMergeJoin" if "sort-merge" in name else "BroadcastHashJoin"
        if not found or set(found) != {wanted}:
            raise RuntimeError(f"the {name} contender plans {found}, not {wanted}")

    def sort_merge() -> None:
        # The plan is fixed when the action runs: broadcast off only for this contender.
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
        try:
            sink(merge)()
        finally:
            spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")

    afresh_runs = itertools.count(1)

    def planned_each_run(lookup: Callable[..., DataFrame], afresh: bool = False) -> Callable[[], None]:
        # Planned anew at an unchanged store, a lookup is given the read planned before (the
        # driver keeps it: clients.spark.plan_cache) and its tasks find the stores where the last
        # run left them. ``afresh``: as when the store moved since the last run, nothing kept
        # serves: options of its own every run (a timeout a millisecond longer, which changes
        # nothing else) make the driver plan the read anew, without dropping what it keeps for
        # the other contenders.
        def run() -> None:
            options = {"timeout": 30.0 + next(afresh_runs) / 1000} if afresh else {}
            sink(lookup(**options))()

        return run

    rounds = round_seconds(
        {
            "broadcast join": sink(broadcast),
            "lookup_join": sink(one_lookup()),
            "lookup_join, planned per run": planned_each_run(one_lookup),
            "lookup_join, read afresh per run": planned_each_run(one_lookup, afresh=True),
            "lookup_join, looked up by the tasks": sink(one_lookup(broadcast_bytes=0)),
            "two broadcast joins": sink(two_broadcasts),
            "two chained lookup_joins": sink(two_lookups()),
            "two lookup_joins, planned per run": planned_each_run(two_lookups),
            "two lookup_joins, read afresh per run": planned_each_run(two_lookups, afresh=True),
            "two lookup_joins, looked up by the tasks": sink(two_lookups(broadcast_bytes=0)),
            "two sort-merge joins": sort_merge,
            "mapInArrow pass-through": sink(facts.mapInArrow(_passed, facts.schema)),
        },
        args.rounds,
    )
    import pyspark  # noqa: PLC0415

    kind = "connect" if is_connect(spark) else "classic"
    best = {name: min(seconds) for name, seconds in rounds.items()}
    print(json.dumps({"pyspark": pyspark.__version__, "session": kind, "rounds": rounds, **best}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
