"""The served topic deleted under a running service: librdkafka may crash (SIGSEGV) in the consumer
assigned to it. That crash ends the store's consumer process only: the service stays up, reads are
answered from the last good state with the staleness and the problem in the status, and a topic
recreated with new data is served exactly once the store has rebuilt from it."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from service.local.broker import LocalBroker
from store import Position
from tests.faults.conftest import ServiceFactory
from tests.support.kafka import create_topic, make_producer
from tests.support.processes import wait_for_consumer_process
from tests.support.stores import produce_tracked

pytestmark = pytest.mark.slow

OLD = {f"k{i:03}": f"old-{i}" for i in range(200)}
NEW = {f"k{i:03}": f"new-{i}" for i in range(100, 300)}  # half the old keys, and others


def delete_topic(servers: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.delete_topics([topic]).values():
        future.result(timeout=15)


def test_a_deleted_topic_leaves_the_service_up_and_a_recreated_one_is_served_exactly(
    own_broker: LocalBroker, start_service: ServiceFactory
) -> None:
    servers = own_broker.bootstrap_servers
    create_topic(servers, "prices", partitions=2)
    produce_tracked(make_producer(servers), "prices", [(k.encode(), v.encode()) for k, v in OLD.items()])
    service = start_service(servers, [{"name": "prices", "topic": "prices", "value_format": "string"}])
    service.wait_ready()
    keys = sorted(OLD.keys() | NEW.keys())
    wait_for_consumer_process(service.process.pid)

    delete_topic(servers, "prices")

    def reported() -> bool:
        # Reads are answered from the last good state all along.
        assert service.client.get("/v1/stores/prices/keys/k007").text == OLD["k007"]
        return 'topic "prices" does not exist' in (service.info("prices")["last_error"] or "")

    service.wait_for(reported, 60, "the store to report the topic gone")
    first = service.info("prices")["seconds_since_last_contact"]
    service.wait_for(
        lambda: service.info("prices")["seconds_since_last_contact"] > first + 1,
        30,
        "the time since the last contact to grow",
    )
    info = service.info("prices")
    assert info["state"] == "READY"
    assert service.client.get("/readyz").status_code == 200
    answer = service.client.post("/v1/stores/prices/keys:batchGet", json={"keys": keys})
    assert answer.json()["values"] == [OLD.get(key) for key in keys]
    assert service.process.poll() is None

    create_topic(servers, "prices", partitions=2)
    end = produce_tracked(
        make_producer(servers), "prices", [(k.encode(), v.encode()) for k, v in NEW.items()]
    )

    def follows() -> bool:
        info = service.info("prices")
        if info["state"] != "READY" or Position.parse(info["position"]) != end:
            return False
        answer = service.client.post("/v1/stores/prices/keys:batchGet", json={"keys": keys})
        return bool(answer.json()["values"] == [NEW.get(key) for key in keys])

    service.wait_for(follows, 120, "the store to equal the recreated topic")
    assert "was deleted and recreated" in service.log
    assert "the rebuilt copy replaced the stale one" in service.log
    service.wait_for(lambda: service.info("prices")["last_error"] is None, 30, "the error to clear")
    assert service.terminate() in (0, -15)
