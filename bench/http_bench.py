"""HTTP service throughput, against fair peers measured side by side in the same run.

(a) single-key GET req/s and p50/p99 of ``GET /v1/stores/products/keys/{key}`` against a bare
    Starlette route on the same stack (uvicorn, uvloop + httptools, one worker) and the same path
    template, reading its path parameter and returning a constant: the store's GET is a plain
    Starlette route too. A bare FastAPI route (``@app.get``) is measured beside it, for reference.
(b) keys/s of 1,000-key batch gets (JSON and Arrow) against Redis ``MGET`` of the same keys
    (redis-server on loopback) and against in-process rocksdict multi-get (measured apart).

Every client is equally lean (``bench/http_load.py``): prebuilt request bytes, keep-alive
connections on one uvloop loop, answers framed and not parsed (HTTP: status line, head, body by
Content-Length or chunks; Redis: ``hiredis.Reader``); keys/s count the keys asked. The first
answer of every connection in every slice is checked after the slice (values for the keys
asked), so a broken answer cannot count as fast.

The stores are real: a topic on the embedded broker, materialized by the service's own ``Store``.
Every server (uvicorn, redis-server) runs pinned to CPU 0; the load generator runs in this process
pinned to CPU 1, with the same number of concurrent connections for every contender. Contenders
alternate in half-second slices; ratios are medians of the per-round ratios::

    python -m bench.http_bench --keys 100000 --seconds 5 --rounds 3
"""

from __future__ import annotations

import argparse
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
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pyarrow as pa
import redis
import uvicorn
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from fastapi import FastAPI
from rocksdict import Options, Rdict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bench.http_load import (
    AnswerError,
    Load,
    _http,
    _http_load,
    _interleaved,
    _redis,
)
from service.app import create_app
from service.local.broker import LocalBroker
from service.routes import KEY_ROUTE
from service.settings import load_settings

# The load generator's names other benches import from here.
__all__ = ["Load", "_http", "_http_load", "_interleaved", "_redis"]

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


CONSTANT = _value(1)


# -- servers (children): `python -m bench.http_bench --serve starlette|fastapi|store ...` ---------


def _starlette_app() -> Starlette:
    """The store's GET route template, answering a constant after reading its path parameters."""

    async def constant_value(request: Request) -> Response:
        if not request.path_params["key"]:
            return Response(status_code=404)
        return Response(CONSTANT, media_type="application/json")

    return Starlette(routes=[Route(KEY_ROUTE, constant_value, methods=["GET"])])


def _fastapi_app() -> FastAPI:
    app = FastAPI()

    @app.get("/constant")
    async def constant_value() -> Response:
        return Response(CONSTANT, media_type="application/json")

    return app


def _serve(kind: str, port: int, config: Path | None) -> None:
    _pin(SERVER_CPU)
    apps: dict[str, Callable[[], object]] = {
        "starlette": _starlette_app,
        "fastapi": _fastapi_app,
        "store": lambda: create_app(load_settings(config)),
    }
    uvicorn.run(
        apps[kind](),  # type: ignore[arg-type]
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
    )


# -- requests and the checks of their answers -----------------------------------------------------


def _key_path(key: bytes) -> str:
    """The path of a single GET of ``key`` (``KEY_ROUTE``'s)."""
    return f"/v1/stores/products/keys/{key.decode()}"


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


def _check_constant(body: bytes) -> None:
    if body != CONSTANT:
        raise AnswerError(f"the bare route answered {body[:200]!r}")


def _check_value(body: bytes) -> None:
    """A single GET's answer: a product of the table."""
    value = orjson.loads(body)
    if not isinstance(value, dict) or _value(value["id"]) != body:
        raise AnswerError(f"a GET answered {body[:200]!r}, not a product of the table")


def _check_json_batch(body: bytes) -> None:
    """A JSON batch answer: a product for each of the 1,000 keys asked."""
    values = orjson.loads(body)["values"]
    if len(values) != BATCH or not all(isinstance(v, dict) and "id" in v for v in values):
        raise AnswerError("a JSON batch answer without a product for each of the keys asked")


