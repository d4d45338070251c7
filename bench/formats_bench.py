"""Schema Registry formats (issue 24): bootstrap of an ``avro`` store against the same records as
``bytes``, hot batch gets of an ``avro`` store against a ``json`` store, and projection::

    python -m bench formats --records 1000000 --repeat 3
    python -m bench formats --records 1000000 --repeat 3 --parts bootstrap

Needs a quiet machine for its figures (docs/benchmarks.md). The parts asked (``--parts``, by
default ``bootstrap,batch``) run in one run, on one embedded broker and the tests' Schema Registry
stand-in, alternating the contenders:

- ``bootstrap``: a store restoring the Avro topic (~15 fields, ~150 bytes a value, written by
  confluent-kafka's ``AvroSerializer``) with ``value_format: avro`` (decoded at ingest) against the
  same topic as ``bytes`` (which restores with the bulk workers); target >= 0.70.
- ``batch``: 1,000 hot keys a request over HTTP, JSON answers, the service in its own process and
  the HTTP bench's lean client, both stores settled first: the ``avro`` store against a ``json``
  store of the same records as JSON; target >= 0.90.
- ``projection``: bytes on the wire of a 1,000-key batch asking 2 of the ~20 fields
  (``fields=``) against whole values; target <= 0.20.
- ``spark`` (not run by default: it starts a Spark session and joins ``--facts`` rows several
  times, minutes at 1M facts): a ``local[2]`` lookup join of the ``avro`` store needing 2 of the 20
  fields against the same join fetching whole values, ``--repeat`` interleaved rounds, the best of
  each; target >= 1.5x (``bench/formats_spark.py``)::

    python -m bench formats --records 200000 --facts 1000000 --repeat 3 --parts spark
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import uvloop
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from bench.formats_spark import CountedBatchGets, Traffic, measure
from bench.http_bench import CLIENT_CPU, SERVER_CPU, _post
from bench.http_load import _http_slice
from bench.scale_support import background_done, pin_process, pinned
from service.app import create_app
from service.local.broker import LocalBroker, free_port
from service.settings import Settings, store_configs
from store import Store
from tests.support.schema_registry import FakeSchemaRegistry, schema_registry
from tests.support.server import serve_app

PARTITIONS = 3
FIELDS = [("id", "long"), ("name", "string"), ("email", "string"), ("city", "string"), ("zip", "string")] + [
    (f"f{i}", "int" if i % 2 else "double") for i in range(15)
]
SCHEMA = {"type": "record", "name": "Customer", "fields": [{"name": n, "type": t} for n, t in FIELDS]}


def _record(i: int) -> dict[str, Any]:
    values: dict[str, Any] = {"id": i, "name": f"customer {i}", "email": f"c{i}@example.com"}
    values |= {"city": f"city {i % 500}", "zip": f"{i % 99999:05d}"}
    values |= {f"f{k}": (i + k) if k % 2 else (i + k) / 7 for k in range(15)}
    return values


def _produce(bootstrap: str, registry: FakeSchemaRegistry, records: int) -> tuple[str, str]:
    """The Avro topic and the same records as JSON; their names."""
    avro_topic, json_topic = "customers-avro", "customers-json"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(t, PARTITIONS, 1) for t in (avro_topic, json_topic)]
    ).values():
        future.result()
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(SCHEMA))
    context = SerializationContext(avro_topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "partitioner": "murmur2_random"})
    for i in range(records):
        record = _record(i)
        key = f"c{i:09d}".encode()
        for topic, value in (
            (avro_topic, serializer(record, context)),
            (json_topic, json.dumps(record).encode()),
        ):
            while True:
                try:
                    producer.produce(topic, key=key, value=value)
                    break
                except BufferError:
                    producer.poll(0.05)
    producer.flush(120)
    return avro_topic, json_topic


def _settings(
    bootstrap: str, registry: FakeSchemaRegistry, state: Path, stores: list[dict[str, Any]]
) -> Settings:
    return Settings(
        kafka={"bootstrap_servers": bootstrap},
        state_dir=state,
        schema_registry={"url": registry.url},
        stores=stores,
    )


def _cpu_seconds() -> float:
    """CPU time of this process and of its children reaped so far (the store's consumer process,
    the restore workers' process and its workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _bootstrap_seconds(settings: Settings) -> tuple[float, float]:
    """Wall seconds from start to READY, and the CPU seconds of the bootstrap (its processes
    reaped when the store stops)."""
    (config,) = store_configs(settings)
    store = Store(config)
    cpu = _cpu_seconds()
    start = time.perf_counter()
    store.start()
    try:
        if not store.wait_until_ready(timeout=3600):
            raise SystemExit(f"store {config.name} did not become READY")
        seconds = time.perf_counter() - start
    finally:
        store.stop()
    return seconds, _cpu_seconds() - cpu


@contextmanager
def _served(settings: Settings, traffic: Traffic | None = None) -> Iterator[httpx.Client]:
    """The service of ``settings`` once READY (its batch gets counted into ``traffic``, if given)."""
    app: Any = create_app(settings)
    if traffic is not None:
        app = CountedBatchGets(app, traffic)
    with serve_app(app) as url, httpx.Client(base_url=url, timeout=120) as client:
        deadline = time.monotonic() + 3600
        while client.get("/readyz").status_code != 200:
            if time.monotonic() > deadline:
                raise SystemExit("the service did not become ready")
            time.sleep(0.2)
        yield client


@dataclasses.dataclass(frozen=True)
class _Run:
    bootstrap: str
    registry: FakeSchemaRegistry
    base: Path
    records: int
    repeat: int


def _bootstrap_part(run: _Run, avro_topic: str) -> None:
    """Both stores restore the Avro topic from nothing, alternating; a ratio per round."""
    boot: dict[str, list[float]] = {"avro": [], "bytes": []}
    cpu: dict[str, list[float]] = {"avro": [], "bytes": []}
    for round_number in range(run.repeat):
        for fmt in ("avro", "bytes"):
            state = run.base / f"boot-{fmt}-{round_number}"
            store = {"name": "customers", "topic": avro_topic, "value_format": fmt}
            seconds, cpu_seconds = _bootstrap_seconds(_settings(run.bootstrap, run.registry, state, [store]))
            boot[fmt].append(seconds)
            cpu[fmt].append(cpu_seconds / run.records * 1e6)
        print(
            f"round {round_number}: avro {boot['avro'][-1]:.2f} s, bytes {boot['bytes'][-1]:.2f} s,"
            f" ratio {boot['bytes'][-1] / boot['avro'][-1]:.2f}; CPU µs a record avro {cpu['avro'][-1]:.1f},"
            f" bytes {cpu['bytes'][-1]:.1f} (load average {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    avro_rate = run.records / statistics.median(boot["avro"])
    bytes_rate = run.records / statistics.median(boot["bytes"])
    print(f"bootstrap: avro {avro_rate:,.0f} records/s, bytes {bytes_rate:,.0f} records/s,", end=" ")
    print(f"ratio {avro_rate / bytes_rate:.2f} (target >= 0.70);", end=" ")
    avro_cpu, bytes_cpu = statistics.median(cpu["avro"]), statistics.median(cpu["bytes"])
    print(f"CPU µs a record, median: avro {avro_cpu:.1f}, bytes {bytes_cpu:.1f}")


def _served_process(run: _Run, stores: list[dict[str, Any]]) -> tuple[subprocess.Popen[bytes], int]:
    """``statestore serve`` of ``stores`` in its own process, pinned to the server's CPU; its port."""
    port = free_port()
    config = run.base / "batch.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": run.bootstrap},
                "state_dir": str(run.base / "served"),
                "http": {"host": "127.0.0.1", "port": port},
                "schema_registry": {"url": run.registry.url},
                "stores": stores,
            }
        )
    )
    with open(run.base / "batch.log", "ab") as log:  # the child writes to its own copy
        process = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--config", str(config)], stdout=log, stderr=log
        )
    return process, port


