"""``kill -9`` of the service under concurrent reads and writes, repeatedly: after every restart the
store, once READY, holds exactly the topic's last value per key, and no reader ever saw a READY
answer older than one it had seen before, across the kills."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable

import httpx
import pytest

from service.local.broker import LocalBroker, free_port
from store import Position
from tests.faults.conftest import ServiceFactory, ServiceProcess
from tests.support.kafka import create_topic
from tests.support.writers import KeyedWriter

pytestmark = pytest.mark.slow

KEYS = 2_000
KILLS = 3


class Readers:
    """Threads doing single and batch gets; the service may be down or restoring, never wrong."""

    def __init__(self, url: str, threads: int = 2) -> None:
        self.statuses: Counter[int | str] = Counter()
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(url,), daemon=True) for _ in range(threads)]
        for thread in self._threads:
            thread.start()

    def _run(self, url: str) -> None:
        rng = random.Random()
        last = Position()  # the newest position a READY answer showed this reader
        with httpx.Client(base_url=url, timeout=10) as client:
            while not self._stop.is_set():
                try:
                    if rng.random() < 0.5:
                        answer = client.get(f"/v1/stores/kv/keys/key-{rng.randrange(KEYS):04}")
                    else:
                        keys = [f"key-{rng.randrange(KEYS):04}" for _ in range(100)]
                        answer = client.post("/v1/stores/kv/keys:batchGet", json={"keys": keys})
                except httpx.TransportError:
                    self.statuses["down"] += 1
                    self._stop.wait(0.02)
                    continue
                self.statuses[answer.status_code] += 1
                if answer.status_code in (200, 404):
                    position = Position.parse(answer.headers["Statestore-Position"])
                    if not position.reaches(last):
                        self.failures.append(f"position went back from {last} to {position}")
                    last = position
                elif answer.json().get("type") != "urn:statestore:problem:store-not-ready":
                    self.failures.append(f"{answer.status_code}: {answer.text[:200]}")

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)


def applied_past(service: ServiceProcess, applied: int) -> Callable[[], bool]:
    return lambda: bool(service.info("kv")["records_applied_total"] > applied)


def at_position(service: ServiceProcess, end: Position) -> Callable[[], bool]:
    return lambda: Position.parse(service.info("kv")["position"]) == end


def test_kill_9_under_load_repeatedly_then_every_key_is_exact(
    own_broker: LocalBroker, start_service: ServiceFactory
) -> None:
    servers = own_broker.bootstrap_servers
    create_topic(servers, "kv", partitions=3)
    writer = KeyedWriter(
        servers, "kv", seed=5, keys=KEYS, key_format=b"key-%04d", tombstone_every=8, burst=10, pace=0.02
    )
    stores = [{"name": "kv", "topic": "kv", "value_format": "string"}]
    writer.resume()
    port = free_port()
    service = start_service(servers, stores, port=port)
    # The readers outlive the kills: a restarted service answers at the same address.
    readers = Readers(service.url)
    keys = [f"key-{k:04}" for k in range(KEYS)]
    try:
        for _ in range(KILLS):
            service.wait_ready()
            # Let reads and writes overlap a while in steady state, then crash.
            applied = service.info("kv")["records_applied_total"]
            service.wait_for(applied_past(service, applied + 2_000), 60, "records applied in steady state")
            service.kill()
            service = start_service(servers, stores, port=port)
            service.wait_ready()

            model, end = writer.pause()
            service.wait_for(at_position(service, end), 60, f"the end of the topic, {end}")
            values = service.client.post("/v1/stores/kv/keys:batchGet", json={"keys": keys}).json()["values"]
            table = {key.encode(): value.encode() for key, value in zip(keys, values, strict=True) if value}
            assert table == model
            writer.resume()
    finally:
        readers.stop()
        writer.close()
    assert not readers.failures, readers.failures[:5]
    assert readers.statuses[200] > 0
    assert readers.statuses["down"] > 0, "no read met a killed service"
    assert 500 not in readers.statuses
