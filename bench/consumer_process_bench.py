"""What running the Kafka client in a child process costs: apply rate and write-to-visible latency.

The store's consumer runs in a child process by default (``engine.consumer_in_child_process``), so
that a crash of librdkafka cannot take the reads with it; polls then cross a pipe. Both ways are
measured side by side in one run, on the same embedded broker, alternating, medians reported::

    python -m bench consumer_process --records 500000 --repeat 3

- ``apply rate``: an embedded store reading a backlog of ``--records`` records (the bootstrap
  bench's: 16 B keys, 100 B values, 3 partitions) through the record-by-record path a READY store
  uses (the bulk restore is off), timed from a tenth of the backlog applied to READY, so the
  child's start is not counted.
- ``latency``: a READY store; one record at a time is produced (``linger.ms`` 0) and flushed, and
  the time until the store's position covers it is taken (``Store.wait_for_position``): what a
  writer waits before a read sees its write. ``--samples`` records, 10 ms apart. The consumers use
  ``fetch.wait.max.ms`` 5: the embedded broker answers an empty fetch only when that wait is over,
  even when a record arrives meanwhile (Kafka answers at once), so the default 500 ms would measure
  the broker.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.bootstrap_bench import PARTITIONS
from bench.bootstrap_bench import TOPIC as BACKLOG
from bench.bootstrap_bench import _produce as produce_backlog
from service.local.broker import LocalBroker
from store import Position, Store, StoreConfig, StoreTuning

LIVE = "consumer-bench-live"
MODES = {"in-process": False, "child-process": True}
_FETCH_WAIT_MS = 5


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(topic, partitions, 1, config={"cleanup.policy": "compact"})]
    ).values():
        future.result(timeout=15)


def _store(bootstrap: str, topic: str, state_dir: str, child_process: bool) -> Store:
    tuning = StoreTuning().replace(bulk_load_min_records=0, consumer_in_child_process=child_process)
    # This broker holds an empty fetch for all of fetch.wait.max.ms (500 ms by default) even when a
    # record arrives meanwhile, which Kafka does not: the latency would be the broker's wait.
    kafka = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": _FETCH_WAIT_MS}
    return Store(StoreConfig("bench", topic, kafka, Path(state_dir), tuning))


def apply_rate(bootstrap: str, records: int, child_process: bool) -> float:
    """Records applied per second through the poll-and-apply step, from a tenth of the backlog on."""
    with tempfile.TemporaryDirectory() as state_dir:
        store = _store(bootstrap, BACKLOG, state_dir, child_process)
        store.start()
        try:
            while store.position().total() < records // 10:
                time.sleep(0.005)
            started, applied = time.perf_counter(), store.position().total()
            if not store.wait_until_ready(timeout=600):
                raise SystemExit("the store did not become READY")
            elapsed = time.perf_counter() - started
            total = store.position().total()
        finally:
            store.stop()
    if total != records:
        raise SystemExit(f"the store's position covers {total} records, expected {records}")
    return (total - applied) / elapsed


def latencies(bootstrap: str, samples: int, child_process: bool) -> list[float]:
    """Seconds from producing one record to the store's position covering it, per sample."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    seen: list[float] = []
    with tempfile.TemporaryDirectory() as state_dir:
        store = _store(bootstrap, LIVE, state_dir, child_process)
        store.start()
        try:
            if not store.wait_until_ready(timeout=60):
                raise SystemExit("the store did not become READY")
            delivered: list[int] = []
            for i in range(samples):
                started = time.perf_counter()
                producer.produce(
                    LIVE, key=b"k%d" % i, value=b"v", on_delivery=lambda _e, m: delivered.append(m.offset())
                )
                producer.flush(10)
                if not store.wait_for_position(Position({0: delivered[-1] + 1}), 10):
                    raise SystemExit(f"record {i} did not become visible within 10 s")
                seen.append(time.perf_counter() - started)
                time.sleep(0.01)
        finally:
            store.stop()
    return seen


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    waits: dict[str, list[float]] = {mode: [] for mode in MODES}
    with LocalBroker() as broker:
        bootstrap = broker.bootstrap_servers
        print(f"producing {args.records:,} records (16 B keys, 100 B values, {PARTITIONS} partitions)...")
        produce_backlog(bootstrap, args.records, False)
        _create(bootstrap, LIVE, 1)
        for round_number in range(args.repeat):
            for mode, child_process in MODES.items():
                rate = apply_rate(bootstrap, args.records, child_process)
                seen = latencies(bootstrap, args.samples, child_process)
                rates[mode].append(rate)
                waits[mode] += seen
                print(
                    f"round {round_number + 1} {mode:13s} {rate:>10,.0f} records/s,"
                    f" latency p50 {statistics.median(seen) * 1000:.2f} ms",
                    flush=True,
                )
    base = statistics.median(rates["in-process"])
    base_p50 = statistics.median(waits["in-process"])
    print()
    print("| consumer | apply records/s (median) | vs in-process | latency p50 | p90 | p99 | p50 ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode in MODES:
        rate, seen = statistics.median(rates[mode]), waits[mode]
        p50 = statistics.median(seen)
        print(
            f"| {mode} | {rate:,.0f} | {rate / base:.0%} | {p50 * 1000:.2f} ms"
            f" | {_percentile(seen, 0.9) * 1000:.2f} ms | {_percentile(seen, 0.99) * 1000:.2f} ms"
            f" | {p50 / base_p50:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
