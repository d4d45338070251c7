"""The broker stopped under read load: the service keeps answering from the last state, reports
growing staleness, and follows a broker that comes back empty (topic recreated) without a restart."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter

import httpx
import pytest

from service.local.broker import LocalBroker
from store import Position
from tests.faults.conftest import ServiceFactory, ServiceProcess
from tests.support.kafka import create_topic, make_producer
from tests.support.stores import produce_tracked

pytestmark = pytest.mark.slow

KEYS = [f"k{i:03}" for i in range(300)]


class Readers:
    """Threads reading every key over HTTP (single and batch gets) until stopped; each answer must
    be 200 and hold a value one of the two generations gave the key. They ask ``/readyz`` too: a
    replica that answers reads stays ready (``readiness``: its statuses and the states it named)."""

    def __init__(self, url: str, allowed: dict[str, set[bytes]], threads: int = 2) -> None:
        self.allowed = allowed
        self.statuses: Counter[int] = Counter()
        self.readiness: Counter[tuple[int, str]] = Counter()
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(url, n), daemon=True) for n in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def _run(self, url: str, n: int) -> None:
        with httpx.Client(base_url=url, timeout=30) as client:
            i = n
            while not self._stop.is_set():
                key = KEYS[i % len(KEYS)]
                i += 1
                single = client.get(f"/v1/stores/prices/keys/{key}")
                self.statuses[single.status_code] += 1
                if single.status_code != 200 or single.content not in self.allowed[key]:
                    self.failures.append(f"GET {key}: {single.status_code} {single.content[:80]!r}")
                batch = client.post("/v1/stores/prices/keys:batchGet", json={"keys": KEYS[:50]})
                self.statuses[batch.status_code] += 1
                if batch.status_code != 200:
                    self.failures.append(f"batchGet: {batch.status_code} {batch.text[:200]}")
                ready = client.get("/readyz")
                self.readiness[ready.status_code, ready.json()["stores"]["prices"]] += 1

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)


def gauge(service: ServiceProcess, name: str) -> float:
    match = re.search(rf'^{name}{{store="prices"}} (\S+)$', service.client.get("/metrics").text, re.M)
    assert match, f"no {name} in /metrics"
    return float(match.group(1))


def test_reads_go_on_through_a_broker_outage_and_the_store_follows_the_broker_back(
    own_broker: LocalBroker, start_service: ServiceFactory
) -> None:
    servers = own_broker.bootstrap_servers
    create_topic(servers, "prices", partitions=2)
    old = {key: b"old-" + key.encode() for key in KEYS}
    produce_tracked(make_producer(servers), "prices", [(k.encode(), v) for k, v in old.items()])
    service = start_service(servers, [{"name": "prices", "topic": "prices", "value_format": "string"}])
    service.wait_ready()
    new = {key: b"new-" + key.encode() for key in KEYS}
    readers = Readers(service.url, {key: {old[key], new[key]} for key in KEYS})
    try:
        own_broker.stop()
        outage_began, log_at_stop = time.monotonic(), len(service.log)
        service.wait_for(lambda: service.info("prices")["last_error"] is not None, 60, "a reported outage")
        first = service.info("prices")["seconds_since_last_contact"]
        last_contact = gauge(service, "statestore_last_contact_timestamp_seconds")
        service.wait_for(
            lambda: service.info("prices")["seconds_since_last_contact"] > first + 1,
            30,
            "the time since the last contact to grow",
        )
        # The time of the last contact stays where it was while the broker is away.
        assert gauge(service, "statestore_last_contact_timestamp_seconds") == pytest.approx(
            last_contact, abs=0.5
        )
        assert time.time() - gauge(service, "statestore_last_contact_timestamp_seconds") > first + 1
        info = service.info("prices")
        assert info["state"] == "READY"
        assert info["stale"] is False
        assert service.client.get("/readyz").status_code == 200
        assert service.client.get("/v1/stores/prices/keys/k007").content == old["k007"]

        # librdkafka's reports of the outage: one line per distinct problem a minute, saying what
        # to do, none of them raw (about twenty a second, each twice, before).
        outage = service.log[log_at_stop:]
        unreachable = [line for line in outage.splitlines() if "cannot reach the Kafka broker at" in line]
        assert 1 <= len(unreachable) <= 1 + (time.monotonic() - outage_began) // 60, unreachable
        assert "kafka.bootstrap_servers" in unreachable[0]
        assert "%3|" not in outage
        assert "GroupCoordinator" not in outage

        # The broker comes back empty at the same address: the topic is recreated with new values.
        own_broker.start()
        create_topic(servers, "prices", partitions=2)
        end = produce_tracked(make_producer(servers), "prices", [(k.encode(), v) for k, v in new.items()])

        def follows() -> bool:
            info = service.info("prices")
            if info["state"] != "READY" or Position.parse(info["position"]) != end:
                return False
            answer = service.client.post("/v1/stores/prices/keys:batchGet", json={"keys": KEYS})
            return bool(answer.json()["values"] == [new[key].decode() for key in KEYS])

        service.wait_for(follows, 120, "the store to equal the recreated topic")
        # The outage is over: its error no longer shows (records and metadata answers go through).
        service.wait_for(lambda: service.info("prices")["last_error"] is None, 30, "the error to clear")
        assert service.info("prices")["seconds_since_last_contact"] < first + 1
        assert gauge(service, "statestore_last_contact_timestamp_seconds") > last_contact + 1
        assert gauge(service, "statestore_stale") == 0
    finally:
        readers.stop()
    assert not readers.failures, readers.failures[:5]
    assert set(readers.statuses) == {200}, readers.statuses
    assert readers.statuses[200] > 100
    assert {status for status, _ in readers.readiness} == {200}, readers.readiness
    assert "reads are served from the last good copy until then (stale)" in service.log
    assert "%3|" not in service.log
    assert "the rebuilt copy replaced the stale one" in service.log
