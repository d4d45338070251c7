"""The demo's lookup join: purchases joined with products and customers into invoices, by Spark."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from service.local.demo.console import Console, percent, seconds, table
from service.local.demo.dataset import CUSTOMER_SCHEMA, CUSTOMERS_TOPIC, PRODUCT_SCHEMA, PRODUCTS_TOPIC

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SAMPLE_ROWS = 8
SAMPLE_COLUMNS = (
    ("purchase_id", "purchase"),
    ("product_id", "product"),
    ("product_name", "product name"),
    ("customer_name", "customer"),
    ("customer_country", "country"),
    ("customer_tier", "tier"),
    ("quantity", "qty"),
    ("product_unit_price", "unit price"),
    ("line_total", "line total"),
)
PURCHASE_SCHEMA = "purchase_id string, ts string, product_id string, customer_id string, quantity int"


@dataclasses.dataclass(frozen=True)
class JoinSummary:
    """What one enrichment run produced."""

    rows: int
    products_matched: int
    customers_matched: int
    revenue: float
    elapsed_seconds: float
    positions: dict[str, str]  # store → the position every lookup of the run demanded
    sample: list[dict[str, Any]]


def purchases_frame(spark: SparkSession, purchases: Sequence[dict[str, Any]]) -> DataFrame:
    """The purchases as a DataFrame (via Arrow), ordered by purchase id."""
    import pandas as pd  # type: ignore[import-untyped]  # noqa: PLC0415

    frame = pd.DataFrame.from_records(
        sorted(purchases, key=lambda p: str(p["purchase_id"])),
        columns=["purchase_id", "ts", "product_id", "customer_id", "quantity"],
    )
    frame["quantity"] = frame["quantity"].astype("int32")
    return spark.createDataFrame(frame, PURCHASE_SCHEMA)


def invoices(purchases: DataFrame, url: str, min_position: str | None = None) -> DataFrame:
    """Each purchase with its product and customer looked up in statestore, and its line total.

    Left joins: a purchase whose product or customer the tables do not hold keeps nulls there.
    """
    from pyspark.sql import functions as F  # noqa: PLC0415

    from clients.spark import lookup_join  # noqa: PLC0415

    with_products = lookup_join(
        purchases,
        store=PRODUCTS_TOPIC,
        on="product_id",
        url=url,
        value_schema=PRODUCT_SCHEMA,
        prefix="product_",
        min_position=min_position,
    )
    with_customers = lookup_join(
        with_products,
        store=CUSTOMERS_TOPIC,
        on="customer_id",
        url=url,
        value_schema=CUSTOMER_SCHEMA,
        prefix="customer_",
    )
    return with_customers.withColumn(
        "line_total", F.round(F.col("quantity") * F.col("product_unit_price"), 2)
    )


def run_join(purchases: DataFrame, url: str) -> JoinSummary:
    """Enrich every purchase once, then summarize and sample the invoices.

    The invoices are cached by the first action, so the sample shows rows of the same run (and
    a ``limit`` never cuts a Python worker's output short, which Spark reports as a broken pipe).
    """
    from pyspark.sql import functions as F  # noqa: PLC0415

    from clients.spark import lookups  # noqa: PLC0415

    started = time.monotonic()
    enriched = invoices(purchases, url).persist()
    try:
        totals = enriched.agg(
            F.count(F.lit(1)).alias("rows"),
            F.count("product_name").alias("products"),
            F.count("customer_name").alias("customers"),
            F.sum("line_total").alias("revenue"),
        ).first()
        elapsed = time.monotonic() - started
        assert totals is not None
        sample = [row.asDict() for row in enriched.limit(SAMPLE_ROWS).collect()]
        positions = {info.store: info.position for info in lookups(enriched)}
    finally:
        enriched.unpersist()
    return JoinSummary(
        rows=int(totals["rows"]),
        products_matched=int(totals["products"]),
        customers_matched=int(totals["customers"]),
        revenue=float(totals["revenue"] or 0.0),
        elapsed_seconds=elapsed,
        positions=positions,
        sample=sample,
    )


def sample_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    return table(
        [title for _, title in SAMPLE_COLUMNS], [[row.get(c) for c, _ in SAMPLE_COLUMNS] for row in rows]
    )


def print_summary(console: Console, summary: JoinSummary) -> None:
    console.detail("sample of the invoices:")
    console.block(sample_table(summary.sample))
    console.detail()
    rate = summary.rows / summary.elapsed_seconds if summary.elapsed_seconds else 0.0
    console.detail(
        f"rows enriched: {summary.rows:,} in {seconds(summary.elapsed_seconds)} "
        f"({rate:,.0f} rows/s, 2 lookups a row)"
    )
    for store, matched in (
        (PRODUCTS_TOPIC, summary.products_matched),
        (CUSTOMERS_TOPIC, summary.customers_matched),
    ):
        missing = summary.rows - matched
        console.detail(
            f"match rate {store}: {percent(matched, summary.rows)} "
            f"({matched:,} matched, {missing:,} without a {store[:-1]})"
        )
    console.detail(f"revenue: {summary.revenue:,.2f}")
    for store, position in sorted(summary.positions.items()):
        console.detail(f"pinned position {store}: {position or '(empty)'}")


def lookup_product_purchases(
    purchases: DataFrame, url: str, product_id: str, min_position: str, limit: int = 3
) -> list[dict[str, Any]]:
    """A few invoices of one product, looked up demanding at least ``min_position`` of products."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    few = purchases.where(F.col("product_id") == product_id).limit(limit)
    return [row.asDict() for row in invoices(few, url, min_position=min_position).collect()]