def _check_arrow_batch(body: bytes) -> None:
    """An Arrow batch answer: a value for each of the 1,000 keys asked, each the key's product."""
    table = pa.ipc.open_stream(body).read_all()
    if table.num_rows != BATCH or table.column("value").null_count:
        raise AnswerError("an Arrow batch answer without a value for each of the keys asked")
    for key, value in zip(table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True):
        if value != _value(int(key[1:])):
            raise AnswerError(f"an Arrow batch answer gave {key!r} the value {value[:200]!r}")


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


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free ports (held open together while chosen, so none comes twice)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(contextlib.closing(socket.socket())) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


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
    store_rate = gets_measured["store GET"][0]
    starlette_rate = gets_measured["bare Starlette GET"][0]
    fastapi_rate = gets_measured["bare FastAPI GET"][0]
    redis_rate = batches_measured["Redis MGET"][0]
    record("ratio GET/Starlette", store_rate / starlette_rate)
    record("ratio GET/FastAPI", store_rate / fastapi_rate)
    record("ratio JSON/Redis", batches_measured["batch JSON"][0] / redis_rate)
    record("ratio Arrow/Redis", batches_measured["batch Arrow"][0] / redis_rate)
    print(
        f"round {round_number}: bare Starlette {starlette_rate:,.0f} req/s, bare FastAPI"
        f" {fastapi_rate:,.0f} req/s, store GET {store_rate:,.0f} req/s;"
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
    print(f"  single GET vs bare Starlette {median['ratio GET/Starlette']:>13.0%}  (floor >= 60%)")
    print(f"  single GET vs bare FastAPI   {median['ratio GET/FastAPI']:>13.0%}  (reference only)")
    print(f"  JSON batch vs Redis MGET     {median['ratio JSON/Redis']:>13.0%}  (floor >= 75%)")
    print(f"  Arrow batch vs Redis MGET    {median['ratio Arrow/Redis']:>13.0%}  (floor >= 75%)")
    rocksdict_ratio = median["batch JSON keys/s"] / median["rocksdict multi-get keys/s"]
    print(f"  JSON batch vs rocksdict      {rocksdict_ratio:>13.0%}  (rocksdict measured apart, in-process)")


def _contenders(
    ports: dict[str, int], keys: int, connections: int
) -> tuple[dict[str, Load], dict[str, Load], list[list[bytes]]]:
    """The single-GET and the batch contenders, and the batches they ask."""
    rng = random.Random(42)
    batches = [[_key(rng.randrange(keys)) for _ in range(BATCH)] for _ in range(50)]
    gets = [_get(_key_path(_key(rng.randrange(keys)))) for _ in range(5000)]
    batch_path = "/v1/stores/products/keys:batchGet"
    json_posts = [
        _post(batch_path, "application/json", orjson.dumps({"keys": [k.decode() for k in batch]}))
        for batch in batches
    ]
    arrow_posts = [_post(batch_path, "application/vnd.apache.arrow.stream", _arrow_body(b)) for b in batches]
    n = connections
    single = {
        "bare Starlette GET": _http(ports["starlette"], gets, n, _check_constant),
        "bare FastAPI GET": _http(ports["fastapi"], [_get("/constant")], n, _check_constant),
        "store GET": _http(ports["store"], gets, n, _check_value),
    }
    batched = {
        "batch JSON": _http(ports["store"], json_posts, n, _check_json_batch),
        "batch Arrow": _http(ports["store"], arrow_posts, n, _check_arrow_batch),
        "Redis MGET": _redis(ports["redis"], batches, n),
    }
    return single, batched, batches


def _write_config(tmp: str, bootstrap: str) -> Path:
    config = Path(tmp) / "statestore.yaml"
    config.write_text(
        f"kafka: {{bootstrap_servers: '{bootstrap}'}}\n"
        f"state_dir: {tmp}/state\n"
        f"stores: [{{name: products, topic: {TOPIC}, value_format: json}}]\n"
    )
    return config


def _load_redis(port: int, keys: int) -> None:
    loader = redis.Redis(host="127.0.0.1", port=port)
    for start in range(0, keys, 10_000):
        loader.mset({_key(i): _value(i) for i in range(start, min(start + 10_000, keys))})
    loader.close()


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
    parser.add_argument("--serve", choices=["starlette", "fastapi", "store"], help=argparse.SUPPRESS)
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
    me = [sys.executable, "-m", "bench.http_bench"]
    results: dict[str, list[float]] = {}

    def record(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)

    with tempfile.TemporaryDirectory(prefix="http-bench-") as tmp, LocalBroker() as broker:
        print(f"producing {args.keys:,} records to {TOPIC}...", flush=True)
        _produce(broker.bootstrap_servers, args.keys)
        config = _write_config(tmp, broker.bootstrap_servers)
        ports = dict(zip(("starlette", "fastapi", "store", "redis"), _free_ports(4), strict=True))
        redis_args = [redis_binary, "--port", str(ports["redis"]), "--save", "", "--appendonly", "no"]
        with (
            _child([*me, "--serve", "starlette", "--port", str(ports["starlette"])]),
            _child([*me, "--serve", "fastapi", "--port", str(ports["fastapi"])]),
            _child([*me, "--serve", "store", "--port", str(ports["store"]), "--config", str(config)]),
            _child(
                ["taskset", "-c", str(SERVER_CPU), *redis_args] if shutil.which("taskset") else redis_args,
                quiet=True,
            ),
        ):
            _wait_http(ports["starlette"], _key_path(_key(0)))
            _wait_http(ports["fastapi"], "/constant")
            _wait_http(ports["store"], "/readyz")
            _load_redis(ports["redis"], args.keys)
            print(f"store ready; measuring {args.rounds} rounds of {args.seconds:g} s each", flush=True)
            single, batched, batches = _contenders(ports, args.keys, args.connections)
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
