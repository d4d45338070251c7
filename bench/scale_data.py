"""The table of ``python -m bench scale``, and the processes that write and read it apart from the
bench's own: ``python -m bench.scale_data CHILD ...`` (produce, bare, store, writer, watcher).

Light to import: a child starts without the HTTP and Spark stacks the bench itself loads.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import OFFSET_END, Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TOPIC = "scale-bench"
STORE = "scale"
PARTITIONS = 6
BATCH = 1000
VALUE_SCHEMA = "name string, price double, category string"


def key(i: int) -> bytes:
    """Record ``i``'s 16-byte key: the hex MD5 of its number.

    Keys therefore arrive in random order and consecutive numbers land all over the key space;
    Spark computes the same key as ``substring(md5(cast(i as string)), 1, 16)``.
    """
    return hashlib.md5(b"%d" % i).hexdigest()[:16].encode()


def value(i: int, version: int = 0) -> bytes:
    """A JSON value of about 105 bytes (``version`` tells updates apart)."""
    return (
        b'{"name": "product %d", "price": %d.99, "category": "c%d", "tags": ["a", "b"],'
        b' "stock": %d, "version": %d}' % (i, i % 997, i % 13, (i * 7919) % 10007, version)
    )


class FreshKeysExhaustedError(RuntimeError):
    """Every key of the table was asked once: a further cold batch would repeat keys."""


class FreshKeys:
    """Batches of keys nobody asked for before from this stream, for every contender it feeds.

    Batch after batch takes the next record numbers, whose keys are spread uniformly over the key
    space. A key never comes back: once all ``records`` were asked, ``batch`` raises
    ``FreshKeysExhaustedError`` (a repeated key may be in the service's hot-key cache or a warm
    block, so it would not be cold); the bench then drops the round it cut short. With ``repeat``
    (smoke runs of tables too small for their reads) the keys start over instead, and
    ``repeated`` says so.
    """

    def __init__(self, records: int, repeat: bool = False) -> None:
        self._records = records
        self._repeat = repeat
        self._next = 0

    def batch(self, _n: int = 0) -> list[bytes]:
        start = self._next
        if start + BATCH > self._records and not self._repeat:
            raise FreshKeysExhaustedError(
                f"all {self._records:,} keys of the table were asked once; for more cold reads use more"
                " --records, or fewer --seconds / --rounds"
            )
        self._next += BATCH
        return [key(i % self._records) for i in range(start, start + BATCH)]

    @property
    def asked(self) -> int:
        """Keys handed out so far."""
        return self._next

    @property
    def repeated(self) -> bool:
        """Whether keys came back (only with ``repeat``)."""
        return self._next > self._records


# -- data -----------------------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str = TOPIC) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, PARTITIONS, 1, config={"cleanup.policy": "compact"})
    for future in admin.create_topics([new]).values():
        future.result(timeout=30)


def produce_table(bootstrap: str, records: int, topic: str = TOPIC) -> None:
    """Create ``topic`` and produce records ``0`` to ``records - 1`` to it (beyond a million
    records in two producer processes, this one and a child)."""
    create_topic(bootstrap, topic)
    shares = 2 if records > 1_000_000 else 1
    command = [
        sys.executable,
        "-m",
        "bench.scale_data",
        "produce",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
    ]
    producers = [
        subprocess.Popen([*command, "--records", str(records), "--share", str(n), "--shares", str(shares)])
        for n in range(1, shares)
    ]
    produce_share(bootstrap, records, 0, shares, topic)
    if any(p.wait() for p in producers):
        raise SystemExit(f"producing the table of topic {topic} failed")


def produce_share(bootstrap: str, records: int, share: int, shares: int, topic: str = TOPIC) -> None:
    """Produce records ``share``, ``share + shares``, ... (one producer process of ``shares``)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 2_000_000,
        }
    )
    for i in range(share, records, shares):
        while True:
            try:
                producer.produce(topic, key=key(i), value=value(i))
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise SystemExit("records were not all delivered")


