"""History: what keeping versions costs plain reads, and what one retained version costs on disk.

One topic, two stores restored from it in the same run (one keeping history, one not); then both
take the same stream of updates, and the same latest-value reads are timed on each, alternating::

    python -m bench.history_bench --keys 100000 --updates 300000 --repeat 5

Target (issue 8): reads of the latest value with history kept are at most 10% slower.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from service.local.broker import LocalBroker
from store import HistorySpec, Store, StoreConfig, StoreTuning

TOPIC = "history-bench"
PARTITIONS = 3


def _produce(producer: object, keys: int, count: int, start: int, rng: random.Random) -> None:
    for i in range(count):
        value = os.urandom(100)  # distinct values: identical ones would compress away
        key = b"key-%010d" % rng.randrange(keys) if start else b"key-%010d" % (i % keys)
        while True:
            try:
                producer.produce(TOPIC, key=key, value=value, partition=hash(key) % PARTITIONS)  # type: ignore[attr-defined]
                break
            except BufferError:
                producer.poll(0.05)  # type: ignore[attr-defined]
    producer.flush(120)  # type: ignore[attr-defined]


def _reads_per_second(store: object, keys: list[bytes], batch: int) -> float:
    start = time.perf_counter()
    with store.view() as view:  # type: ignore[attr-defined]
        for i in range(0, len(keys), batch):
            view.get_many(keys[i : i + batch])
    return len(keys) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--updates", type=int, default=300_000)
    parser.add_argument("--reads", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    rng = random.Random(11)
    with LocalBroker() as broker, tempfile.TemporaryDirectory() as state_dir:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
            future.result(timeout=15)
        producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 2_000_000}
        )
        print(f"producing {args.keys:,} keys, then {args.updates:,} updates...", flush=True)
        _produce(producer, args.keys, args.keys, 0, rng)
        # The hot-key cache is off: this measures the engine path both stores share.
        tuning = StoreTuning().replace(read_cache_entries=0)
        kafka = {"bootstrap.servers": bootstrap}
        plain = Store(StoreConfig("plain", TOPIC, kafka, Path(state_dir), tuning))
        versioned = Store(
            StoreConfig(
                "versioned",
                TOPIC,
                kafka,
                Path(state_dir),
                tuning,
                history=HistorySpec(retention_ms=86_400_000),
            )
        )
        for store in (plain, versioned):
            store.start()
            store.wait_until_ready(timeout=600)
        _produce(producer, args.keys, args.updates, 1, rng)
        target = versioned.status().end_offsets
        for store in (plain, versioned):
            while (
                not store.wait_for_position(target, 1.0)
                or store.position().total() < args.keys + args.updates
            ):
                pass
            store.stop()  # flushes: the reads and sizes below see every update in SST files
        plain, versioned = Store(plain.config), Store(versioned.config)
        for store in (plain, versioned):
            store.start()
            store.wait_until_ready(timeout=600)
        time.sleep(2)  # let the last flush settle before sizing
        read_keys = [b"key-%010d" % rng.randrange(args.keys) for _ in range(args.reads)]
        rates: dict[str, list[float]] = {"without history": [], "with history": []}
        for _ in range(args.repeat):
            rates["without history"].append(_reads_per_second(plain, read_keys, 1000))
            rates["with history"].append(_reads_per_second(versioned, read_keys, 1000))
        plain_size = plain.status().size_on_disk_bytes
        versioned_size = versioned.status().size_on_disk_bytes
        versions = args.updates + args.keys  # every update since history began, plus a base version per key
        for store in (plain, versioned):
            store.stop()

    without = statistics.median(rates["without history"])
    with_history = statistics.median(rates["with history"])
    print()
    print("| store | latest-value reads (keys/s, batches of 1,000) |")
    print("|---|---|")
    print(f"| without history | {without:,.0f} |")
    print(f"| with history | {with_history:,.0f} ({with_history / without:.0%} of without) |")
    print(
        f"\nsize on disk: {plain_size / 1e6:.1f} MB without history, {versioned_size / 1e6:.1f} MB with;"
        f" about {(versioned_size - plain_size) / versions:.0f} bytes per retained version"
        " (100 B values, 14 B keys, before compaction)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
