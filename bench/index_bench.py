"""Secondary indexes: lookup rate, and what one index costs on ingest.

Positions keyed by id with a ``ticker`` field (the KIP-213 / blog example). In the same run, each
store variant restores the same topic in its own process, alternating, median of the repeats::

    python -m bench.index_bench --records 300000 --repeat 3

Reported: bootstrap rate without and with one index, on the bulk path (the index is built by a
scan once the bulk load ends) and on the per-batch path (entries maintained in every batch), and
index lookups per second (each lookup a page of up to 100 rows) through ``view.index_scan``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from service.local.broker import LocalBroker
from store import IndexSpec, Store, StoreConfig, StoreTuning

TOPIC = "positions-bench"
PARTITIONS = 3
TICKERS = 500


def _produce(bootstrap: str, records: int) -> None:

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        future.result(timeout=15)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 2_000_000}
    )
    rng = random.Random(7)
    for i in range(records):
        value = json.dumps({"id": i, "ticker": f"T{rng.randrange(TICKERS):04d}", "qty": rng.randrange(1000)})
        while True:
            try:
                producer.produce(TOPIC, key=b"pos-%010d" % i, value=value.encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


def _child(bootstrap: str, records: int, indexed: bool, bulk: bool, lookups: int) -> dict[str, float]:

    tuning = StoreTuning().replace(bulk_load_min_records=100_000 if bulk else 0)
    indexes = (IndexSpec("by_ticker", "ticker"),) if indexed else ()
    with tempfile.TemporaryDirectory() as state_dir:
        config = StoreConfig(
            "bench", TOPIC, {"bootstrap.servers": bootstrap}, Path(state_dir), tuning, indexes
        )
        store = Store(config)
        start = time.perf_counter()
        store.start()
        if not store.wait_until_ready(timeout=900):
            raise SystemExit("store did not become READY")
        seconds = time.perf_counter() - start
        result = {"bootstrap_seconds": seconds}
        if indexed and lookups:
            rng = random.Random(3)
            rows = 0
            start = time.perf_counter()
            with store.view() as view:
                for _ in range(lookups):
                    rows += len(
                        view.index_scan(
                            "by_ticker", f"T{rng.randrange(TICKERS):04d}".encode(), limit=100
                        ).items
                    )
            elapsed = time.perf_counter() - start
            result["lookups_per_second"] = lookups / elapsed
            result["rows_per_second"] = rows / elapsed
        store.stop()
    return result


VARIANTS = {
    "bulk": (False, True),
    "bulk+index": (True, True),
    "batch": (False, False),
    "batch+index": (True, False),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lookups", type=int, default=5_000)
    parser.add_argument("--child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        indexed, bulk = VARIANTS[args.child]
        print(json.dumps(_child(args.bootstrap, args.records, indexed, bulk, args.lookups)))
        return 0

    results: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    with LocalBroker() as broker:
        print(
            f"producing {args.records:,} positions ({TICKERS} tickers, {PARTITIONS} partitions)...",
            flush=True,
        )
        _produce(broker.bootstrap_servers, args.records)
        for round_number in range(args.repeat):
            for name in VARIANTS:
                output = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "bench.index_bench",
                        "--child",
                        name,
                        "--bootstrap",
                        broker.bootstrap_servers,
                        "--records",
                        str(args.records),
                        "--lookups",
                        str(args.lookups),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                result = json.loads(output.strip().splitlines()[-1])
                results[name].append(result)
                rate = args.records / result["bootstrap_seconds"]
                print(f"round {round_number + 1} {name:12s} {rate:>10,.0f} records/s", flush=True)

    def rate(name: str) -> float:
        return args.records / statistics.median(r["bootstrap_seconds"] for r in results[name])

    print()
    print("| bootstrap path | no index (records/s) | one index (records/s) | with index / without |")
    print("|---|---|---|---|")
    for path in ("bulk", "batch"):
        plain, indexed = rate(path), rate(f"{path}+index")
        print(f"| {path} | {plain:,.0f} | {indexed:,.0f} | {indexed / plain:.0%} |")
    lookups = statistics.median(
        r["lookups_per_second"] for r in results["bulk+index"] + results["batch+index"]
    )
    rows = statistics.median(r["rows_per_second"] for r in results["bulk+index"] + results["batch+index"])
    print(f"\nindex lookups: {lookups:,.0f} lookups/s ({rows:,.0f} rows/s, pages of up to 100 rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
