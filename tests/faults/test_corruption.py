"""Flipped bytes in a store's table file (same size, so RocksDB opens it), under the real service:
reads answer ``503 store-corrupt``, never a 404 or a short page; status and metrics say so; the
corruption is logged once; a copy rebuilt from the topic replaces the corrupt one.

Three ways to find it: a read while READY, the verification that starts with the store, the
background verification while nobody reads. The broker is paused (SIGSTOP) while a case looks at
the corrupt state, so the rebuild cannot end before the test has seen it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest

from service.local.broker import LocalBroker
from tests.faults.conftest import ServiceFactory, ServiceProcess
from tests.support.damage import compact, flip_first_block
from tests.support.kafka import create_topic, make_producer
from tests.support.stores import produce_tracked

pytestmark = pytest.mark.slow

KEYS = 2_000
SMALLEST, LARGEST = "key-00000", f"key-{KEYS - 1:05}"  # in the first and the last data block of the table
MODEL = {f"key-{i:05}": f"value-{i:05}-" + "x" * 40 for i in range(KEYS)}
STORES = [{"name": "items", "topic": "items", "value_format": "string"}]
ARROW = "application/vnd.apache.arrow.stream"


@contextlib.contextmanager
def paused(broker: LocalBroker) -> Iterator[None]:
    """The broker stopped (SIGSTOP, its data kept) until the block ends: no rebuild can finish."""
    pid = broker.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def engine_env(**settings: str) -> dict[str, str]:
    return {f"STATESTORE_ENGINE__{name.upper()}": value for name, value in settings.items()}


def materialized(broker: LocalBroker, start_service: ServiceFactory, tmp_path: Path) -> Path:
    """Materialize ``items`` once and stop; the table's files compacted afterwards. Returns its db.

    A store soon rewrites files it flushed itself once it reopens them (RocksDB drops sequence
    numbers no snapshot needs): that rewrite would find the damage before the reads a test makes.
    """
    servers = broker.bootstrap_servers
    create_topic(servers, "items", partitions=3)
    produce_tracked(make_producer(servers), "items", [(k.encode(), v.encode()) for k, v in MODEL.items()])
    first = start_service(servers, STORES, env=engine_env(verify_interval_seconds="0"))
    first.wait_ready()
    assert first.terminate() in (0, -15)
    db = tmp_path / "state" / "items" / "db"
    compact(db)
    return db


def assert_store_corrupt(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["retry-after"]
    body = response.json()
    assert body["type"] == "urn:statestore:problem:store-corrupt"
    assert body["store"] == "items"


def arrow_keys(keys: list[str]) -> bytes:
    sink = pa.BufferOutputStream()
    table = pa.table({"key": pa.array([k.encode() for k in keys], pa.binary())})
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def assert_every_read_refused(service: ServiceProcess) -> None:
    """Every kind of read of the corrupt copy answers 503 store-corrupt, whatever block it needs."""
    client = service.client
    for key in (SMALLEST, LARGEST, "no-such-key"):
        assert_store_corrupt(client.get(f"/v1/stores/items/keys/{key}"))
    assert_store_corrupt(client.post("/v1/stores/items/keys:batchGet", json={"keys": [LARGEST, SMALLEST]}))
    assert_store_corrupt(
        client.post(
            "/v1/stores/items/keys:batchGet",
            content=arrow_keys([LARGEST, SMALLEST]),
            headers={"content-type": ARROW},
        )
    )
    assert_store_corrupt(client.get("/v1/stores/items/scan", params={"prefix": "key-", "limit": 10_000}))
    assert client.get("/readyz").status_code == 503


def metric(service: ServiceProcess, name: str) -> float:
    match = re.search(rf'^{name}{{store="items"}} (\S+)$', service.client.get("/metrics").text, re.M)
    assert match, f"no {name} in /metrics"
    return float(match.group(1))


def rebuilt(service: ServiceProcess) -> bool:
    """Whether the store is READY on a copy without corruption (a status missing during a swap: no)."""
    info = service.info("items")
    return info["state"] == "READY" and "corruption" in info and info["corruption"] is None


def assert_equals_model(service: ServiceProcess) -> None:
    """Every key answers its value (batch get), and a scan pages through exactly the model."""
    client = service.client
    keys = sorted(MODEL)
    answer = client.post("/v1/stores/items/keys:batchGet", json={"keys": keys})
    assert answer.status_code == 200, answer.text
    assert answer.json()["values"] == [MODEL[key] for key in keys]
    scanned: dict[str, str] = {}
    after: str | None = None
    while True:
        params: dict[str, Any] = {"prefix": "key-", "limit": 700, **({"after": after} if after else {})}
        page = client.get("/v1/stores/items/scan", params=params)
        assert page.status_code == 200, page.text
        scanned.update((item["key"], item["value"]) for item in page.json()["items"])
        after = page.json()["next_after"]
        if after is None:
            break
    assert scanned == MODEL


def test_a_read_that_meets_corruption_answers_503_store_corrupt_and_the_store_rebuilds_beside_it(
    own_broker: LocalBroker, start_service: ServiceFactory, tmp_path: Path
) -> None:
    db = materialized(own_broker, start_service, tmp_path)
    service = start_service(own_broker.bootstrap_servers, STORES, env=engine_env(verify_interval_seconds="0"))
    service.wait_ready()
    with paused(own_broker):
        flipped = flip_first_block(db, SMALLEST.encode())
        # The first read of the damaged block: an error, not 404 key-not-found.
        assert_store_corrupt(service.client.get(f"/v1/stores/items/keys/{SMALLEST}"))
        assert_every_read_refused(service)
        service.wait_for(lambda: service.info("items")["state"] == "REBUILDING", 60, "the rebuild to begin")
        info = service.info("items")
        assert info["corruption"]["found_by"] == "read"
        assert info["corruption"]["file"] == str(flipped)
        assert "Corruption" in info["corruption"]["detail"]
        assert info["corruptions_found"] == 1
        assert info["stale"] is False  # the corrupt copy answers nothing, stale or not
        assert metric(service, "statestore_corrupt") == 1
        assert metric(service, "statestore_corruptions_found_total") == 1
        assert_every_read_refused(service)
        assert service.log.count("found corruption") == 1, service.log[-3000:]
        assert "a read found corruption in its copy" in service.log
    service.wait_for(
        lambda: rebuilt(service),
        60,
        "the rebuilt copy to replace the corrupt one",
    )
    assert_equals_model(service)
    info = service.info("items")
    assert info["records_applied_total"] == KEYS, "the store was not rebuilt from the topic"
    assert info["corruptions_found"] == 1
    assert metric(service, "statestore_corrupt") == 0
    assert "the rebuilt copy replaced the corrupt one" in service.log
    assert service.log.count("found corruption") == 1


def test_corruption_that_happened_while_the_store_was_stopped_is_found_when_it_starts(
    own_broker: LocalBroker, start_service: ServiceFactory, tmp_path: Path
) -> None:
    # The verification's first pass starts with the store; no read is made until it is rebuilt.
    db = materialized(own_broker, start_service, tmp_path)
    flip_first_block(db, SMALLEST.encode())
    restarted = start_service(own_broker.bootstrap_servers, STORES)
    restarted.wait_for(
        lambda: restarted.info("items").get("corruptions_found") == 1, 60, "the corruption to be found"
    )
    restarted.wait_for(
        lambda: rebuilt(restarted),
        60,
        "the store to be rebuilt",
    )
    assert "the background verification found corruption" in restarted.log
    assert_equals_model(restarted)
    assert restarted.info("items")["records_applied_total"] == KEYS, (
        "the store was not rebuilt from the topic"
    )
    assert restarted.log.count("found corruption") == 1


def test_the_background_verification_finds_corruption_nobody_read_and_a_restart_discards_the_copy(
    own_broker: LocalBroker, start_service: ServiceFactory, tmp_path: Path
) -> None:
    db = materialized(own_broker, start_service, tmp_path)
    environment = engine_env(verify_interval_seconds="0.2")
    service = start_service(own_broker.bootstrap_servers, STORES, env=environment)
    service.wait_ready()
    passes = service.info("items")["verification_passes"]
    service.wait_for(lambda: service.info("items")["verification_passes"] > passes, 60, "a clean pass")
    assert metric(service, "statestore_verification_passes_total") >= 1
    with paused(own_broker):
        flipped = flip_first_block(db, SMALLEST.encode())
        service.wait_for(lambda: service.info("items").get("corruptions_found") == 1, 60, "the verification")
        info = service.info("items")
        assert info["corruption"]["found_by"] == "verification"
        assert info["corruption"]["file"] == str(flipped)
        assert metric(service, "statestore_corrupt") == 1
        assert_every_read_refused(service)
        assert "the background verification found corruption" in service.log
        # A crash before the rebuild ends: the next start must not serve the corrupt copy.
        service.kill()
    restarted = start_service(own_broker.bootstrap_servers, STORES, env=environment)
    restarted.wait_ready()
    assert "was found corrupt before this start" in restarted.log
    assert "will be rebuilt from the topic" in restarted.log
    assert_equals_model(restarted)
    assert restarted.info("items")["records_applied_total"] == KEYS, (
        "the store was not rebuilt from the topic"
    )
