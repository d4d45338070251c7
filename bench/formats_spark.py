"""The ``spark`` part of ``python -m bench formats``: a Spark lookup join of an ``avro`` store
needing 2 of its 20 fields, against the same join fetching whole values (issue 24's projection
figure, target >= 1.5x).

A classic ``local[2]`` session in this process; the facts (``--facts`` rows, keys drawn at random
among the store's) are written to Parquet once. Two contenders, each planned once and run in every
round (one warm-up run each first), the rounds interleaved, the best round of each counting, every
row written to Spark's ``noop`` sink:

- whole values: ``lookup_join`` without ``value_schema``, the 20 typed columns the service's schema
  gives (``StoreInfo.value_schema``);
- 2 of 20 fields: the same join with ``value_schema="name string, city string"``.

The service's batch gets are counted per contender run (requests, those asking ``fields=``, bytes
answered), so the figure says whether the narrow join had the service project.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

NARROW_SCHEMA = "name string, city string"
"""The 2 of the 20 fields the narrow join needs."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclasses.dataclass
class Traffic:
    """Batch gets the service answered: how many, how many asked ``fields=``, the bytes answered."""

    requests: int = 0
    projected: int = 0
    answered_bytes: int = 0

    def taken(self) -> Traffic:
        """The counts so far, and zero them."""
        counts = dataclasses.replace(self)
        self.requests = self.projected = self.answered_bytes = 0
        return counts


class CountedBatchGets:
    """The service's app, its ``keys:batchGet`` requests counted into a :class:`Traffic`.

    Wraps the whole app (the service answers batch gets on a short path, past its middleware);
    ``state`` is the app's, so ``serve_app`` finds its settings."""

    def __init__(self, app: Any, traffic: Traffic) -> None:
        self.app = app
        self.state = app.state
        self.traffic = traffic

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("keys:batchGet"):
            await self.app(scope, receive, send)
            return
        traffic = self.traffic
        traffic.requests += 1
        traffic.projected += b"fields=" in scope.get("query_string", b"")

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.body":
                traffic.answered_bytes += len(message.get("body", b""))
            await send(message)

        await self.app(scope, receive, counted)


def measure(
    url: str, traffic: Traffic, store: str, records: int, facts: int, rounds: int, folder: Path
) -> None:
    """Run both contenders against ``store`` (keys ``c%09d`` below ``records``) served at ``url``;
    print each one's best seconds, the service's traffic per run, and the ratio."""
    import os  # noqa: PLC0415

    from pyspark.sql import functions as F  # noqa: PLC0415  # Spark only for this part

    from bench.spark_runner import best_seconds  # noqa: PLC0415
    from clients.spark import lookup_join  # noqa: PLC0415
    from tests.support.spark_session import local_session  # noqa: PLC0415

    # Python workers must run this interpreter (the one with the clients' dependencies).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = local_session("local[2]", "2g", **{"spark.ui.showConsoleProgress": "false"})
    try:
        path = str(folder / "facts")
        spark.range(0, facts, 1, 2).select(
            F.col("id").alias("purchase_id"),
            F.format_string("c%09d", (F.rand(7) * records).cast("int")).alias("customer_id"),
        ).write.parquet(path)
        facts_df = spark.read.parquet(path)
        whole = lookup_join(facts_df, store=store, on="customer_id", url=url)
        narrow = lookup_join(facts_df, store=store, on="customer_id", url=url, value_schema=NARROW_SCHEMA)
        print(f"whole values: {len(whole.columns) - 2} columns; 2 of 20 fields: {narrow.columns[2:]}")
        counts: dict[str, list[Traffic]] = {"whole values": [], "2 of 20 fields": []}

        def sink(name: str, df: Any) -> Callable[[], None]:
            def run() -> None:
                traffic.taken()
                df.write.format("noop").mode("overwrite").save()
                counts[name].append(traffic.taken())

            return run

        started = time.perf_counter()
        runs = {"whole values": sink("whole values", whole), "2 of 20 fields": sink("2 of 20 fields", narrow)}
        best = best_seconds(runs, rounds)
        print(f"(rounds took {time.perf_counter() - started:.0f} s)")
    finally:
        spark.stop()
    for name, seconds in best.items():
        last = counts[name][-1]
        print(
            f"  {name:<15} {seconds:6.2f} s, {facts / seconds / 1e6:.2f} M rows/s; service per run:"
            f" {last.requests} batch gets ({last.projected} with fields=), {last.answered_bytes:,} bytes"
        )
    ratio = best["whole values"] / best["2 of 20 fields"]
    print(f"Spark lookup join, 2 of 20 fields / whole values: {ratio:.2f}x (target >= 1.5x)", flush=True)
