"""A file size limit while writing (a cap on the size of every file the service writes: ``EFBIG``,
which RocksDB, unlike a full volume, does not resume from by itself): the materializer pauses and
says so, reads go on, and once the limit is lifted it reopens its copy and catches up. A full
volume proper is ``tests/faults/test_full_volume.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service.local.broker import LocalBroker
from store import Position
from tests.faults.conftest import ServiceFactory
from tests.support.kafka import create_topic, make_producer
from tests.support.stores import produce_tracked

pytestmark = pytest.mark.slow

CAP_BYTES = 512 * 1024
# Enough to fill the 64 MiB write buffer, whose flush then needs files far above the cap.
BIG_RECORDS = 1_100
BIG_VALUE_BYTES = 64 * 1024


def test_a_file_size_limit_pauses_materializing_reads_go_on_and_it_reopens_once_lifted(
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
    assert "reopened after a write error" in service.log
    service.wait_for(lambda: service.info("blobs")["last_error"] is None, 30, "the error to clear")
    for i in (0, 1, BIG_RECORDS // 2, BIG_RECORDS - 1):
        key, value = big[i]
        assert service.client.get(f"/v1/stores/blobs/keys/{key.decode()}").content == value
    assert service.client.get("/v1/stores/blobs/keys/while-full").content == b"f"
    assert service.terminate() in (0, -15)


def test_a_store_that_cannot_open_on_a_full_disk_waits_for_space_and_keeps_its_data(
    own_broker: LocalBroker, start_service: ServiceFactory, tmp_path: Path
) -> None:
    servers = own_broker.bootstrap_servers
    create_topic(servers, "notes", partitions=2)
    producer = make_producer(servers)
    first = [(b"note-%04d" % i, b"v%d" % i) for i in range(500)]
    end = produce_tracked(producer, "notes", first)
    stores = [{"name": "notes", "topic": "notes", "value_format": "bytes"}]
    service = start_service(servers, stores)
    service.wait_ready()
    assert service.terminate() in (0, -15)
    db = tmp_path / "state" / "notes" / "db"
    tables = sorted(p.name for p in db.glob("*.sst"))
    assert tables, "the clean stop flushed the table to SST files"

    # RocksDB must write its OPTIONS file (several KiB) to open; with files capped below that the
    # volume is full as far as the store can tell. Records keep arriving meanwhile.
    end = end.merged(produce_tracked(producer, "notes", [(b"later", b"l")]))
    space_back = tmp_path / "space-back"
    service = start_service(servers, stores, cap=(2048, space_back))
    service.wait_for(
        lambda: "volume is full" in (service.info("notes")["last_error"] or ""),
        60,
        "the store to report that its volume is full",
    )
    assert service.info("notes")["state"] != "FAILED"
    assert "Materializing is paused" in service.log
    assert "will be rebuilt" not in service.log
    assert service.client.get("/healthz").status_code == 200
    assert service.client.get("/readyz").status_code == 503
    # Not mistaken for corruption: the stored table is still there, untouched.
    assert set(tables) <= {p.name for p in db.glob("*.sst")}

    space_back.touch()
    service.wait_for(
        lambda: (
            service.info("notes")["state"] == "READY"
            and Position.parse(service.info("notes")["position"]) == end
        ),
        120,
        "the store to open once space is back and reach the end of the topic",
    )
    assert "materializing resumes" in service.log
    # Resumed from its stored offsets, not rebuilt from the start.
    assert "rebuilding" not in service.log
    assert service.info("notes")["last_error"] is None
    assert service.client.get("/v1/stores/notes/keys/note-0123").content == b"v123"
    assert service.client.get("/v1/stores/notes/keys/later").content == b"l"
    assert service.terminate() in (0, -15)