def _wait_quiet(
    process: subprocess.Popen[bytes], port: int, stores: list[str], timeout: float = 3600
) -> float:
    """Wait until every store is READY, has counted its keys and verified its table once: nothing
    of the restore nor of the background reads after it runs while measured. The seconds waited."""
    started = time.perf_counter()
    while True:
        if process.poll() is not None:
            raise SystemExit("the service exited before its stores were ready")
        try:
            done = all(background_done(f"http://127.0.0.1:{port}", store) for store in stores)
        except OSError:  # not serving yet, or a store not READY
            done = False
        if done:
            return time.perf_counter() - started
        if time.perf_counter() - started > timeout:
            raise SystemExit(f"the stores were still busy after {timeout:.0f} s")
        time.sleep(0.5)


def _batch_part(run: _Run, avro_topic: str, json_topic: str, seconds: float) -> None:
    """Hot batch gets of the ``avro`` store against a ``json`` store, then projection's bytes.

    The service runs in its own process pinned to one CPU, the lean load generator of the HTTP
    bench (prebuilt requests, answers framed only) on the other; both stores settled first; each
    round is a slice of each store, the order alternating; the ratio is the median of the rounds'.
    """
    stores = [
        {"name": "avro", "topic": avro_topic, "value_format": "avro"},
        {"name": "json", "topic": json_topic, "value_format": "json"},
    ]
    rng = random.Random(7)
    keys = [f"c{rng.randrange(run.records):09d}" for _ in range(1000)]
    body = orjson.dumps({"keys": keys})
    requests = {
        name: _post(f"/v1/stores/{name}/keys:batchGet", "application/json", body) for name in ("avro", "json")
    }
    process, port = _served_process(run, stores)
    try:
        pin_process(process.pid, SERVER_CPU)
        waited = _wait_quiet(process, port, ["avro", "json"])
        print(f"stores ready, keys counted and verified once after {waited:.0f} s")
        pin_process(process.pid, SERVER_CPU)  # threads started since
        rates: dict[str, list[float]] = {"avro": [], "json": []}
        with pinned(CLIENT_CPU):
            for round_number in range(2 * run.repeat + 1):
                order = ("avro", "json") if round_number % 2 else ("json", "avro")
                for name in order:
                    answered = uvloop.run(_http_slice(port, [requests[name]], seconds, 4, _check_batch))
                    rates[name].append(answered.answers * len(keys) / answered.seconds)
        whole = len(_answer(port, "avro", body, ""))
        projected = len(_answer(port, "avro", body, "?fields=name,city"))
    finally:
        process.terminate()
        process.wait(60)
    ratios = [a / j for a, j in zip(rates["avro"], rates["json"], strict=True)]
    avro_keys, json_keys = statistics.median(rates["avro"]), statistics.median(rates["json"])
    print(
        f"hot batch get, JSON answers: avro {avro_keys:,.0f} keys/s, json {json_keys:,.0f} keys/s,", end=" "
    )
    print(
        f"ratio {statistics.median(ratios):.2f} (median of {len(ratios)} rounds,"
        f" {min(ratios):.2f}-{max(ratios):.2f}; target >= 0.90)"
    )
    print(f"projection 2 of 20 fields: {projected:,} bytes against {whole:,} whole,", end=" ")
    print(f"ratio {projected / whole:.2f} (target <= 0.20)")


