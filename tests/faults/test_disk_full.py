"""Disk full while writing: the materializer pauses and says so, reads go on, and it resumes by
itself once space is back (simulated by a cap on the size of every file the service writes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service.local_broker import LocalBroker
from store import Position
from tests.faults.conftest import ServiceFactory
from tests.support.kafka import create_topic, make_producer
from tests.support.stores import produce_tracked

pytestmark = pytest.mark.slow

CAP_BYTES = 512 * 1024
# Enough to fill the 64 MiB write buffer, whose flush then needs files far above the cap.
BIG_RECORDS = 1_100
BIG_VALUE_BYTES = 64 * 1024


def test_a_full_disk_pauses_materializing_reads_go_on_and_it_resumes_when_space_is_back(
    own_broker: LocalBroker, start_service: ServiceFactory, tmp_path: Path
) -> None:
    servers = own_broker.bootstrap_servers
    create_topic(servers, "blobs", partitions=1)
    producer = make_producer(servers, **{"message.max.bytes": 2_000_000})
    small = [(b"small-%03d" % i, b"v%d" % i) for i in range(200)]
    small_end = produce_tracked(producer, "blobs", small)
    space_back = tmp_path / "space-back"
    service = start_service(
        servers, [{"name": "blobs", "topic": "blobs", "value_format": "bytes"}], cap=(CAP_BYTES, space_back)
    )
    service.wait_ready()
    assert Position.parse(service.info("blobs")["position"]) == small_end

    big = [(b"big-%04d" % i, os.urandom(BIG_VALUE_BYTES)) for i in range(BIG_RECORDS)]
    end = small_end.merged(produce_tracked(producer, "blobs", big))

    trickle = 0

    def paused() -> bool:
        nonlocal end, trickle
        # Reads are answered, exactly, all along; a trickle of records makes the store write.
        assert service.client.get("/v1/stores/blobs/keys/small-007").content == b"v7"
        trickle += 1
        end = end.merged(produce_tracked(producer, "blobs", [(b"trickle-%04d" % trickle, b"t")]))
        return "free space" in (service.info("blobs")["last_error"] or "")

    service.wait_for(paused, 120, "the store to report that it cannot write")
    assert "Materializing is paused; reads go on" in service.log
    info = service.info("blobs")
    assert info["state"] == "READY"
    assert service.client.get("/readyz").status_code == 200
    assert service.client.get("/v1/stores/blobs/keys/small-199").content == b"v199"
    # Records keep arriving but are not applied while the disk is full.
    end = end.merged(produce_tracked(producer, "blobs", [(b"while-full", b"f")]))
    waited = service.client.get(
        "/v1/stores/blobs/keys/while-full", params={"min_position": str(end), "timeout_ms": 1000}
    )
    assert waited.status_code == 503, waited.text
    assert waited.json()["type"] == "urn:statestore:problem:position-not-reached"

    space_back.touch()
    service.wait_for(
        lambda: (
            service.info("blobs")["state"] == "READY"
            and Position.parse(service.info("blobs")["position"]) == end
        ),
        120,
        "the store to resume and reach the end of the topic",
    )
    assert "materializing resumes" in service.log
    for i in (0, 1, BIG_RECORDS // 2, BIG_RECORDS - 1):
        key, value = big[i]
        assert service.client.get(f"/v1/stores/blobs/keys/{key.decode()}").content == value
    assert service.client.get("/v1/stores/blobs/keys/while-full").content == b"f"
    assert service.terminate() in (0, -15)
