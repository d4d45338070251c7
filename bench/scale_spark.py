"""The Spark part of ``python -m bench scale``: a lookup join of N facts against the N-key store.

Facts (``purchase_id``, ``product_id`` drawn uniformly from the table's keys, ``quantity``) are
written to Parquet first; every join writes all its rows to Spark's ``noop`` sink. Compared in the
same session: ``lookup_join`` against the running service, and a broadcast hash join of the same
facts with the same products read from Parquet, when the products table is at most
``broadcast_max_rows`` (beyond that the driver would have to hold the whole table).
"""

from __future__ import annotations

import time
from pathlib import Path

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from bench.scale_data import STORE, VALUE_SCHEMA
from bench.scale_support import MIB, PeakMemory, spark_workers_pss
from clients.spark import lookup_join
from tests.support.spark_session import local_session


def _key_of(number: Column) -> Column:
    """The table's key of record ``number``, as ``bench.scale_support.key`` makes it."""
    return F.substring(F.md5(number.cast("string")), 1, 16)


Figures = dict[str, tuple[float | None, str]]


def spark_part(url: str, records: int, facts: int, tmp: Path, broadcast_max_rows: int) -> Figures:
    """Run the joins; the figures by name: (number, text)."""
    spark = local_session("local[2]", "2g", **{"spark.ui.showConsoleProgress": "false"})
    figures: Figures = {"fact rows": (facts, f"{facts:,}")}
    try:
        facts_path, products_path = str(tmp / "facts"), str(tmp / "products")
        partitions = max(2, facts // 1_000_000)
        (
            spark.range(facts, numPartitions=partitions)
            .select(
                F.col("id").alias("purchase_id"),
                _key_of((F.rand(7) * records).cast("int")).alias("product_id"),
                (F.col("id") % 5 + 1).alias("quantity"),
            )
            .write.parquet(facts_path)
        )
        facts_df = spark.read.parquet(facts_path)

        def joined(df: DataFrame) -> DataFrame:
            return lookup_join(
                df, store=STORE, on="product_id", url=url, value_schema=VALUE_SCHEMA, prefix="product_"
            )

        # Warm-up, and a check that Spark's keys are the table's: none of them may miss.
        sample = joined(facts_df.limit(1000))
        missing = sample.filter(F.col("product_name").isNull()).count()
        if missing:
            raise SystemExit(f"{missing} of 1,000 sampled facts found no product: keys disagree")

        with PeakMemory(spark_workers_pss, interval=0.1) as memory:
            started = time.perf_counter()
            joined(facts_df).write.format("noop").mode("overwrite").save()
            seconds = time.perf_counter() - started
        figures["lookup_join rows/s"] = (facts / seconds, f"{facts / seconds:,.0f} ({seconds:.1f} s)")
        figures["Python workers' peak PSS (MiB)"] = (memory.peak / MIB, f"{memory.peak / MIB:,.0f}")

        if records > broadcast_max_rows:
            figures["broadcast join rows/s"] = (None, f"not run: {records:,} products > --broadcast-max-rows")
            return figures
        (
            spark.range(records, numPartitions=max(2, records // 2_000_000))
            .select(
                _key_of(F.col("id")).alias("product_id"),
                F.concat(F.lit("product "), F.col("id").cast("string")).alias("name"),
                (F.col("id") % 997 + 0.99).alias("price"),
                F.concat(F.lit("c"), (F.col("id") % 13).cast("string")).alias("category"),
            )
            .write.parquet(products_path)
        )
        products = spark.read.parquet(products_path)
        started = time.perf_counter()
        try:
            facts_df.join(F.broadcast(products), "product_id", "left").write.format("noop").mode(
                "overwrite"
            ).save()
        except Exception as exc:  # the table no longer fits the driver: that is the finding
            figures["broadcast join rows/s"] = (None, f"failed: {str(exc).splitlines()[0][:80]}")
            return figures
        broadcast_seconds = time.perf_counter() - started
        rate = facts / broadcast_seconds
        figures["broadcast join rows/s"] = (rate, f"{rate:,.0f} ({broadcast_seconds:.1f} s)")
        share = broadcast_seconds / seconds
        figures["lookup_join / broadcast join"] = (share * 100, f"{share:.0%}")
        return figures
    finally:
        spark.stop()
