"""Hot 1,000-key batch gets (JSON and Arrow answers) against Redis ``MGET``, with equally lean clients.

Every contender's client does the same little work per answer: prebuilt request bytes sent over
keep-alive connections (4 by default, one request in flight on each), and framing only (HTTP:
the head and ``Content-Length``; Redis: hiredis's reader), never a parse of the values. The
servers (the service on uvicorn, redis-server) run pinned to CPU 0, the load generator (uvloop)
to CPU 1; contenders alternate in half-second slices, so each sees the same background load. The
server's CPU time per key (from ``/proc``) is printed beside each rate::

    python -m bench.batch_path_bench --keys 100000 --seconds 6 --rounds 3

``--profile N`` instead drives the service's ASGI app in this process (no sockets) with N JSON
and N Arrow batch requests under cProfile and prints where their time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import pstats
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import hiredis
import orjson
import redis
import uvloop

from bench.http_bench import (
    BATCH,
    CLIENT_CPU,
    SERVER_CPU,
    TOPIC,
    _arrow_body,
    _child,
    _free_port,
    _key,
    _pin,
    _post,
    _produce,
    _value,
    _wait_http,
)
from service.local.broker import LocalBroker

SLICE_SECONDS = 0.5
BATCH_PATH = "/v1/stores/products/keys:batchGet"
ARROW = "application/vnd.apache.arrow.stream"


class _Lean(asyncio.Protocol):
    """One keep-alive connection sending prebuilt requests back to back, counting framed answers."""

    def __init__(
        self, requests: list[bytes], offset: int, done: asyncio.Future[None], deadline: float
    ) -> None:
        self.requests, self.next, self.done, self.deadline = requests, offset, done, deadline
        self.answers = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport
        self.send()

    def send(self) -> None:
        assert self.transport is not None
        if time.perf_counter() >= self.deadline:
            self.transport.close()
            if not self.done.done():
                self.done.set_result(None)
            return
        self.transport.write(self.requests[self.next % len(self.requests)])
        self.next += 1

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


class _HttpLean(_Lean):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.buffer = bytearray()
        self.want = -1

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        while True:
            if self.want < 0:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                if buffer[9:12] != b"200":
                    raise RuntimeError(f"unexpected answer: {bytes(buffer[:300])!r}")
                start = buffer.find(b"content-length:", 0, end) + 15
                if start < 15:
                    start = buffer.find(b"Content-Length:", 0, end) + 15
                self.want = end + 4 + int(buffer[start : buffer.find(b"\r\n", start)])
            if len(buffer) < self.want:
                return
            del buffer[: self.want]
            self.want = -1
            self.answers += 1
            self.send()


class _RedisLean(_Lean):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.reader = hiredis.Reader()

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while self.reader.gets() is not False:
            self.answers += 1
            self.send()


async def _load(kind: type[_Lean], port: int, requests: list[bytes], seconds: float, connections: int) -> int:
    loop = asyncio.get_running_loop()
    deadline = time.perf_counter() + seconds
    protocols = []
    for n in range(connections):
        done: asyncio.Future[None] = loop.create_future()
        _, protocol = await loop.create_connection(
            lambda n=n, done=done: kind(requests, n * 7, done, deadline), "127.0.0.1", port
        )
        protocols.append(protocol)
    await asyncio.gather(*(p.done for p in protocols))
    return sum(p.answers for p in protocols)


def _mget(keys: list[bytes]) -> bytes:
    parts = [b"*%d\r\n$4\r\nMGET\r\n" % (len(keys) + 1)]
    parts += [b"$%d\r\n%s\r\n" % (len(k), k) for k in keys]
    return b"".join(parts)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


Contender = tuple[type[_Lean], int, list[bytes], list[int]]


def _round(
    contenders: dict[str, Contender], seconds: float, connections: int
) -> dict[str, tuple[float, float]]:
    """(keys/s, server CPU ns per key) of each contender, in alternating slices."""
    keys = dict.fromkeys(contenders, 0)
    cpu = dict.fromkeys(contenders, 0.0)
    for _ in range(max(1, round(seconds / SLICE_SECONDS))):
        for name, (kind, port, requests, pids) in contenders.items():
            before = sum(map(_cpu_seconds, pids))
            keys[name] += BATCH * uvloop.run(_load(kind, port, requests, SLICE_SECONDS, connections))
            cpu[name] += sum(map(_cpu_seconds, pids)) - before
    spent = max(1, round(seconds / SLICE_SECONDS)) * SLICE_SECONDS
    return {name: (keys[name] / spent, cpu[name] / max(keys[name], 1) * 1e9) for name in contenders}


def _config(tmp: str, bootstrap: str, name: str = "statestore") -> Path:
    config = Path(tmp) / f"{name}.yaml"
    config.write_text(
        f"kafka: {{bootstrap_servers: '{bootstrap}'}}\n"
        f"state_dir: {tmp}/{name}-state\n"
        f"stores: [{{name: products, topic: {TOPIC}, value_format: json}}]\n"
    )
    return config


@contextlib.contextmanager
def _baseline_child(tree: Path, port: int, config: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The service as another source tree has it (e.g. the commit before a change), served alike."""
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    args = [
        sys.executable,
        "-m",
        "bench.http_bench",
        "--serve",
        "store",
        "--port",
        str(port),
        "--config",
        str(config),
    ]
    process = subprocess.Popen(args, cwd=tree, env=environment)
    try:
        yield process
    finally:
        process.terminate()
        process.wait(timeout=30)


