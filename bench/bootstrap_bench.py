"""Bootstrap rate: a store restoring a topic from scratch, against bare consumers and ktables.

All read the same topic on the same embedded broker in the same run, each in its own process,
alternating, and the median of the repetitions is reported::

    python -m bench bootstrap --records 1000000 --repeat 5

Two bare confluent-kafka consumers, each only counting the records:

- ``bare``: tuned as the issue and the design notes tune it (``fetch.queue.backoff.ms=10``, so a
  full local queue does not stall it for a second; ``consume(10000, 1.0)`` batches); the
  interpreter's default garbage collection; it knows how many records to count. Like the store,
  it looks up each partition's leader before assigning: without that, librdkafka waits 500 ms
  before its first fetch, which would count against the baseline and not the store.
- ``bare-max``: given everything the store's consumers get: the same librdkafka settings
  (``store.kafka.client.consumer_config``), the same polling (take what is queued, wait for one message
  only when nothing is), the same end rule (a partition is done once its records reach the high
  watermark of its last fetch, or it reports its end), and the same garbage-collector threshold.
  What this project learned about consuming fast, applied to the baseline too.

Targets (issue 2): the store's bootstrap rate is at least 60% of the tuned bare consumer's
(``bare``), and at least 2x ktables' replay rate. The ratio to ``bare-max`` is reported as well.
Without the leader lookup ``bare`` read 700k to 910k records/s, the ~840k the issue quotes.

CPU time per record is reported beside the rates: user and system time of each contender's
process and every process it started (the store's Kafka client process and restore workers),
from the start of its timed part to its exit, and the broker's CPU time meanwhile. On a shared
machine it moves far less than wall time: compare it, and the rates' ratios within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import dataclasses
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from ktables import KafkaTable

from service.local.broker import LocalBroker
from store import Store, StoreConfig, StoreTuning
from store.kafka import consumer_config
from store.lifecycle import fewer_collections

TOPIC = "bootstrap-bench"
PARTITIONS = 3


def _key(i: int, ordered: bool) -> bytes:
    """16 bytes, unique: a hash prefix (keys arrive in random order, as real keys do) or the index
    (keys arrive sorted, the bulk loader's best case: nothing to sort, no overlapping SST files)."""
    suffix = i.to_bytes(8, "big")
    return suffix + suffix if ordered else hashlib.blake2b(suffix, digest_size=8).digest() + suffix


def _produce(bootstrap: str, records: int, ordered: bool) -> None:

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(TOPIC, PARTITIONS, 1, config={"cleanup.policy": "compact"})]
    ).values():
        future.result(timeout=15)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 2_000_000,
        }
    )
    value = os.urandom(100)
    for i in range(records):
        key = _key(i, ordered)
        while True:
            try:
                producer.produce(TOPIC, key=key, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


# -- contenders, each run in a child process: `python -m bench.bootstrap_bench --child NAME` -------


def _records_noting_ends(messages: list[Message], caught_up: set[int]) -> list[Message]:
    """The records of a poll; the partitions whose end it reports are added to ``caught_up``."""
    if not any(map(Message.error, messages)):
        return messages
    for message in messages:
        error = message.error()
        if error is not None and error.code() == KafkaError._PARTITION_EOF:
            caught_up.add(message.partition() or 0)
    return [m for m in messages if m.error() is None]


def _next_offsets(records: list[Message]) -> dict[int, int]:
    """The offset after the last record of each partition in ``records``."""
    latest: dict[int, int] = {}
    for message in reversed(records):
        partition = message.partition() or 0
        if partition not in latest:
            latest[partition] = (message.offset() or 0) + 1
            if len(latest) == PARTITIONS:
                break
    return latest


def _own_cpu_seconds() -> float:
    """CPU time of this process so far (the timed part's CPU is measured from here on)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _child_bare_max(bootstrap: str, records: int) -> tuple[float, float]:
    """The bare consumer with the store's consumer settings, poll, end rule and GC threshold."""

    tuning = StoreTuning()
    consumer = Consumer(consumer_config("bench-bare-max", {"bootstrap.servers": bootstrap}))
    partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    with fewer_collections(tuning.restore.gc_threshold):
        before = _own_cpu_seconds()
        start = time.perf_counter()
        # As the store does: the watermark query finds each partition's leader, so the
        # assignment's start-offset lookup goes out at once (without a known leader librdkafka
        # retries it only after 500 ms).
        for tp in partitions:
            consumer.get_watermark_offsets(tp, timeout=10)
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        seen = 0
        caught_up: set[int] = set()
        consumed: dict[int, int] = {}
        while seen < records or len(caught_up) < PARTITIONS:
            messages = consumer.consume(tuning.consumer.poll_max_records, 0)
            if not messages:
                messages = consumer.consume(1, tuning.consumer.poll_timeout_seconds)
            records_polled = _records_noting_ends(messages, caught_up)
            seen += len(records_polled)
            consumed.update(_next_offsets(records_polled))
            for tp in partitions:
                high = consumer.get_watermark_offsets(tp, cached=True)[1]
                if high >= 0 and consumed.get(tp.partition, -1) >= high:
                    caught_up.add(tp.partition)
        elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed, before


def _child_bare(
    bootstrap: str, records: int, topic: str = TOPIC, partitions: int = PARTITIONS
) -> tuple[float, float]:
    """The bare consumer tuned as the issue and the design notes tune it."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-bare", "fetch.queue.backoff.ms": 10}
    )
    before = _own_cpu_seconds()
    start = time.perf_counter()
    for partition in range(partitions):
        consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen = 0
    while seen < records:
        seen += sum(1 for message in consumer.consume(10_000, 1.0) if message.error() is None)
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed, before


def _child_store(bootstrap: str, records: int) -> tuple[float, float]:

    with tempfile.TemporaryDirectory() as state_dir:
        store = Store(StoreConfig("bench", TOPIC, {"bootstrap.servers": bootstrap}, Path(state_dir)))
        before = _own_cpu_seconds()
        start = time.perf_counter()
        store.start()
        if not store.wait_until_ready(timeout=600):
            raise SystemExit("store did not become READY")
        elapsed = time.perf_counter() - start
        total = store.position().total()
        store.stop()
    if total != records:
        raise SystemExit(f"store position covers {total} records, expected {records}")
    return elapsed, before


def _child_ktables(bootstrap: str, records: int) -> tuple[float, float]:

    async def run() -> tuple[float, float]:
        table = KafkaTable(
            connection=bootstrap,
            topic=TOPIC,
            value_decoder=lambda b: b,
            key_decoder=lambda b: b.hex(),
            ensure_topic=False,
            catchup_timeout=600,
        )
        before = _own_cpu_seconds()
        start = time.perf_counter()
        await table.start()
        # Its catch-up gate trusts ListOffsets, which this broker answers too low: count instead.
        while table.stats.records_applied < records:
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - start
        await table.stop()
        return elapsed, before

    return asyncio.run(run())


CHILDREN = {
    "bare": _child_bare,
    "bare-max": _child_bare_max,
    "store": _child_store,
    "ktables": _child_ktables,
}


@dataclasses.dataclass(frozen=True)
class Run:
    """One contender's restore: its wall time, and the CPU time of its processes and the broker's."""

    seconds: float
    cpu_seconds: float
    broker_cpu_seconds: float


_PR_SET_CHILD_SUBREAPER = 36


def _adopt_orphans() -> None:
    """Processes a contender leaves behind (a restore worker ending after the store's process)
    come to this process, which waits for them and so counts their CPU time (Linux only)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _process_cpu_seconds(pid: int | None) -> float:
    """User and system time of a running process (0 when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _reap_orphans(keep: set[int]) -> float:
    """Wait for the adopted processes (every child but ``keep``); returns their CPU seconds."""
    total = 0.0
    while True:
        orphans = [pid for pid in _children() if pid not in keep]
        if not orphans:
            return total
        for pid in orphans:
            with contextlib.suppress(ChildProcessError):
                usage = os.wait4(pid, 0)[2]
                total += usage.ru_utime + usage.ru_stime


def _children() -> list[int]:
    me = str(os.getpid())
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError), open(f"/proc/{name}/stat", encoding="ascii") as stat:
            if stat.read().rsplit(")", 1)[1].split()[1] == me:
                found.append(int(name))
    return found


def _run_child(name: str, bootstrap: str, records: int, broker_pid: int | None) -> Run:
    command = [sys.executable, "-m", "bench.bootstrap_bench", "--child", name]
    command += ["--bootstrap", bootstrap, "--records", str(records)]
    broker_before = _process_cpu_seconds(broker_pid)
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    with child.stdout:
        output = child.stdout.read()
    # Waited for here rather than by Popen: wait4 tells the CPU time of the child and of every
    # process it waited for.
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"the {name} contender failed (exit code {child.returncode})")
    cpu = usage.ru_utime + usage.ru_stime + _reap_orphans({broker_pid} if broker_pid else set())
    result = json.loads(output.strip().splitlines()[-1])
    broker_cpu = _process_cpu_seconds(broker_pid) - broker_before
    return Run(result["seconds"], cpu - result["cpu_before"], broker_cpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--contenders", default="bare,bare-max,store,ktables")
    parser.add_argument(
        "--ordered-keys", action="store_true", help="keys in sorted order (the bulk loader's best case)"
    )
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        seconds, cpu_before = CHILDREN[args.child](args.bootstrap, args.records)
        print(json.dumps({"seconds": seconds, "cpu_before": cpu_before}))
        return 0

    contenders = args.contenders.split(",")
    _adopt_orphans()
    with LocalBroker() as broker:
        print(
            f"producing {args.records:,} records (16 B keys in {'sorted' if args.ordered_keys else 'random'}"
            f" order, 100 B values, {PARTITIONS} partitions)...",
            flush=True,
        )
        _produce(broker.bootstrap_servers, args.records, args.ordered_keys)
        runs: dict[str, list[Run]] = {name: [] for name in contenders}
        for round_number in range(args.repeat):
            for name in contenders:
                run = _run_child(name, broker.bootstrap_servers, args.records, broker.pid)
                runs[name].append(run)
                print(
                    f"round {round_number + 1} {name:9s} {args.records / run.seconds:>12,.0f} records/s,"
                    f" {run.cpu_seconds / args.records * 1e6:.2f} µs CPU a record"
                    f" (broker {run.broker_cpu_seconds / args.records * 1e6:.2f})",
                    flush=True,
                )
    _print_summary(runs, args.records)
    return 0


def _print_summary(runs: dict[str, list[Run]], records: int) -> None:
    def median(name: str, field: str) -> float:
        return statistics.median(getattr(run, field) for run in runs[name])

    rates = {name: records / median(name, "seconds") for name in runs}
    cpu = {name: median(name, "cpu_seconds") / records * 1e6 for name in runs}
    broker = {name: median(name, "broker_cpu_seconds") / records * 1e6 for name in runs}
    print()
    print("| reader | records/s (median) | vs bare | vs bare-max | CPU µs a record | vs bare | broker µs |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rate in rates.items():
        ratios = [f"{rate / rates[base]:.0%}" if base in rates else "-" for base in ("bare", "bare-max")]
        cpu_ratio = f"{cpu[name] / cpu['bare']:.2f}x" if "bare" in cpu else "-"
        cells = [name, f"{rate:,.0f}", *ratios, f"{cpu[name]:.2f}", cpu_ratio, f"{broker[name]:.2f}"]
        print(f"| {' | '.join(cells)} |")
    if "store" in rates and "ktables" in rates:
        print(f"\nstore / ktables: {rates['store'] / rates['ktables']:.1f}x")


if __name__ == "__main__":
    raise SystemExit(main())