def _check_batch(body: bytes) -> None:
    values = orjson.loads(body)["values"]
    if len(values) != 1000 or None in values:
        raise RuntimeError("a batch answer lacks values: the keys asked are not the store's")


def _answer(port: int, store: str, body: bytes, query: str) -> bytes:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/stores/{store}/keys:batchGet{query}",
        data=body,
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        content: bytes = answer.read()
    return content


def _spark_part(run: _Run, avro_topic: str, facts: int) -> None:
    """The Spark lookup join needing 2 of the 20 fields against the one fetching whole values."""
    traffic = Traffic()
    store = {"name": "avro", "topic": avro_topic, "value_format": "avro"}
    settings = _settings(run.bootstrap, run.registry, run.base / "spark-state", [store])
    with _served(settings, traffic) as client:
        folder = run.base / "spark"
        folder.mkdir()
        measure(str(client.base_url), traffic, "avro", run.records, facts, run.repeat, folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--seconds", type=float, default=1.0, help="seconds of each store's slice in a batch round"
    )
    parser.add_argument("--facts", type=int, default=1_000_000, help="fact rows of the spark part")
    parser.add_argument(
        "--parts",
        default="bootstrap,batch",
        help="bootstrap, batch (also measures projection's bytes) and/or spark (not by default: slow)",
    )
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    with LocalBroker() as broker, schema_registry() as registry, ExitStack() as stack:
        bootstrap = broker.bootstrap_servers
        print(f"producing {args.records:,} records twice (Avro, JSON)...", flush=True)
        avro_topic, json_topic = _produce(bootstrap, registry, args.records)
        base = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        run = _Run(bootstrap, registry, base, args.records, args.repeat)
        if "bootstrap" in parts:
            _bootstrap_part(run, avro_topic)
        if "batch" in parts:
            _batch_part(run, avro_topic, json_topic, args.seconds)
        if "spark" in parts:
            _spark_part(run, avro_topic, args.facts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
