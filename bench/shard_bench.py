"""Sharded stores against one unsharded store of the same topic, measured side by side in one run.

(a) partitioners: keys/s placing keys one by one in Python against Arrow arrays at once, for the
    three partitioners and three key shapes (in-process);
(b) the partitioner check on the apply path: record-by-record restore throughput of an embedded
    store that checks its records' partitions (a sample of each poll) against one given no
    partitioner (no check), same topic, alternating;
(c) disk and memory per shard (``size_on_disk_bytes``, the process's resident memory) against the
    unsharded store. Target: each shard at most 1/N of the unsharded store plus 10%;
(d) batch get keys/s of the client over N shards (URL template, batches split per shard and sent
    together) against the client of the unsharded service, random keys, interleaved slices;
(e) a Spark lookup join (``local[2]``) of F fact rows over N shards against the same join over the
    unsharded service (best of ``--rounds``).

Every service is ``statestore serve`` in its own process (``service.local.shards``)::

    python -m bench shard --keys 300000 --shards 3 --facts 500000 --rounds 3
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from clients import StatestoreClient
from clients.partitioners import PARTITIONERS, place
from service.local.broker import LocalBroker
from service.local.shards import LocalShards

PARTITIONS = 6
SCHEMA = "name string, score double, segment string"


def _key(i: int) -> bytes:
    return b"user-%08d" % i


def _value(i: int) -> bytes:
    return json.dumps(
        {"name": f"user {i}", "score": i % 1000 / 7, "segment": f"s{i % 17}", "tags": ["a", "b", "c"]}
    ).encode()


# -- (a) partitioners ------------------------------------------------------------------------------


def _best(run: Callable[[], object], rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def bench_partitioners(count: int = 10_000) -> list[str]:
    rng = random.Random(3)
    shapes = {
        "uuid (36 B)": [str(uuid.UUID(int=rng.getrandbits(128))).encode() for _ in range(count)],
        "user-N (13 B)": [_key(rng.randrange(10**8)) for _ in range(count)],
        "random 0-40 B": [rng.randbytes(rng.randint(0, 40)) for _ in range(count)],
    }
    lines = [f"{'keys':<15} {'partitioner':<9} {'one by one':>16} {'Arrow array':>16} {'speed-up':>9}"]
    for shape, keys in shapes.items():
        array = pa.array(keys, pa.binary())
        for name, placer in PARTITIONERS.items():
            single = _best(lambda placer=placer, keys=keys: [placer(key, PARTITIONS) for key in keys])
            vector = _best(lambda placer=placer, array=array: placer.partitions(array, PARTITIONS))
            lines.append(
                f"{shape:<15} {name:<9} {count / single:>11,.0f} keys/s {count / vector:>11,.0f} keys/s"
                f" {single / vector:>8.1f}x"
            )
    return lines


# -- the topic and the services ----------------------------------------------------------------------


def _produce(bootstrap: str, topic: str, keys: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, PARTITIONS, 1, config={"cleanup.policy": "compact"})
    for future in admin.create_topics([new]).values():
        future.result(timeout=30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "queue.buffering.max.messages": 1_000_000,
            "partitioner": "murmur2_random",
        }
    )
    for i in range(keys):
        while True:
            try:
                producer.produce(topic, key=_key(i), value=_value(i))
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError(f"records for {topic} were not all delivered")


def _wait_ready(urls: list[str], timeout: float = 600) -> float:
    started = time.monotonic()
    for url in urls:
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"{url} was not ready within {timeout:g} s")
            time.sleep(0.1)
    return time.monotonic() - started


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _held_bytes(info: dict[str, Any]) -> int:
    """What a store holds in memory: its memtables and the block cache it uses."""
    memory = info["memory"]
    return int(memory["memtable_bytes"]) + int(memory["block_cache_usage_bytes"])


def _store_info(url: str, store: str) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(f"{url}/v1/stores/{store}", timeout=10).json()
    return answer


# -- (b) the check on the apply path ------------------------------------------------------------------


def _restore_rate(bootstrap: str, topic: str, state_dir: Path, checked: bool) -> tuple[float, int]:
    """Records/s of a record-by-record restore of ``topic`` by an embedded store, and records checked."""
    from store import RestoreSlots, Store, StoreConfig, StoreSharding, StoreTuning  # noqa: PLC0415

    placer = functools.partial(place, "murmur2") if checked else None
    config = StoreConfig(
        name="users",
        topic=topic,
        kafka={"bootstrap.servers": bootstrap, "fetch.queue.backoff.ms": "10"},
        state_dir=state_dir,
        tuning=StoreTuning().replace(bulk_load_min_records=0),
        sharding=StoreSharding(partitioner="murmur2", placer=placer),
    )
    with Store(config, RestoreSlots(1)) as store:
        started = time.perf_counter()
        if not store.wait_until_ready(600):
            raise RuntimeError(f"the store did not restore: {store.status()}")
        seconds = time.perf_counter() - started
        status = store.status()
    shutil.rmtree(state_dir)
    checks = status.sharding.records_checked if status.sharding else 0
    return status.records_applied_total / seconds, checks


def _check_seconds() -> float:
    """Seconds the check takes on one full poll (10,000 records, a sample of 1,024 checked)."""
    from store.kafka import RecordBatch  # noqa: PLC0415

    batch = RecordBatch.collecting(False, with_partitions=True)
    batch.keys = [_key(i) for i in range(10_000)]
    batch.partitions = [PARTITIONERS["murmur2"](key, PARTITIONS) for key in batch.keys]
    placer = functools.partial(place, "murmur2")
    return _best(lambda: batch.placement(placer, PARTITIONS), rounds=50)


# -- (d) batch gets --------------------------------------------------------------------------------


def _batch_rates(
    clients: dict[str, StatestoreClient], batches: list[pa.Array], seconds: float, rounds: int
) -> dict[str, float]:
    """keys/s per client, in alternating half-second slices (the same background load for each)."""
    counts = dict.fromkeys(clients, 0)
    spent = dict.fromkeys(clients, 0.0)
    for client in clients.values():
        client.get_arrow("users", batches[0])  # warm-up: connections, the sharding
    for _ in range(rounds * max(1, round(seconds / 0.5))):
        for name, client in clients.items():
            started = time.perf_counter()
            done = 0
            while time.perf_counter() - started < 0.5:
                done += len(client.get_arrow("users", batches[(counts[name] + done) % len(batches)]))
            spent[name] += time.perf_counter() - started
            counts[name] += done
    return {name: counts[name] / spent[name] for name in clients}


# -- (e) Spark -------------------------------------------------------------------------------------


def _spark_seconds(urls: dict[str, str], facts: int, keys: int, rounds: int) -> dict[str, float]:
    from pyspark.sql import SparkSession  # noqa: PLC0415
    from pyspark.sql import functions as F  # noqa: PLC0415

    from clients.spark import lookup_join  # noqa: PLC0415

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("statestore-shard-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        frame = spark.range(facts, numPartitions=2).select(
            F.col("id"), F.format_string("user-%08d", (F.rand(11) * keys).cast("int")).alias("user")
        )
        frame = frame.cache()
        frame.count()
        seconds: dict[str, list[float]] = {name: [] for name in urls}
        for url in urls.values():  # warm-up: Python workers, connections
            lookup_join(frame, store="users", on="user", url=url, value_schema=SCHEMA).write.format(
                "noop"
            ).mode("overwrite").save()
        for _ in range(rounds):
            for name, url in urls.items():
                joined = lookup_join(frame, store="users", on="user", url=url, value_schema=SCHEMA)
                started = time.perf_counter()
                joined.write.format("noop").mode("overwrite").save()
                seconds[name].append(time.perf_counter() - started)
        return {name: min(values) for name, values in seconds.items()}
    finally:
        spark.stop()


def _restore_report(bootstrap: str, topic: str, directory: Path, args: argparse.Namespace) -> str:
    """(b): a record-by-record restore with and without the placement check, rounds alternating."""
    restore_rates: dict[bool, list[float]] = {True: [], False: []}
    checks = 0
    for round_number in range(args.rounds):
        # Alternate which goes first: the second restore of a round finds warmer caches.
        for checked in (False, True) if round_number % 2 == 0 else (True, False):
            rate, count = _restore_rate(bootstrap, topic, directory, checked)
            restore_rates[checked].append(rate)
            checks = max(checks, count)
    with_check, without = statistics.median(restore_rates[True]), statistics.median(restore_rates[False])
    per_batch = _check_seconds()
    return (
        f"(b) record-by-record restore of {args.keys:,} records: {with_check:,.0f} records/s checking"
        f" ({checks:,} records checked) vs {without:,.0f} records/s without:"
        f" {with_check / without:.0%} (medians of {args.rounds}, alternating); the check alone:"
        f" {per_batch * 1e3:.2f} ms per 10,000-record poll = {per_batch / 10_000 * without:.1%} of"
        " the restore's time per record"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench shard", description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=300_000, help="keys in the table")
    parser.add_argument("--shards", type=int, default=3, help="shards of the sharded service")
    parser.add_argument("--facts", type=int, default=500_000, help="fact rows of the Spark join")
    parser.add_argument("--batch", type=int, default=5_000, help="keys per batch get")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per client and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians; best for Spark)")
    parser.add_argument("--skip-spark", action="store_true", help="leave out (e)")
    args = parser.parse_args(argv)

    print("(a) placing keys: one by one in Python vs an Arrow array at once (10,000 keys, 6 partitions)")
    for line in bench_partitioners():
        print("  " + line, flush=True)

    report: list[str] = []
    with tempfile.TemporaryDirectory(prefix="shard-bench-") as tmp, LocalBroker() as broker:
        base = Path(tmp)
        topic = "bench-users"
        print(f"\nproducing {args.keys:,} records to {topic} ({PARTITIONS} partitions, murmur2)", flush=True)
        _produce(broker.bootstrap_servers, topic, args.keys)
        report.append(_restore_report(broker.bootstrap_servers, topic, base / "embedded", args))
        store = {"name": "users", "topic": topic, "value_format": "json", "partitioner": "murmur2"}
        # No hot-key read cache: its bound is entries per store, so a full one would compare a
        # shard's keys with the unsharded store's cap instead of with its table.
        config = {
            "kafka": {"bootstrap_servers": broker.bootstrap_servers},
            "stores": [store],
            "engine": {"read_cache_entries": 0},
        }
        _produce(broker.bootstrap_servers, "bench-empty", 0)
        empty = {**config, "stores": [{**store, "topic": "bench-empty"}]}
        with (
            LocalShards(config, args.shards, base / "s", base / "logs-s", log_level="WARNING") as shards,
            LocalShards(config, 1, base / "one", base / "logs-one", log_level="WARNING") as one,
            LocalShards(empty, 1, base / "empty", base / "logs-empty", log_level="WARNING") as baseline,
        ):
            shard_urls = [shards.url_of(s) for s in range(args.shards)]
            ready = _wait_ready([*shard_urls, one.url_of(0), baseline.url_of(0)])
            print(f"all services ready after {ready:.1f} s", flush=True)
            # Memory of serving, not of restoring (a large restore runs in worker processes, a
            # small one in the store's): every process restarts on its volume, then every key is
            # read once, so each block cache holds what its table's reads need.
            for group in (shards, one, baseline):
                for shard in range(group.shards):
                    group.stop_shard(shard)
                    group.start_shard(shard)
            _wait_ready([*shard_urls, one.url_of(0), baseline.url_of(0)])
            every_key = pa.array([_key(i) for i in range(args.keys)], pa.binary())
            # The empty service is read the same way (every key absent), so what serving batches
            # costs a process (Arrow's memory pool, Python's heap) is in the baseline too.
            for url in (shards.url, one.url_of(0), baseline.url_of(0)):
                with StatestoreClient(url, deadline=120) as reader:
                    reader.get_arrow("users", every_key)
            time.sleep(1)
            base_rss = _rss_bytes(baseline.pid(0))
            whole = _store_info(one.url_of(0), "users")
            whole_rss = _rss_bytes(one.pid(0)) - base_rss
            whole_memory = _held_bytes(whole)
            report.append(
                f"(c) unsharded: {whole['size_on_disk_bytes'] / 2**20:,.1f} MiB on disk,"
                f" {whole_rss / 2**20:,.0f} MiB resident above an empty service read alike"
                f" ({base_rss / 2**20:,.0f} MiB), store memory {whole_memory / 2**20:,.1f} MiB,"
                f" ~{whole['approximate_num_keys']:,} keys (every key read once since a restart)"
            )
            target = 1 / args.shards + 0.10
            for shard, url in enumerate(shard_urls):
                info = _store_info(url, "users")
                disk = info["size_on_disk_bytes"] / whole["size_on_disk_bytes"]
                rss = (_rss_bytes(shards.pid(shard)) - base_rss) / whole_rss
                memory = _held_bytes(info) / whole_memory
                report.append(
                    f"    shard {shard} (partitions {info['sharding']['partitions']}): disk"
                    f" {info['size_on_disk_bytes'] / 2**20:,.1f} MiB = {disk:.0%}, resident above empty"
                    f" {rss:.0%}, store memory {memory:.0%} of unsharded (target <= {target:.0%} each)"
                )
            rng = random.Random(5)
            batches = [
                pa.array([_key(rng.randrange(args.keys)) for _ in range(args.batch)], pa.binary())
                for _ in range(40)
            ]
            with (
                StatestoreClient(shards.url, deadline=60) as sharded,
                StatestoreClient(one.url_of(0), deadline=60) as unsharded,
            ):
                rates: dict[str, list[float]] = {"sharded": [], "unsharded": []}
                for _ in range(args.rounds):
                    measured = _batch_rates(
                        {"sharded": sharded, "unsharded": unsharded}, batches, args.seconds, 1
                    )
                    for name, rate in measured.items():
                        rates[name].append(rate)
            medians = {name: statistics.median(values) for name, values in rates.items()}
            report.append(
                f"(d) batch get of {args.batch:,} random keys, one client thread: {args.shards} shards"
                f" {medians['sharded']:,.0f} keys/s, unsharded {medians['unsharded']:,.0f} keys/s:"
                f" {medians['sharded'] / medians['unsharded']:.0%} (medians of {args.rounds})"
            )
            if not args.skip_spark:
                seconds = _spark_seconds(
                    {"sharded": shards.url, "unsharded": one.url_of(0)}, args.facts, args.keys, args.rounds
                )
                report.append(
                    f"(e) Spark lookup_join of {args.facts:,} rows: {args.shards} shards"
                    f" {seconds['sharded']:.2f} s ({args.facts / seconds['sharded'] / 1e3:,.0f}k rows/s),"
                    f" unsharded {seconds['unsharded']:.2f} s"
                    f" ({args.facts / seconds['unsharded'] / 1e3:,.0f}k rows/s):"
                    f" {seconds['unsharded'] / seconds['sharded']:.0%} of the unsharded rate"
                    f" (best of {args.rounds})"
                )
    print()
    for line in report:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
