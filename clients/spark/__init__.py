"""PySpark lookup joins against statestore: executors look keys up over HTTP, no shuffle, no broadcast.

Two entry points sharing batching, dedupe, caching and position pinning::

    from clients.spark import lookup_join, lookup_udf

    enriched = lookup_join(purchases, store="products", on="product_id", url=URL,
                           value_schema="name string, price double", prefix="product_")
    products = lookup_udf(store="products", url=URL, value_schema="name string, price double")
    purchases.withColumn("product", products(col("product_id")))

The store's position is read once on the driver when the lookup is planned; every task demands
at least that position (``min_position``), so a job never sees data older than its start. With
``consistent=True`` (or ``as_of=`` a position from an earlier run) every read is exactly as of that
position, so task retries, speculative tasks and reruns all read the same table (the store must keep
history). The position is logged and kept in the new columns' metadata (see :func:`lookups`).

The service URL and token can be set once per session in the Spark conf (``spark.statestore.url``,
``spark.statestore.token`` or ``spark.statestore.authFile``); ``url=`` and ``token=`` override them.
``on=`` is a column name or any Column expression (``F.concat_ws(":", "region", "id")``).
:func:`read_store` reads a whole store as a DataFrame pinned at one position.

Modules: ``join`` (:func:`lookup_join`), ``udf`` (:func:`lookup_udf`), ``options`` (:class:`LookupOptions`,
what both ask for), ``plan`` (the driver side), ``tasks`` (the executor side), ``read`` and ``source``
(a whole store as a DataFrame), ``compat`` (what differs between Spark versions).

Runs on PySpark 3.5 to the newest 4.x, on classic sessions and on Spark Connect (see
:mod:`clients.spark.compat` for what differs).

One-to-many lookups go through a store's index: ``lookup_join(tickers, store="positions",
index="by_ticker", on="symbol", ...)`` gives one row per position of each ticker, with the
position's key in column ``prefix + "key"``.
"""

from clients.spark.join import lookup_join, lookups
from clients.spark.options import LookupOptions
from clients.spark.plan import LookupInfo
from clients.spark.read import read_store
from clients.spark.register import register_data_source
from clients.spark.udf import METADATA_KEY, LookupUDF, lookup_udf

__all__ = [
    "METADATA_KEY",
    "LookupInfo",
    "LookupOptions",
    "LookupUDF",
    "lookup_join",
    "lookup_udf",
    "lookups",
    "read_store",
    "register_data_source",
]
