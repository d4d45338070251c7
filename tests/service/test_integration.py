"""The service over real stores: the real broker, real RocksDB, a real uvicorn server."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from service.app import create_app
from service.local.broker import LocalBroker, free_port
from service.settings import Settings
from store import Position
from tests.support.kafka import latest_per_key, make_producer, produce, topic_end
from tests.support.server import serve_app

REPO = Path(__file__).resolve().parents[2]


def wait_ready(client: httpx.Client, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if client.get("/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"the service was not ready within {timeout} s: {client.get('/readyz').text}")


@pytest.fixture
def real_service(
    broker: LocalBroker, make_topic: Callable[..., str], state_dir: Path
) -> Iterator[Callable[..., httpx.Client]]:
    """Factory: serve topic ``products`` with a real Store built by the app itself (``engine``:
    the settings' top-level engine section)."""
    with_clients: list[httpx.Client] = []
    servers: list[object] = []

    def serve(topic: str, engine: dict[str, Any] | None = None) -> httpx.Client:
        settings = Settings(
            kafka={"bootstrap_servers": broker.bootstrap_servers},
            state_dir=state_dir,
            stores=[{"name": "products", "topic": topic, "value_format": "json"}],
            engine=engine or {},
        )
        server = serve_app(create_app(settings))
        url = server.__enter__()
        servers.append(server)
        client = httpx.Client(base_url=url, timeout=30)
        with_clients.append(client)
        return client

    yield serve
    for client in with_clients:
        client.close()
    for server in reversed(servers):
        server.__exit__(None, None, None)  # type: ignore[attr-defined]


def test_restores_then_serves_the_latest_value_per_key(
    broker: LocalBroker, make_topic: Callable[..., str], real_service: Callable[..., httpx.Client]
) -> None:
    topic = make_topic(partitions=3)
    rng = random.Random(7)
    records: list[tuple[bytes | None, bytes | None]] = []
    for i in range(3000):
        key = f"p{rng.randrange(800):04}".encode()
        value = None if i % 17 == 0 else orjson.dumps({"key": key.decode(), "i": i})
        records.append((key, value))
    produce(broker.bootstrap_servers, topic, records)
    model = latest_per_key(records)

    client = real_service(topic)
    assert client.get("/healthz").status_code == 200
    wait_ready(client)

    keys = sorted({k for k, _ in records if k is not None})
    answer = client.post("/v1/stores/products/keys:batchGet", json={"keys": [k.decode() for k in keys]})
    assert answer.status_code == 200
    expected = [orjson.loads(model[k]) if k in model else None for k in keys]
    assert answer.json()["values"] == expected
    position = Position.parse(answer.headers["Statestore-Position"])
    assert position.total() == 3000

    some = next(iter(model))
    single = client.get(f"/v1/stores/products/keys/{some.decode()}")
    assert single.json() == orjson.loads(model[some])
    absent = next(k for k in keys if k not in model)
    assert client.get(f"/v1/stores/products/keys/{absent.decode()}").status_code == 404

    scanned: list[str] = []
    after: str | None = None
    while True:
        params = {"prefix": "p", "limit": 300, **({"after": after} if after else {})}
        page = client.get("/v1/stores/products/scan", params=params).json()
        scanned += [item["key"] for item in page["items"]]
        after = page["next_after"]
        if after is None:
            break
    assert scanned == sorted(k.decode() for k in model)

    info = client.get("/v1/stores/products").json()
    assert info["state"] == "READY"
    assert info["records_applied_total"] >= 3000
    assert info["total_lag"] == 0

    # A record produced now is served to a reader that asks for its position.
    produce(broker.bootstrap_servers, topic, [(b"fresh", b'{"fresh":true}')], partitions=1)
    wanted = Position({0: position[0] + 1})
    fresh = client.get(
        "/v1/stores/products/keys/fresh", params={"min_position": str(wanted), "timeout_ms": 20_000}
    )
    assert fresh.status_code == 200
    assert fresh.json() == {"fresh": True}
    assert Position.parse(fresh.headers["Statestore-Position"]).reaches(wanted)
    metrics = client.get("/metrics").text
    assert 'statestore_state{state="READY",store="products"} 1.0' in metrics


def _value(key: int, generation: int) -> bytes:
    check = hashlib.sha256(f"{key}:{generation}".encode()).hexdigest()
    return orjson.dumps({"key": key, "generation": generation, "check": check, "pad": "x" * (key * 37 % 300)})


def test_reads_under_concurrent_writes_are_never_torn_and_positions_never_go_back(
    broker: LocalBroker, make_topic: Callable[..., str], real_service: Callable[..., httpx.Client]
) -> None:
    topic = make_topic(partitions=1)
    keys = 50
    produce(
        broker.bootstrap_servers,
        topic,
        [(f"k{k:02}".encode(), _value(k, 0)) for k in range(keys)],
        partitions=1,
    )
    client = real_service(topic)
    wait_ready(client)

    stop = threading.Event()
    generations = [0]

    def write() -> None:
        producer = make_producer(broker.bootstrap_servers, **{"linger.ms": 1})
        generation = 0
        while not stop.is_set() and generation < 400:
            generation += 1
            # Keys are written in ascending order, one generation after the other.
            for k in range(keys):
                producer.produce(topic, key=f"k{k:02}".encode(), value=_value(k, generation), partition=0)
            producer.poll(0)
            producer.flush(10)
            generations[0] = generation
        producer.flush(10)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    last = Position()
    reads = 0
    distinct_positions: set[Position] = set()
    try:
        while writer.is_alive() and reads < 300:
            answer = client.post(
                "/v1/stores/products/keys:batchGet", json={"keys": [f"k{k:02}" for k in range(keys)]}
            )
            assert answer.status_code == 200
            position = Position.parse(answer.headers["Statestore-Position"])
            assert position.reaches(last), f"position went back from {last} to {position}"
            last = position
            distinct_positions.add(position)
            seen = [value["generation"] for value in answer.json()["values"]]
            for k, value in enumerate(answer.json()["values"]):
                assert value["key"] == k
                assert value["check"] == hashlib.sha256(f"{k}:{value['generation']}".encode()).hexdigest()
            # One snapshot: earlier keys are at the same or a newer generation than later keys,
            # and at most one generation apart.
            assert seen == sorted(seen, reverse=True), seen
            assert seen[0] - seen[-1] <= 1, seen
            # A single read on the same connection never goes back either.
            single = client.get(f"/v1/stores/products/keys/k{reads % keys:02}")
            single_position = Position.parse(single.headers["Statestore-Position"])
            assert single_position.reaches(last)
            last = single_position
            reads += 1
    finally:
        stop.set()
        writer.join(timeout=30)
    assert len(distinct_positions) > 1, "the reads never overlapped a write"
    assert generations[0] > 0


def test_statestore_serve_command(
    broker: LocalBroker, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce(broker.bootstrap_servers, topic, [(b"k1", b"one"), (b"k2", b"two")])
    port = free_port()
    config = tmp_path / "statestore.yaml"
    config.write_text(
        f"kafka:\n  bootstrap_servers: {broker.bootstrap_servers}\n"
        f"state_dir: {tmp_path / 'state'}\n"
        f"http: {{host: 127.0.0.1, port: 1}}\n"
        f"stores:\n  - {{name: notes, topic: {topic}, value_format: string}}\n"
    )
    env = {**os.environ, "STATESTORE_HTTP__PORT": str(port)}
    process = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--config", str(config)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            wait_ready(client)
            answer = client.get("/v1/stores/notes/keys/k2")
            assert answer.text == "two"
            assert answer.headers["content-type"] == "text/plain; charset=utf-8"
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    # uvicorn shuts down cleanly, then re-raises the signal so the exit status says why it ended.
    assert process.returncode in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output
    assert "auth.mode is 'open'" in output
    assert 'store "notes" stopped' in output
    assert (tmp_path / "state" / "notes").is_dir()


def test_serves_probes_while_a_store_cannot_become_ready(real_service: Callable[..., httpx.Client]) -> None:
    client = real_service("topic-that-does-not-exist")
    assert client.get("/healthz").json() == {"status": "alive"}
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["status"] == "not-ready"
    answer = client.get("/v1/stores/products/keys/p1")
    assert answer.status_code == 503
    assert answer.json()["type"] == "urn:statestore:problem:store-not-ready"
    assert int(answer.headers["Retry-After"]) >= 1
    assert client.get("/v1/stores/products").json()["state"] in {"CREATED", "RESTORING", "FAILED"}


def test_a_store_that_cannot_start_is_failed_and_named(
    make_topic: Callable[..., str], real_service: Callable[..., httpx.Client]
) -> None:
    topic = make_topic(partitions=1)
    first = real_service(topic)
    wait_ready(first)
    # A second service on the same state directory cannot lock the store's directory.
    second = real_service(topic)
    deadline = time.monotonic() + 30
    info = second.get("/v1/stores/products").json()
    while info["state"] != "FAILED" and time.monotonic() < deadline:
        time.sleep(0.05)
        info = second.get("/v1/stores/products").json()
    assert info["state"] == "FAILED"
    assert "products" in info["last_error"]
    assert second.get("/readyz").status_code == 503
    answer = second.get("/v1/stores/products/keys/x")
    assert answer.json()["type"] == "urn:statestore:problem:store-not-ready"
    assert answer.json()["state"] == "FAILED"
    # The first service is unaffected.
    assert first.get("/readyz").status_code == 200


def test_engine_settings_size_the_store_and_its_memory_is_reported(
    broker: LocalBroker, make_topic: Callable[..., str], real_service: Callable[..., httpx.Client]
) -> None:
    topic = make_topic(partitions=2)
    records: list[tuple[bytes | None, bytes | None]] = [
        (f"p{i:03}".encode(), orjson.dumps({"i": i})) for i in range(200)
    ]
    produce(broker.bootstrap_servers, topic, records)
    client = real_service(topic, engine={"block_cache_bytes": "16MiB", "read_cache_entries": 20})
    wait_ready(client)
    for i in range(100):
        assert client.get(f"/v1/stores/products/keys/p{i:03}").json() == {"i": i}

    memory = client.get("/v1/stores/products").json()["memory"]
    assert memory["block_cache_capacity_bytes"] == 16 * 1024 * 1024
    assert 0 < memory["read_cache_entries"] <= 20
    assert memory["memtable_bytes"] >= 0
    metrics = client.get("/metrics").text
    assert 'statestore_block_cache_capacity_bytes{store="products"} 1.6777216e+07' in metrics
    assert 'statestore_read_cache_entries{store="products"}' in metrics
    assert 'statestore_memtable_bytes{store="products"}' in metrics


def test_a_huge_client_cannot_starve_the_materializer(
    broker: LocalBroker, make_topic: Callable[..., str], real_service: Callable[..., httpx.Client]
) -> None:
    topic = make_topic(partitions=3)
    keys = [f"k{i:05}" for i in range(5000)]
    produce(broker.bootstrap_servers, topic, [(k.encode(), orjson.dumps({"gen": 0})) for k in keys])
    client = real_service(topic)
    wait_ready(client)

    stop = threading.Event()
    hammered = [0]
    failures: list[int] = []

    def hammer(scans: bool) -> None:
        # The biggest reads the limits allow, back to back: 5,000-key batches or 10,000-row pages.
        with httpx.Client(base_url=client.base_url, timeout=60) as huge:
            while not stop.is_set():
                if scans:
                    answer = huge.get("/v1/stores/products/scan", params={"prefix": "k", "limit": 10_000})
                else:
                    answer = huge.post("/v1/stores/products/keys:batchGet", json={"keys": keys})
                if answer.status_code != 200:
                    failures.append(answer.status_code)
                hammered[0] += 1

    threads = [threading.Thread(target=hammer, args=(n % 2 == 0,), daemon=True) for n in range(4)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 30
        while hammered[0] < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hammered[0] >= 8, "the huge client never got going"
        # While it hammers, the topic takes four more generations of every key.
        updates = [(k.encode(), orjson.dumps({"gen": gen})) for gen in (1, 2, 3, 4) for k in keys]
        produce(broker.bootstrap_servers, topic, updates)
        end = topic_end(broker.bootstrap_servers, topic)
        assert end.total() >= 25_000
        during = hammered[0]
        deadline = time.monotonic() + 120
        while Position.parse(client.get("/v1/stores/products").json()["position"]) != end:
            assert time.monotonic() < deadline, "the materializer did not reach the end under the load"
            time.sleep(0.1)
        # The materializer caught up while the huge reads went on, not after they stopped.
        assert hammered[0] > during
        assert all(thread.is_alive() for thread in threads)
        latest = client.post("/v1/stores/products/keys:batchGet", json={"keys": keys}).json()["values"]
        assert latest == [{"gen": 4}] * len(keys)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert failures == []
