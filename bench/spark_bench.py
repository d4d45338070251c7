"""Spark lookup joins against the joins Spark users write today, measured side by side in one run.

(a) ``lookup_join`` of N fact rows against a K-key products store, against a broadcast hash join of
    the same facts with the same products read from Parquet. Target: the lookup join's rows/s at
    least 30% of the broadcast join's.
(b) two chained lookups (products, then customers), against two sort-merge joins of the same data
    (``spark.sql.autoBroadcastJoinThreshold=-1``). Target: faster.

The stores are real: topics on the embedded broker, materialized by ``statestore serve`` (the real
RocksDB ``Store``) in its own process. Every join writes all its rows to Spark's ``noop`` sink;
each contender runs once to warm up, then ``--rounds`` times, and the best round counts::

    python -m bench spark --facts 1000000 --keys 100000 --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from clients.spark import lookup_join
from service.local_broker import LocalBroker, free_port

PRODUCT_SCHEMA = "name string, price double, category string"
CUSTOMER_SCHEMA = "name string, country string"


def _product(i: int) -> bytes:
    return b'{"name": "product %d", "price": %d.99, "category": "c%d", "tags": ["a", "b"]}' % (
        i,
        i % 997,
        i % 13,
    )


def _customer(i: int) -> bytes:
    return b'{"name": "customer %d", "country": "%s"}' % (i, [b"FR", b"DE", b"NL", b"IT"][i % 4])


def _produce(bootstrap: str, topic: str, keys: int, prefix: bytes, value: Callable[[int], bytes]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 3, 1, config={"cleanup.policy": "compact"})]).values():
        future.result(timeout=30)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000}
    )
    for i in range(keys):
        while True:
            try:
                producer.produce(topic, key=prefix + b"%06d" % i, value=value(i))
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60):
        raise RuntimeError(f"records for {topic} were not all delivered")


@contextlib.contextmanager
def _service(config: Path, port: int) -> Iterator[str]:
    """``statestore serve`` in its own process; yields its URL once every store is READY."""
    process = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--config", str(config), "--port", str(port)],
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if process.poll() is not None:
                raise RuntimeError("statestore serve exited before it was ready")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the service did not become ready within 300 s")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def local_session(app_name: str) -> SparkSession:
    """The benches' Spark: ``local[2]``, a 2 GiB driver, small shuffles, no UI, quiet."""
    # Python workers must run this interpreter (the one with the clients' dependencies).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _best_seconds(run: Callable[[], None], rounds: int) -> float:
    run()  # warm-up: JIT, Python workers, file cache
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench spark", description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=1_000_000, help="fact rows (purchases)")
    parser.add_argument("--keys", type=int, default=100_000, help="keys per dimension store")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per contender (best counts)")
    args = parser.parse_args(argv)

    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp, LocalBroker() as broker:
        started = time.perf_counter()
        _produce(broker.bootstrap_servers, "bench-products", args.keys, b"p", _product)
        _produce(broker.bootstrap_servers, "bench-customers", args.keys, b"c", _customer)
        config = Path(tmp) / "statestore.yaml"
        config.write_text(
            f"kafka:\n  bootstrap_servers: {broker.bootstrap_servers!r}\n"
            f"state_dir: {str(Path(tmp) / 'state')!r}\n"
            "stores:\n"
            "  - {name: products, topic: bench-products, value_format: json}\n"
            "  - {name: customers, topic: bench-customers, value_format: json}\n"
        )
        with _service(config, free_port()) as url:
            print(f"stores ready after {time.perf_counter() - started:.1f} s", flush=True)
            spark = local_session("statestore-spark-bench")
            facts_path, products_path, customers_path = (
                str(Path(tmp) / n) for n in ("facts", "products", "customers")
            )
            rng = random.Random(7)
            seed = rng.randrange(1 << 30)
            (
                spark.range(args.facts, numPartitions=2)
                .select(
                    F.col("id").alias("purchase_id"),
                    F.format_string("p%06d", (F.rand(seed) * args.keys).cast("int")).alias("product_id"),
                    F.format_string("c%06d", (F.rand(seed + 1) * args.keys).cast("int")).alias("customer_id"),
                    (F.col("id") % 5 + 1).alias("quantity"),
                )
                .write.parquet(facts_path)
            )
            products_rows = [
                (f"p{i:06d}", f"product {i}", i % 997 + 0.99, f"c{i % 13}") for i in range(args.keys)
            ]
            spark.createDataFrame(products_rows, "product_id string, " + PRODUCT_SCHEMA).write.parquet(
                products_path
            )
            countries = ["FR", "DE", "NL", "IT"]
            customer_rows = [(f"c{i:06d}", f"customer {i}", countries[i % 4]) for i in range(args.keys)]
            spark.createDataFrame(customer_rows, "customer_id string, " + CUSTOMER_SCHEMA).write.parquet(
                customers_path
            )

            facts = spark.read.parquet(facts_path)
            products = spark.read.parquet(products_path).withColumnRenamed("name", "product_name")
            customers = spark.read.parquet(customers_path).withColumnRenamed("name", "customer_name")

            def sink(df: DataFrame) -> Callable[[], None]:
                return lambda: df.write.format("noop").mode("overwrite").save()

            def one_lookup() -> DataFrame:
                return lookup_join(
                    facts,
                    store="products",
                    on="product_id",
                    url=url,
                    value_schema=PRODUCT_SCHEMA,
                    prefix="product_",
                )

            def two_lookups() -> DataFrame:
                return lookup_join(
                    one_lookup(),
                    store="customers",
                    on="customer_id",
                    url=url,
                    value_schema=CUSTOMER_SCHEMA,
                    prefix="customer_",
                )

            spark.conf.set("spark.sql.autoBroadcastJoinThreshold", str(64 * 1024 * 1024))
            broadcast = facts.join(F.broadcast(products), "product_id", "left")
            results["broadcast hash join"] = _best_seconds(sink(broadcast), args.rounds)
            results["lookup_join"] = _best_seconds(sink(one_lookup()), args.rounds)
            results["two chained lookup_joins"] = _best_seconds(sink(two_lookups()), args.rounds)
            spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
            merge = facts.join(products, "product_id", "left").join(customers, "customer_id", "left")
            if "SortMergeJoin" not in merge._jdf.queryExecution().executedPlan().toString():
                raise RuntimeError("the baseline is not a sort-merge join")
            results["two sort-merge joins"] = _best_seconds(sink(merge), args.rounds)
            spark.stop()

    print(f"\n{args.facts:,} fact rows, {args.keys:,} keys per dimension, best of {args.rounds} rounds")
    for name, seconds in results.items():
        print(f"  {name:<26} {seconds:7.2f} s  {args.facts / seconds / 1e6:6.2f} M rows/s")
    ratio = results["broadcast hash join"] / results["lookup_join"]
    speedup = results["two sort-merge joins"] / results["two chained lookup_joins"]
    print(f"  lookup_join / broadcast join rows/s: {ratio:.0%} (target >= 30%)")
    print(f"  two lookups vs two sort-merge joins: {speedup:.2f}x faster (target > 1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
