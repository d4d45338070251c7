"""HTTP service throughput, against baselines measured side by side in the same run.

(a) single-key GET req/s and p50/p99 of ``GET /v1/stores/products/keys/{key}`` against a bare
    endpoint of the same stack (FastAPI + uvicorn, uvloop + httptools, one worker) returning a
    constant. Target: at least 70% of the bare endpoint's req/s.
(b) keys/s of 1,000-key batch gets (JSON and Arrow) against Redis ``MGET`` of the same keys
    (redis-server on loopback, redis-py + hiredis) and against in-process rocksdict multi-get.
    Target: at least 50% of Redis MGET keys/s.

The stores are real: a topic on the embedded broker, materialized by the service's own ``Store``.
Every server (uvicorn, redis-server) runs pinned to CPU 0; the load generator runs in this process
pinned to CPU 1, with the same number of concurrent connections for every contender::

    python -m bench.http_bench --keys 100000 --seconds 5 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import orjson
import pyarrow as pa
import redis
import redis.asyncio as aredis
import uvicorn
import uvloop
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from fastapi import FastAPI
from rocksdict import Options, Rdict
from starlette.responses import Response

from service.app import create_app
from service.local.broker import LocalBroker
from service.settings import load_settings

SERVER_CPU = 0
CLIENT_CPU = 1
TOPIC = "http-bench-products"
BATCH = 1000


def _pin(cpu: int) -> None:
    if hasattr(os, "sched_setaffinity") and cpu < (os.cpu_count() or 1):
        os.sched_setaffinity(0, {cpu})


def _key(i: int) -> bytes:
    return f"p{i:07d}".encode()


def _value(i: int) -> bytes:
    return orjson.dumps({"id": i, "name": f"product {i}", "price": i % 997 + 0.99, "tags": ["a", "b"]})


# -- servers (children): `python -m bench.http_bench --serve bare|store ...` ----------------------


def _bare_app() -> FastAPI:
    app = FastAPI()
    constant = _value(1)

    @app.get("/constant")
    async def constant_value() -> Response:
        return Response(constant, media_type="application/json")

    return app


def _serve(kind: str, port: int, config: Path | None) -> None:
    _pin(SERVER_CPU)
    app = _bare_app() if kind == "bare" else create_app(load_settings(config))
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
    )


# -- the load generator ---------------------------------------------------------------------------


T = TypeVar("T")
RequestSource = Sequence[bytes] | Callable[[int], bytes]
BatchSource = Sequence[list[bytes]] | Callable[[int], list[bytes]]


def _nth(source: Sequence[T] | Callable[[int], T]) -> Callable[[int], T]:
    """The n-th item to send: a sequence round-robin, or what a callable builds for ``n``."""
    if callable(source):
        return source
    return lambda n: source[n % len(source)]


async def _http_load(
    port: int, requests: RequestSource, seconds: float, connections: int, parse: Callable[[bytes], object]
) -> tuple[int, list[float]]:
    """Send ``requests`` over keep-alive connections; returns (answers, latencies).

    A list is sent round-robin, each connection starting at its own place; a callable is asked
    for every request (given its running number on the connection).
    """
    request_at = _nth(requests)
    deadline = time.perf_counter() + seconds
    latencies: list[float] = []

    async def one(offset: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        i = offset
        while time.perf_counter() < deadline:
            request = request_at(i)
            i += 1
            started = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            if head[9:12] != b"200":
                raise RuntimeError(f"unexpected answer: {head[:200]!r}")
            start = head.lower().index(b"content-length:") + 15
            length = int(head[start : head.index(b"\r\n", start)])
            parse(await reader.readexactly(length))
            latencies.append(time.perf_counter() - started)
        writer.close()

    await asyncio.gather(*(one(n * 7919) for n in range(connections)))
    return len(latencies), latencies


SLICE_SECONDS = 0.5
Load = Callable[[float], tuple[int, list[float]]]


def _interleaved(contenders: dict[str, Load], seconds: float) -> dict[str, tuple[float, list[float]]]:
    """Run the contenders in alternating half-second slices for ``seconds`` each.

    Interleaving finely makes every contender see the same background load, so their ratio holds
    even when the machine is busy. Returns (answers/s, sorted latencies) per contender.
    """
    counts = dict.fromkeys(contenders, 0)
    latencies: dict[str, list[float]] = {name: [] for name in contenders}
    slices = max(1, round(seconds / SLICE_SECONDS))
    for _ in range(slices):
        for name, load in contenders.items():
            count, observed = load(SLICE_SECONDS)
            counts[name] += count
            latencies[name] += observed
    return {name: (counts[name] / (slices * SLICE_SECONDS), sorted(latencies[name])) for name in contenders}


def _http(port: int, requests: RequestSource, connections: int, parse: Callable[[bytes], object]) -> Load:
    return lambda seconds: uvloop.run(_http_load(port, requests, seconds, connections, parse))


def _percentile_ms(latencies: list[float], fraction: float) -> float:
    return (
        latencies[min(len(latencies) - 1, int(len(latencies) * fraction))] * 1e3
        if latencies
        else float("nan")
    )


def _get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()


def _post(path: str, content_type: str, body: bytes) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: bench\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _arrow_body(keys: list[bytes]) -> bytes:
    table = pa.table({"key": pa.array(keys, type=pa.binary())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _read_arrow(body: bytes) -> object:
    return pa.ipc.open_stream(body).read_all()


async def _redis_load(port: int, batches: BatchSource, seconds: float, connections: int) -> int:
    """``MGET`` of ``batches`` (a list round-robin, or what a callable builds) on ``connections``."""
    batch_at = _nth(batches)
    client = aredis.Redis(host="127.0.0.1", port=port, max_connections=connections)
    deadline = time.perf_counter() + seconds
    done = 0

    async def one(offset: int) -> None:
        nonlocal done
        i = offset
        while time.perf_counter() < deadline:
            values = await client.mget(batch_at(i))
            assert len(values) == BATCH
            i += 1
            done += 1

    await asyncio.gather(*(one(n * 13) for n in range(connections)))
    await client.aclose()
    return done


def _redis(port: int, batches: BatchSource, connections: int) -> Load:
    return lambda seconds: (uvloop.run(_redis_load(port, batches, seconds, connections)), [])


def _run_rocksdict(path: Path, keys: int, batches: list[list[bytes]], seconds: float) -> float:
    db = Rdict(str(path), Options(raw_mode=True))
    try:
        for i in range(keys):
            db[_key(i)] = _value(i)
        db.flush()
        done = 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            values = db[batches[done % len(batches)]]
            assert len(values) == BATCH
            done += 1
        return done * BATCH / seconds
    finally:
        db.close()


# -- orchestration --------------------------------------------------------------------------------


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_http(port: int, path: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(_get(path))
            if sock.recv(64)[9:12] == b"200":
                return
        time.sleep(0.1)
    raise RuntimeError(f"the server on port {port} did not answer 200 on {path} within {timeout} s")


@contextlib.contextmanager
def _child(args: list[str], *, quiet: bool = False) -> Iterator[subprocess.Popen[bytes]]:
    quiet_output = subprocess.DEVNULL if quiet else None
    process = subprocess.Popen(args, stdout=quiet_output, stderr=quiet_output)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def _produce(bootstrap: str, keys: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 3, 1, config={"cleanup.policy": "compact"})]).values():
        future.result(timeout=15)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000}
    )
    for i in range(keys):
        while True:
            try:
                producer.produce(TOPIC, key=_key(i), value=_value(i))
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


def _measure_round(
    round_number: int,
    single: dict[str, Load],
    batched: dict[str, Load],
    seconds: float,
    record: Callable[[str, float], None],
) -> None:
    """One round: the single GETs interleaved, then the batches; every figure and ratio recorded."""
    gets_measured = _interleaved(single, seconds)
    for name, (rate, latencies) in gets_measured.items():
        record(f"{name} req/s", rate)
        record(f"{name} p50 ms", _percentile_ms(latencies, 0.5))
        record(f"{name} p99 ms", _percentile_ms(latencies, 0.99))
    batches_measured = _interleaved(batched, seconds)
    for name, (rate, _) in batches_measured.items():
        record(f"{name} keys/s", rate * BATCH)
    bare_rate, store_rate = gets_measured["bare GET"][0], gets_measured["store GET"][0]
    redis_rate = batches_measured["Redis MGET"][0]
    record("ratio GET/bare", store_rate / bare_rate)
    record("ratio JSON/Redis", batches_measured["batch JSON"][0] / redis_rate)
    record("ratio Arrow/Redis", batches_measured["batch Arrow"][0] / redis_rate)
    print(
        f"round {round_number}: bare {bare_rate:,.0f} req/s, store GET {store_rate:,.0f} req/s;"
        f" batch JSON {batches_measured['batch JSON'][0] * BATCH:,.0f},"
        f" Arrow {batches_measured['batch Arrow'][0] * BATCH:,.0f},"
        f" Redis MGET {redis_rate * BATCH:,.0f} keys/s",
        flush=True,
    )


def _print_medians(results: dict[str, list[float]], args: argparse.Namespace) -> None:
    median = {name: statistics.median(values) for name, values in results.items()}
    print(f"\nmedians over {args.rounds} rounds ({args.keys:,} keys, {args.connections} connections):")
    for name, value in median.items():
        if not name.startswith("ratio"):
            print(f"  {name:28s} {value:>14,.2f}")
    print(f"  single GET vs bare endpoint  {median['ratio GET/bare']:>13.0%}  (target >= 70%)")
    print(f"  JSON batch vs Redis MGET     {median['ratio JSON/Redis']:>13.0%}  (target >= 50%)")
    print(f"  Arrow batch vs Redis MGET    {median['ratio Arrow/Redis']:>13.0%}  (target >= 50%)")
    rocksdict_ratio = median["batch JSON keys/s"] / median["rocksdict multi-get keys/s"]
    print(f"  JSON batch vs rocksdict      {rocksdict_ratio:>13.0%}  (rocksdict measured apart, in-process)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=100_000, help="keys in the table")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per contender and round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians are reported")
    parser.add_argument(
        "--connections", type=int, default=4, help="concurrent connections of the load generator"
    )
    parser.add_argument("--serve", choices=["bare", "store"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        _serve(args.serve, args.port, args.config)
        return 0

    redis_binary = shutil.which("redis-server")
    if redis_binary is None:
        print("redis-server is missing: apt-get install -y redis-server (or `make bench`)", file=sys.stderr)
        return 1
    _pin(CLIENT_CPU)
    rng = random.Random(42)
    batches = [[_key(rng.randrange(args.keys)) for _ in range(BATCH)] for _ in range(50)]
    single_keys = [_key(rng.randrange(args.keys)) for _ in range(5000)]
    me = [sys.executable, "-m", "bench.http_bench"]
    results: dict[str, list[float]] = {}

    def record(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)

    with tempfile.TemporaryDirectory(prefix="http-bench-") as tmp, LocalBroker() as broker:
        print(f"producing {args.keys:,} records to {TOPIC}...", flush=True)
        _produce(broker.bootstrap_servers, args.keys)
        config = Path(tmp) / "statestore.yaml"
        config.write_text(
            f"kafka: {{bootstrap_servers: '{broker.bootstrap_servers}'}}\n"
            f"state_dir: {tmp}/state\n"
            f"stores: [{{name: products, topic: {TOPIC}, value_format: json}}]\n"
        )
        bare_port, store_port, redis_port = _free_port(), _free_port(), _free_port()
        redis_args = [redis_binary, "--port", str(redis_port), "--save", "", "--appendonly", "no"]
        with (
            _child([*me, "--serve", "bare", "--port", str(bare_port)]),
            _child([*me, "--serve", "store", "--port", str(store_port), "--config", str(config)]),
            _child(
                ["taskset", "-c", str(SERVER_CPU), *redis_args] if shutil.which("taskset") else redis_args
            ),
        ):
            _wait_http(bare_port, "/constant")
            _wait_http(store_port, "/readyz")
            loader = redis.Redis(host="127.0.0.1", port=redis_port)
            for start in range(0, args.keys, 10_000):
                loader.mset({_key(i): _value(i) for i in range(start, min(start + 10_000, args.keys))})
            loader.close()
            print(f"store ready; measuring {args.rounds} rounds of {args.seconds:g} s each", flush=True)

            gets = [_get(f"/v1/stores/products/keys/{k.decode()}") for k in single_keys]
            json_posts = [
                _post(
                    "/v1/stores/products/keys:batchGet",
                    "application/json",
                    orjson.dumps({"keys": [k.decode() for k in batch]}),
                )
                for batch in batches
            ]
            arrow_posts = [
                _post(
                    "/v1/stores/products/keys:batchGet", "application/vnd.apache.arrow.stream", _arrow_body(b)
                )
                for b in batches
            ]
            n = args.connections
            single = {
                "bare GET": _http(bare_port, [_get("/constant")], n, orjson.loads),
                "store GET": _http(store_port, gets, n, orjson.loads),
            }
            batched = {
                "batch JSON": _http(store_port, json_posts, n, orjson.loads),
                "batch Arrow": _http(store_port, arrow_posts, n, _read_arrow),
                "Redis MGET": _redis(redis_port, batches, n),
            }
            for load in (*single.values(), *batched.values()):
                load(1.0)  # warm-up
            for round_number in range(1, args.rounds + 1):
                _measure_round(round_number, single, batched, args.seconds, record)
        record(
            "rocksdict multi-get keys/s",
            _run_rocksdict(Path(tmp) / "rocksdict", args.keys, batches, args.seconds),
        )

    _print_medians(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