def _measure(
    contenders: dict[str, Contender], args: argparse.Namespace
) -> dict[str, list[tuple[float, float]]]:
    """(keys/s, server CPU ns per key) of each contender in each round, printed as measured."""
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
    for number in range(1, args.rounds + 1):
        measured = _round(contenders, args.seconds, args.connections)
        redis_rate = measured["Redis MGET"][0]
        print(
            f"round {number}: "
            + ", ".join(f"{n} {r:,.0f} keys/s ({ns:.0f} ns CPU/key)" for n, (r, ns) in measured.items())
            + f"; JSON/Redis {measured['batch JSON'][0] / redis_rate:.2f},"
            f" Arrow/Redis {measured['batch Arrow'][0] / redis_rate:.2f}",
            flush=True,
        )
        for name, figure in measured.items():
            results[name].append(figure)
    return results


def _print_medians(results: dict[str, list[tuple[float, float]]], args: argparse.Namespace) -> None:
    print(
        f"medians of {args.rounds} rounds, {args.connections} connections,"
        f" load average {os.getloadavg()[0]:.1f}:"
    )
    redis_median = statistics.median(r for r, _ in results["Redis MGET"])
    for name, figures in results.items():
        rate = statistics.median(r for r, _ in figures)
        ns = statistics.median(c for _, c in figures)
        print(
            f"  {name:12s} {rate:>12,.0f} keys/s  {ns:6.0f} ns server CPU/key"
            f"  {rate / redis_median:.2f} of Redis"
        )


