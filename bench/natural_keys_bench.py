"""The ingest cost of natural keys (issue 24): CPU per record of a store whose keys are framed by the
Schema Registry (``key_format: avro``: each key decoded, then its winner resolved across key schema
ids, ``store.table.winners``) against stores of the same records with keys as they are::

    python -m bench natural_keys --records 300000 --repeat 3

On one embedded broker and the tests' Schema Registry stand-in, the same records (a key space of
half the records, so keys are overwritten; 100-byte values) go to two topics: one with Avro
``long`` keys written by confluent-kafka's ``AvroSerializer``, one with the same numbers as plain
string keys. Contenders, alternating, each a bootstrap from nothing in its own process, record by
record (the bulk path off: a natural-key store never takes it):

- ``natural``: the Avro-key topic, ``key_format: avro``;
- ``bytes``: the same topic, ``key_format: bytes`` (the producer's key bytes kept as they are);
- ``string``: the plain-key topic, ``key_format: string``.

Each child reports the CPU of its bootstrap (its own from the store's start to READY, and its
children's, the consumer process, reaped at stop), and the CPU its apply thread spent decoding keys
(and values: none here, ``bytes``), applying batches, and within that resolving winners
(``Winners.resolve``). Needs a quiet machine for figures to quote.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

PARTITIONS = 3
CONTENDERS = {
    "natural": ("nk-avro", "avro"),
    "bytes": ("nk-avro", "bytes"),
    "string": ("nk-string", "string"),
}


def _produce(bootstrap: str, registry_url: str, records: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = sorted({topic for topic, _ in CONTENDERS.values()})
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
        future.result()
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps("long"))
    context = SerializationContext("nk-avro", MessageField.KEY)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "partitioner": "murmur2_random"})
    keys = max(records // 2, 1)
    for i in range(records):
        natural = (i * 7_919) % keys
        value = b"%010d" % i + b"v" * 90
        for topic, key in (("nk-avro", serializer(natural, context)), ("nk-string", str(natural).encode())):
            while True:
                try:
                    producer.produce(topic, key=key, value=value)
                    break
                except BufferError:
                    producer.poll(0.05)
    producer.flush(120)


def _child(spec: dict[str, Any]) -> dict[str, float]:
    """One bootstrap from nothing; its CPU and the apply thread's CPU in ``Winners.resolve``."""
    from service.settings import Settings, store_configs  # noqa: PLC0415  # the child's own imports
    from store import Store  # noqa: PLC0415
    from store.lifecycle.apply_loop import ApplyLoop  # noqa: PLC0415
    from store.table import winners  # noqa: PLC0415
    from store.table.replica import Replica  # noqa: PLC0415

    spent = {"resolve": 0.0, "decode": 0.0, "apply": 0.0}
    for owner, method, name in (
        (winners.Winners, "resolve", "resolve"),
        (ApplyLoop, "_values_as_stored", "decode"),
        (Replica, "apply", "apply"),
    ):
        setattr(owner, method, _timed(getattr(owner, method), spent, name))
    topic, key_format = CONTENDERS[spec["contender"]]
    settings = Settings(
        kafka={"bootstrap_servers": spec["bootstrap"]},
        state_dir=Path(spec["state"]),
        schema_registry={"url": spec["registry"]},
        stores=[{"name": "s", "topic": topic, "key_format": key_format, "value_format": "bytes"}],
    )
    (config,) = store_configs(settings)
    config = dataclasses.replace(config, tuning=config.tuning.replace(bulk_load_min_records=10**12))
    store = Store(config)
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    store.start()
    try:
        if not store.wait_until_ready(timeout=3600):
            raise SystemExit("the store did not become READY")
        seconds = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        store.stop()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"seconds": seconds, "cpu": own + children.ru_utime + children.ru_stime, **spent}


def _timed(method: Any, spent: dict[str, float], name: str) -> Any:
    """``method`` adding the CPU time of its thread in it to ``spent[name]``."""

    def timed(*args: Any) -> Any:
        start = time.thread_time()
        try:
            return method(*args)
        finally:
            spent[name] += time.thread_time() - start

    return timed


def _run_child(spec: dict[str, Any]) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "natural_keys", "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(json.loads(args.child))))
        return 0
    from service.local.broker import LocalBroker  # noqa: PLC0415  # the parent's only
    from tests.support.schema_registry import schema_registry  # noqa: PLC0415

    with LocalBroker() as broker, schema_registry() as registry, tempfile.TemporaryDirectory() as base:
        print(f"producing {args.records:,} records to two topics...", flush=True)
        _produce(broker.bootstrap_servers, registry.url, args.records)
        results: dict[str, list[dict[str, float]]] = {name: [] for name in CONTENDERS}
        for round_number in range(args.repeat):
            for name in CONTENDERS:
                spec = {
                    "contender": name,
                    "bootstrap": broker.bootstrap_servers,
                    "registry": registry.url,
                    "state": str(Path(base) / f"{name}-{round_number}"),
                }
                result = _run_child(spec)
                results[name].append(result)
                per = {k: v / args.records * 1e6 for k, v in result.items() if k != "seconds"}
                print(
                    f"round {round_number} {name}: {result['seconds']:.2f} s, us CPU a record:"
                    f" {per['cpu']:.1f} in all, decoding keys {per['decode']:.2f}, applying"
                    f" {per['apply']:.2f} (resolving {per['resolve']:.2f})"
                    f" (load average {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    for name, runs in results.items():
        per = {
            k: statistics.median(r[k] for r in runs) / args.records * 1e6 for k in runs[0] if k != "seconds"
        }
        rate = args.records / statistics.median(r["seconds"] for r in runs)
        print(
            f"{name}: {rate:,.0f} records/s; medians, us CPU a record: {per['cpu']:.1f} in all, decoding"
            f" keys {per['decode']:.2f}, applying {per['apply']:.2f} (resolving {per['resolve']:.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
