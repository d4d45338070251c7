"""Where one Spark lookup-join task spends its time: the task function alone, without Spark, profiled.

Runs ``clients.spark.tasks.join_task`` (what ``mapInArrow`` runs on an executor) over the Arrow
batches one task of ``python -m bench spark`` receives (``--rows`` fact rows in Spark's 10,000-row
batches, random keys among ``--keys``), against the same stores served by ``statestore serve`` in
its own process. Prints the task's seconds for one lookup and for two chained lookups, each task
starting in a fresh Python worker (nothing kept from earlier tasks), then two chained lookups again
in a worker that ran the same lookups before (the stores it read whole kept, as a reused Spark
Python worker keeps them), then the functions that took the most time in a fresh worker's two
chained lookups (cProfile, own time, main thread)::

    python -m bench spark_task --rows 500000 --keys 100000

``--scan-bytes 0`` fetches every key by batch gets, as lookups did before they read whole stores.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.spark_bench import _customer, _product, served_dimensions
from clients import StatestoreClient
from clients.lookup import LookupSpec, whole_stores
from clients.options import ClientOptions
from clients.spark.plan import projection, whole_store_keys
from clients.spark.tasks import JoinStep, join_task
from clients.whole_store import DEFAULT_SCAN_BYTES
from service.local.broker import LocalBroker

SPARK_BATCH_ROWS = 10_000
PRODUCT = pa.struct([("name", pa.string()), ("price", pa.float64()), ("category", pa.string())])
CUSTOMER = pa.struct([("name", pa.string()), ("country", pa.string())])


def facts(rows: int, keys: int) -> list[pa.RecordBatch]:
    """The task's input: the fact columns, then one key column per lookup (as ``lookup_join`` adds)."""
    generator = np.random.default_rng(7)

    def column(prefix: str) -> pa.Array:
        numbers = pa.array(generator.integers(0, keys, rows)).cast(pa.string())
        return pc.binary_join_element_wise(prefix, pc.utf8_lpad(numbers, 6, "0"), "")

    product, customer = column("p"), column("c")
    table = pa.table(
        {
            "purchase_id": pa.array(range(rows), pa.int64()),
            "product_id": product,
            "customer_id": customer,
            "quantity": pa.array([i % 5 + 1 for i in range(rows)], pa.int64()),
            "k1": product,
            "k2": customer,
        }
    )
    return table.to_batches(max_chunksize=SPARK_BATCH_ROWS)


def run_task(
    batches: list[pa.RecordBatch], steps: list[JoinStep], names: list[str], fresh: bool = True
) -> float:
    """Seconds of one task; ``fresh``: in a new Python worker (no stores kept from earlier tasks)."""
    if fresh:
        whole_stores.clear()
    started = time.perf_counter()
    rows = 0
    output: Iterator[pa.RecordBatch] = join_task(steps, 4, names)(iter(batches))
    for batch in output:
        rows += batch.num_rows
    assert rows == sum(b.num_rows for b in batches)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench spark_task", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000, help="fact rows of the task")
    parser.add_argument("--keys", type=int, default=100_000, help="keys per dimension store")
    parser.add_argument("--top", type=int, default=25, help="functions to list")
    parser.add_argument(
        "--scan-bytes",
        type=int,
        default=DEFAULT_SCAN_BYTES,
        help="the lookups' scan_bytes (0: every key by batch gets)",
    )
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="spark-task-bench-") as tmp,
        LocalBroker() as broker,
        served_dimensions(broker.bootstrap_servers, Path(tmp), args.keys) as url,
    ):
        options = ClientOptions(url, timeout=30, deadline=300)
        with StatestoreClient(options) as client:
            infos = {s: client.store(s) for s in ("products", "customers")}
        positions = {s: str(info.position) for s, info in infos.items()}
        # The fields a lookup_join asks for, decided on the driver from a sample of values.
        product_fields = projection([json.loads(_product(i)) for i in range(20)], tuple(PRODUCT.names))
        customer_fields = projection([json.loads(_customer(i)) for i in range(20)], tuple(CUSTOMER.names))
        products = LookupSpec(
            options, "products", positions["products"], "json", PRODUCT, fields=product_fields
        )
        customers = LookupSpec(
            options, "customers", positions["customers"], "json", CUSTOMER, fields=customer_fields
        )
        # What plan_lookup adds: may a task read the store whole, within how many bytes.
        if args.scan_bytes:
            products = replace(
                products, store_keys=whole_store_keys(infos["products"], products), scan_bytes=args.scan_bytes
            )
            customers = replace(
                customers,
                store_keys=whole_store_keys(infos["customers"], customers),
                scan_bytes=args.scan_bytes,
            )
        one = [JoinStep(products, 4, "left", None)]
        two = [*one, JoinStep(customers, 5, "left", None)]
        kept = ["purchase_id", "product_id", "customer_id", "quantity"]
        names_one = [*kept, *(f"product_{n}" for n in PRODUCT.names)]
        names_two = [*names_one, *(f"customer_{n}" for n in CUSTOMER.names)]
        batches = facts(args.rows, args.keys)
        run_task(batches, one, names_one)  # warm-up: the service's caches, imports
        print(f"{args.rows:,} rows, {args.keys:,} keys per store", flush=True)
        print(f"  one lookup:          {run_task(batches, one, names_one):6.2f} s", flush=True)
        print(f"  two chained lookups: {run_task(batches, two, names_two):6.2f} s", flush=True)
        warm = run_task(batches, two, names_two, fresh=False)
        print(f"  two chained lookups, worker used before: {warm:6.2f} s", flush=True)
        whole_stores.clear()
        profile = cProfile.Profile()
        profile.enable()
        run_task(batches, two, names_two)
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