def compare(args: argparse.Namespace) -> int:
    redis_binary = shutil.which("redis-server")
    if redis_binary is None:
        print("redis-server is missing: apt-get install -y redis-server", file=sys.stderr)
        return 1
    _pin(CLIENT_CPU)
    rng = random.Random(42)
    batches = [[_key(rng.randrange(args.keys)) for _ in range(BATCH)] for _ in range(50)]
    me = [sys.executable, "-m", "bench.http_bench"]
    taskset = ["taskset", "-c", str(SERVER_CPU)] if shutil.which("taskset") else []
    with tempfile.TemporaryDirectory(prefix="batch-path-bench-") as tmp, LocalBroker() as broker:
        print(f"producing {args.keys:,} records...", flush=True)
        _produce(broker.bootstrap_servers, args.keys)
        config = _config(tmp, broker.bootstrap_servers)
        store_port, redis_port = _free_port(), _free_port()
        redis_args = [redis_binary, "--port", str(redis_port), "--save", "", "--appendonly", "no"]
        baseline_port = _free_port()
        with contextlib.ExitStack() as servers:
            store = servers.enter_context(
                _child([*me, "--serve", "store", "--port", str(store_port), "--config", str(config)])
            )
            redis_server = servers.enter_context(_child([*taskset, *redis_args]))
            if args.baseline_tree:
                baseline = servers.enter_context(
                    _baseline_child(
                        args.baseline_tree, baseline_port, _config(tmp, broker.bootstrap_servers, "base")
                    )
                )
                _wait_http(baseline_port, "/readyz")
            _wait_http(store_port, "/readyz")
            loader = redis.Redis(host="127.0.0.1", port=redis_port)
            for start in range(0, args.keys, 10_000):
                loader.mset({_key(i): _value(i) for i in range(start, min(start + 10_000, args.keys))})
            loader.close()
            store_pids, redis_pids = [store.pid], [redis_server.pid]
            json_posts = [
                _post(BATCH_PATH, "application/json", orjson.dumps({"keys": [k.decode() for k in b]}))
                for b in batches
            ]
            contenders: dict[str, Contender] = {
                "batch JSON": (_HttpLean, store_port, json_posts, store_pids),
                "batch Arrow": (
                    _HttpLean,
                    store_port,
                    [_post(BATCH_PATH, ARROW, _arrow_body(b)) for b in batches],
                    store_pids,
                ),
                "Redis MGET": (_RedisLean, redis_port, [_mget(b) for b in batches], redis_pids),
            }
            if args.baseline_tree:
                contenders["JSON baseline"] = (_HttpLean, baseline_port, json_posts, [baseline.pid])
                arrow = contenders["batch Arrow"][2]
                contenders["Arrow baseline"] = (_HttpLean, baseline_port, arrow, [baseline.pid])
            _round(contenders, 1.0, args.connections)  # warm-up: every key hot
            results = _measure(contenders, args)
    _print_medians(results, args)
    return 0


# -- in process: the ASGI app without sockets, under cProfile -------------------------------------


async def _asgi_requests(app: Callable[..., Any], bodies: list[tuple[str, bytes]], count: int) -> None:
    for i in range(count):
        content_type, body = bodies[i % len(bodies)]
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": BATCH_PATH,
            "raw_path": BATCH_PATH.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", b"bench"),
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(body)).encode()),
            ],
            "client": ("127.0.0.1", 40000 + i % 4),
            "server": ("127.0.0.1", 8080),
            "state": {},
        }
        status = await _one_request(app, scope, body)
        if status != 200:
            raise RuntimeError(f"answer {status}")


async def _one_request(app: Callable[..., Any], scope: dict[str, Any], body: bytes) -> int:
    """The status of the app's answer to one request of ``body``."""
    sent = False
    status: list[int] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(scope, receive, send)
    return status[0]


async def _calls(app: Callable[..., Any], bodies: list[tuple[str, bytes]], count: int = 50) -> float:
    """Python calls per request on the event loop's thread (not those of a worker thread)."""
    calls = [0]

    def profile(frame: object, event: str, arg: object) -> None:
        if event == "call":
            calls[0] += 1

    sys.setprofile(profile)
    try:
        await _asgi_requests(app, bodies, count)
    finally:
        sys.setprofile(None)
    return calls[0] / count


def _per_key(work: Callable[[], object], reps: int = 200) -> float:
    """The best of five runs of ``work``, in CPU ns per key of a batch."""
    work()
    runs = []
    for _ in range(5):  # CPU time of this process: a busy machine's waits are not counted
        started = time.process_time()
        for _ in range(reps):
            work()
        runs.append((time.process_time() - started) / reps / BATCH * 1e9)
    return min(runs)


def _stages(app: Any, json_body: bytes, keys: list[bytes]) -> dict[str, float]:
    """ns per key of each stage of a hot JSON batch, on the running store's own view."""
    from service.answers import AnswerBudget, read_keys  # noqa: PLC0415
    from service.read_requests import _json_keys  # noqa: PLC0415
    from service.values import BadValues, JsonAnswer  # noqa: PLC0415

    served = app.state.registry.get("products")
    stages = {"parse the body, keys to bytes": _per_key(lambda: _json_keys(json_body, None, 10_000, "bytes"))}
    stages["longest key"] = _per_key(lambda: max(map(len, keys)))
    with served.store.view() as view:
        stages["get_many (hot-key cache)"] = _per_key(lambda: view.get_many(keys))
        values = view.get_many(keys)
        stages["duplicate check len(set())"] = _per_key(lambda: len(set(keys)) == len(keys))
        stages["answer bytes sum(map(len))"] = _per_key(lambda: sum(map(len, values)))
        stages["read_keys (all three above)"] = _per_key(lambda: read_keys(view, keys, AnswerBudget(1 << 30)))
    bad = BadValues()
    stages["JSON answer"] = _per_key(
        lambda: JsonAnswer("products", "json", "utf8", bad).batch(keys, values, "0:1")
    )
    return stages


