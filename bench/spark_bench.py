"""Spark lookup joins against the joins Spark users write today, side by side, on every PySpark.

(a) ``lookup_join`` of N fact rows against a K-key products store, against the join Spark plans
    for the same facts with the same products read from Parquet under its default settings: a
    broadcast hash join (a 100k-row dimension is far below ``autoBroadcastJoinThreshold``; the
    runner checks the plan). Floor: the lookup join's rows/s at least 0.8 of the broadcast join's.
(b) two chained lookups (products, then customers), against two broadcast joins of the same data
    (Spark's defaults again). Floor: as fast. Also, labelled, against two sort-merge joins
    (``spark.sql.autoBroadcastJoinThreshold=-1``: what dimensions above the threshold get).

The stores are small enough (about 6 MB each) for ``lookup_join`` to broadcast them
(``clients.spark.broadcast``: read whole by the driver when planned, kept by Spark after the first
job); "looked up by the tasks" is the same lookup (or two) with ``broadcast_bytes=0``, the per-row
path (``mapInArrow``) that larger stores take. Either way (a)
and (b), planned once and run in every round, read the stores in the warm-up only (the Python
workers keep a store their tasks read whole for the next tasks of the same planned read); the
contenders "planned per run" call ``lookup_join`` again in every run (the planning on the driver
included): at an unchanged store the driver gives them the read it planned before, so nothing is
read again; "read afresh per run" plan with options of their own every run, as when the store
moved since the last run (the driver, or every task, reads what it needs).

Each PySpark interpreter (``--python``, default this one and the PySpark 3.5 venv ``make test``
builds, if present) runs every contender on a classic ``local[2]`` session and on Spark Connect
(a ``local[2]`` Connect server of this interpreter's Spark, a fresh one for each run), in
``bench/spark_runner.py``. The stores are real: topics on the embedded broker, materialized by
``statestore serve`` (the real RocksDB ``Store``) in its own process. Every join writes all its
rows to Spark's ``noop`` sink; each contender runs once to warm up, then ``--rounds`` rounds run
every contender in turn (interleaved, each round in an order of its own). The seconds printed are
each contender's best round (and its median round). The floors' two ratios are medians of ratios
taken round by round: the two contenders of a ratio ran in the same round, under the same load, so
a spell of garbage collection or load from elsewhere does not decide it, as it can decide a ratio of
two best rounds (printed beside, with the quartiles of the round-by-round ratios); the other
ratios are of best rounds::

    python -m bench spark --facts 1000000 --keys 100000 --rounds 8
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from service.local.broker import LocalBroker, free_port

PRODUCT_SCHEMA = "name string, price double, category string"
CUSTOMER_SCHEMA = "name string, country string"


def _product(i: int) -> bytes:
    return b'{"name": "product %d", "price": %d.99, "category": "c%d", "tags": ["a", "b"]}' % (
        i,
        i % 997,
        i % 13,
    )


def _customer(i: int) -> bytes:
    return b'{"name": "customer %d", "country": "%s"}' % (i, [b"FR", b"DE", b"NL", b"IT"][i % 4])


def _produce(bootstrap: str, topic: str, keys: int, prefix: bytes, value: Callable[[int], bytes]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 3, 1, config={"cleanup.policy": "compact"})]).values():
        future.result(timeout=30)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000}
    )
    for i in range(keys):
        while True:
            try:
                producer.produce(topic, key=prefix + b"%06d" % i, value=value(i))
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60):
        raise RuntimeError(f"records for {topic} were not all delivered")


@contextlib.contextmanager
def _service(config: Path, port: int) -> Iterator[str]:
    """``statestore serve`` in its own process; yields its URL once every store is READY."""
    process = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--config", str(config), "--port", str(port)],
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if process.poll() is not None:
                raise RuntimeError("statestore serve exited before it was ready")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the service did not become ready within 300 s")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


@contextlib.contextmanager
def served_dimensions(bootstrap: str, folder: Path, keys: int) -> Iterator[str]:
    """The products and customers topics (``keys`` records each) served by ``statestore serve``."""
    _produce(bootstrap, "bench-products", keys, b"p", _product)
    _produce(bootstrap, "bench-customers", keys, b"c", _customer)
    config = folder / "statestore.yaml"
    config.write_text(
        f"kafka:\n  bootstrap_servers: {bootstrap!r}\n"
        f"state_dir: {str(folder / 'state')!r}\n"
        "stores:\n"
        "  - {name: products, topic: bench-products, value_format: json}\n"
        "  - {name: customers, topic: bench-customers, value_format: json}\n"
    )
    with _service(config, free_port()) as url:
        yield url


_CONNECT_SERVER = """
import pathlib, sys
from tests.support.spark_session import start_connect_server
written = pathlib.Path(sys.argv[1])
written.with_suffix(".part").write_text(start_connect_server("local[2]", "2g"))
written.with_suffix(".part").rename(written)
sys.stdin.read()  # until the bench closes it
"""


@contextlib.contextmanager
def _connect_server(folder: Path) -> Iterator[str]:
    """A ``local[2]`` Spark Connect server of this interpreter's Spark in a process of its own, for
    one run: each Connect run starts on a fresh JVM, as each classic one does."""
    written = folder / f"connect-{time.monotonic_ns()}.url"
    process = subprocess.Popen([sys.executable, "-c", _CONNECT_SERVER, str(written)], stdin=subprocess.PIPE)
    try:
        while not written.exists():
            if process.poll() is not None:
                raise RuntimeError(f"Spark Connect server exited ({process.returncode}) before it started")
            time.sleep(0.2)
        yield written.read_text()
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


def _run(
    python: str, url: str, connect: str | None, folder: Path, args: argparse.Namespace
) -> dict[str, Any]:
    command = [python, "-m", "bench.spark_runner", "--url", url, "--data", str(folder)]
    command += ["--facts", str(args.facts), "--keys", str(args.keys), "--rounds", str(args.rounds)]
    if connect:
        command += ["--connect", connect]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _print(result: dict[str, Any], facts: int) -> None:
    print(f"\nPySpark {result['pyspark']}, {result['session']} session", flush=True)
    for name in CONTENDERS:
        median = statistics.median(result["rounds"][name])
        print(
            f"  {name:<41} {result[name]:5.2f} s  {facts / result[name] / 1e6:5.2f} M rows/s"
            f"  (median round {median:5.2f} s)"
        )
    ratio = result["broadcast join"] / result["lookup_join"]
    best_two = result["two broadcast joins"] / result["two chained lookup_joins"]
    merge = result["two sort-merge joins"] / result["two chained lookup_joins"]
    planned = result["broadcast join"] / result["lookup_join, planned per run"]
    two_planned = result["two broadcast joins"] / result["two lookup_joins, planned per run"]
    afresh = result["broadcast join"] / result["lookup_join, read afresh per run"]
    two_afresh = result["two broadcast joins"] / result["two lookup_joins, read afresh per run"]
    rounds = result["rounds"]
    low, one, high = paired_ratios(rounds, "broadcast join", "lookup_join")
    print(
        f"  lookup_join / broadcast join rows/s: {one:.2f} (floor 0.8; round by round: quartiles"
        f" {low:.2f}-{high:.2f}; best rounds {ratio:.2f})"
    )
    low, two, high = paired_ratios(rounds, "two broadcast joins", "two chained lookup_joins")
    print(
        f"  two lookups vs two broadcast joins: {two:.2f}x (floor 1.0; round by round: quartiles"
        f" {low:.2f}-{high:.2f}; best rounds {best_two:.2f}x)"
    )
    print(f"  planned per run (the store unchanged): {planned:.2f} and {two_planned:.2f}x")
    print(f"  read afresh per run (as when the store moved): {afresh:.2f} and {two_afresh:.2f}x")
    print(f"  two lookups vs two sort-merge joins (broadcast off): {merge:.2f}x")
    tasks = result["broadcast join"] / result["lookup_join, looked up by the tasks"]
    two_tasks = result["two broadcast joins"] / result["two lookup_joins, looked up by the tasks"]
    print(f"  looked up by the tasks (broadcast_bytes=0), planned once: {tasks:.2f} and {two_tasks:.2f}x")
    floor = result["broadcast join"] / result["mapInArrow pass-through"]
    print(f"  mapInArrow pass-through / broadcast join rows/s: {floor:.2f} (no lookup at all)", flush=True)


def paired_ratios(
    rounds: dict[str, list[float]], baseline: str, contender: str
) -> tuple[float, float, float]:
    """The baseline's seconds over the contender's, round by round (the two ran in the same round,
    under the same load): their lower quartile, median and upper quartile."""
    ratios = sorted(b / c for b, c in zip(rounds[baseline], rounds[contender], strict=True))
    if len(ratios) < 2:
        return ratios[0], ratios[0], ratios[0]
    low, median, high = statistics.quantiles(ratios, n=4, method="inclusive")
    return low, median, high


CONTENDERS = (
    "broadcast join",
    "lookup_join",
    "lookup_join, planned per run",
    "lookup_join, read afresh per run",
    "lookup_join, looked up by the tasks",
    "two broadcast joins",
    "two chained lookup_joins",
    "two lookup_joins, planned per run",
    "two lookup_joins, read afresh per run",
    "two lookup_joins, looked up by the tasks",
    "two sort-merge joins",
    "mapInArrow pass-through",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench spark", description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=1_000_000, help="fact rows (purchases)")
    parser.add_argument("--keys", type=int, default=100_000, help="keys per dimension store")
    parser.add_argument("--rounds", type=int, default=8, help="timed rounds per contender, interleaved")
    spark35 = Path(".venv-spark35/bin/python")
    parser.add_argument(
        "--python", action="append", help="a PySpark interpreter to run (repeat; default: this one and "
        f"{spark35} if it exists)",
    )  # fmt: skip
    parser.add_argument("--sessions", default="classic,connect", help="classic, connect or both")
    args = parser.parse_args(argv)
    # Absolute, not resolved: a venv's python is a symlink to the base interpreter.
    pythons = [os.path.abspath(p) for p in args.python or [sys.executable, *[spark35] * spark35.exists()]]
    sessions = args.sessions.split(",")

    # Python workers must run this interpreter (the one with the clients' dependencies).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp, LocalBroker() as broker:
        started = time.perf_counter()
        with served_dimensions(broker.bootstrap_servers, Path(tmp), args.keys) as url:
            print(f"stores ready after {time.perf_counter() - started:.1f} s", flush=True)
            for python in pythons:
                for kind in sessions:
                    folder = Path(tmp) / "data"
                    server = _connect_server(Path(tmp)) if kind == "connect" else contextlib.nullcontext()
                    with server as remote:
                        _print(_run(python, url, remote, folder, args), args.facts)
    print(f"\n{args.facts:,} fact rows, {args.keys:,} keys per dimension, {args.rounds} rounds interleaved")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