def write_updates(bootstrap: str, records: int, rate: int, seconds: float, out: Path) -> None:
    """Update random keys at ``rate`` records/s for ``seconds``, once told to go on stdin.

    Writes to ``out`` one line per delivered record: partition, offset, and the time it was
    produced (its CreateTime, milliseconds since the epoch).
    """
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000}
    )
    delivered: list[tuple[int, int, int]] = []

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        if error is None:
            delivered.append((message.partition() or 0, message.offset() or 0, message.timestamp()[1]))

    producer.list_topics(TOPIC, timeout=30)
    print("ready", flush=True)
    sys.stdin.readline()
    rng = random.Random(11)
    start = time.monotonic()
    sent = 0
    while (elapsed := time.monotonic() - start) < seconds:
        due = int(elapsed * rate)
        while sent < due:
            i = rng.randrange(records)
            try:
                producer.produce(TOPIC, key=key(i), value=value(i, version=sent + 1), on_delivery=on_delivery)
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
        time.sleep(0.002)
    producer.flush(60)
    out.write_text("".join(f"{p} {o} {t}\n" for p, o, t in delivered))


def watch_updates(bootstrap: str, kafka: dict[str, str], seconds: float, out: Path) -> None:
    """A bare consumer with the store's consumer settings, reading from the end of every partition
    for ``seconds`` once told to go on stdin: the baseline of the write-to-visible latency.

    Writes to ``out`` one line per record produced after the go: the milliseconds from its
    CreateTime to its arrival here.
    """
    from store.kafka import consumer_config  # noqa: PLC0415 (the other children start without it)

    consumer = Consumer(consumer_config("scale-bench-watcher", {"bootstrap.servers": bootstrap, **kafka}))
    for partition in range(PARTITIONS):
        consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=10)
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_END) for p in range(PARTITIONS)])
    consumer.consume(1, 0.5)  # the assignment in effect: the end offsets are resolved
    print("ready", flush=True)
    sys.stdin.readline()
    # This broker may resolve the end a little early: records from before the go do not count.
    went_ms = time.time() * 1000
    arrivals: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for message in consumer.consume(10_000, 0.05):
            if message.error() is None and message.timestamp()[1] >= went_ms:
                arrivals.append(time.time() * 1000 - message.timestamp()[1])
    consumer.close()
    out.write_text("".join(f"{ms:.3f}\n" for ms in arrivals))


def child_store(bootstrap: str, records: int, state_dir: Path) -> dict[str, float]:
    """A ``Store`` from an empty ``state_dir`` to READY: its seconds, and its size on disk then."""
    from store import Store, StoreConfig  # noqa: PLC0415 (the other children start without it)
    from store.table import directory_size  # noqa: PLC0415

    store = Store(StoreConfig(STORE, TOPIC, {"bootstrap.servers": bootstrap}, state_dir))
    start = time.perf_counter()
    store.start()
    if not store.wait_until_ready(timeout=7200):
        raise SystemExit("the store did not become READY")
    seconds = time.perf_counter() - start
    total = store.position().total()
    disk = directory_size(state_dir)
    store.stop()
    if total < records:
        raise SystemExit(f"the store's position covers {total} records, expected {records}")
    return {"seconds": seconds, "disk": disk}


def settings(pairs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` arguments as a mapping."""
    return dict(pair.split("=", 1) for pair in pairs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale_data", description=__doc__)
    parser.add_argument("child", choices=["produce", "bare", "store", "writer", "watcher"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--topic", default=TOPIC, help="the topic the produce child writes")
    parser.add_argument("--share", type=int, default=0)
    parser.add_argument("--shares", type=int, default=1)
    parser.add_argument("--state-dir", type=Path)
    parser.add_argument("--rate", type=int, default=50_000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--kafka", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    if args.child == "produce":
        produce_share(args.bootstrap, args.records, args.share, args.shares, args.topic)
    elif args.child == "bare":
        from bench.bootstrap_bench import _child_bare  # noqa: PLC0415 (only this child needs it)

        seconds, _ = _child_bare(args.bootstrap, args.records, TOPIC, PARTITIONS)
        print(json.dumps({"seconds": seconds}))
    elif args.child == "store":
        print(json.dumps(child_store(args.bootstrap, args.records, args.state_dir)))
    elif args.child == "writer":
        write_updates(args.bootstrap, args.records, args.rate, args.seconds, args.out)
    else:
        watch_updates(args.bootstrap, settings(args.kafka), args.seconds, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