def profile(args: argparse.Namespace) -> int:
    from service.app import create_app  # noqa: PLC0415
    from service.settings import load_settings  # noqa: PLC0415

    rng = random.Random(42)
    batches = [[_key(rng.randrange(args.keys)) for _ in range(BATCH)] for _ in range(50)]
    json_bodies = [("application/json", orjson.dumps({"keys": [k.decode() for k in b]})) for b in batches]
    arrow_bodies = [(ARROW, _arrow_body(b)) for b in batches]
    with tempfile.TemporaryDirectory(prefix="batch-path-profile-") as tmp, LocalBroker() as broker:
        _produce(broker.bootstrap_servers, args.keys)
        app = create_app(load_settings(_config(tmp, broker.bootstrap_servers)))

        async def run() -> None:
            async with _lifespan(app):
                while b'"ready"' not in await _readyz(app):
                    await asyncio.sleep(0.2)
                for name, bodies in (("JSON", json_bodies), ("Arrow", arrow_bodies)):
                    await _asgi_requests(app, bodies, 200)  # warm: every key hot
                    started, cpu = time.perf_counter(), time.process_time()
                    await _asgi_requests(app, bodies, args.profile)
                    wall = time.perf_counter() - started
                    cpu = time.process_time() - cpu  # the process's: worker threads' work too
                    print(
                        f"{name}: {wall / args.profile / BATCH * 1e9:.0f} ns per key in process, unprofiled;"
                        f" {cpu / args.profile * 1e6:.0f} us CPU per request;"
                        f" {await _calls(app, bodies):.0f} Python calls per request on the event loop"
                    )
                    profiler = cProfile.Profile()
                    profiler.enable()
                    await _asgi_requests(app, bodies, args.profile)
                    profiler.disable()
                    stats = pstats.Stats(profiler).strip_dirs().sort_stats("tottime")
                    print(f"--- {name}: {args.profile} requests, by own time ---")
                    stats.print_stats(25)
                for stage, ns in _stages(app, json_bodies[0][1], batches[0]).items():
                    print(f"{stage:32s} {ns:6.0f} ns/key")

        uvloop.run(run())
    return 0


@contextlib.asynccontextmanager
async def _lifespan(app: Callable[..., Any]) -> AsyncIterator[None]:
    """The app's lifespan, started and stopped as a server would."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    started, stopped = asyncio.Event(), asyncio.Event()
    await inbox.put({"type": "lifespan.startup"})

    async def send(message: dict[str, Any]) -> None:
        (started if message["type"].startswith("lifespan.startup") else stopped).set()

    task = asyncio.create_task(
        app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, inbox.get, send)
    )
    await started.wait()
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await stopped.wait()
        await task


async def _readyz(app: Callable[..., Any]) -> bytes:
    body = bytearray()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/readyz",
        "raw_path": b"/readyz",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"bench")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8080),
        "state": {},
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        body.extend(message.get("body", b""))

    await app(scope, receive, send)
    return bytes(body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=100_000, help="keys in the table")
    parser.add_argument("--seconds", type=float, default=6.0, help="measured seconds per contender and round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians are reported")
    parser.add_argument("--connections", type=int, default=4, help="connections of every contender")
    parser.add_argument(
        "--baseline-tree", type=Path, help="also serve this source tree's service (the code before a change)"
    )
    parser.add_argument("--profile", type=int, default=0, help="profile N requests in process instead")
    args = parser.parse_args(argv)
    return profile(args) if args.profile else compare(args)


if __name__ == "__main__":
    sys.exit(main())
