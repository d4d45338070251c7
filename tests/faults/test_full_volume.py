"""A full volume under a READY store (``state_dir`` on a real 20 MB tmpfs): the store stays READY and
answers reads from its last position, its staleness growing; it retries writing without reopening
its copy and creates no file meanwhile; once space is freed it catches up by itself, exactly."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.local.broker import LocalBroker
from store import Position
from tests.faults.conftest import ServiceFactory
from tests.support.kafka import create_topic, make_producer
from tests.support.stores import produce_tracked

pytestmark = pytest.mark.slow

SMALL = {f"small-{i:03}": f"v{i}" for i in range(200)}
# More than a write buffer (a quarter of the volume, 5 MiB), and incompressible: its flush needs a
# file the full volume cannot take.
BIG = {f"big-{i:03}": os.urandom(4_000).hex() for i in range(800)}
LEFT_FREE = 2 * 1024 * 1024  # less than a write buffer


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Path]:
    """A 20 MB tmpfs mounted for this test (the tests run as root)."""
    mount = tmp_path / "volume"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=False)


def fill(volume: Path, leave: int) -> Path:
    """Write a file that takes all but ``leave`` bytes of what is left on ``volume``."""
    filler = volume / "filler"
    stats = os.statvfs(volume)
    filler.write_bytes(b"\0" * (stats.f_bavail * stats.f_frsize - leave))
    return filler


def files(directory: Path) -> set[str]:
    return {str(path.relative_to(directory)) for path in directory.rglob("*")}


def test_a_full_volume_keeps_the_store_ready_and_it_catches_up_once_space_is_freed(
    own_broker: LocalBroker, start_service: ServiceFactory, small_volume: Path
) -> None:
    servers = own_broker.bootstrap_servers
    create_topic(servers, "blobs", partitions=1)
    producer = make_producer(servers)
    end = produce_tracked(producer, "blobs", [(k.encode(), v.encode()) for k, v in SMALL.items()])
    service = start_service(
        servers,
        [{"name": "blobs", "topic": "blobs", "value_format": "string"}],
        state_dir=small_volume / "state",
    )
    service.wait_ready()
    filler = fill(small_volume, LEFT_FREE)
    written = {**SMALL, **BIG}
    end = end.merged(produce_tracked(producer, "blobs", [(k.encode(), v.encode()) for k, v in BIG.items()]))

    def answered_exactly() -> None:
        assert service.client.get("/v1/stores/blobs/keys/small-007").text == "v7"
        info = service.info("blobs")
        assert info["state"] == "READY", info
        assert service.client.get("/readyz").status_code == 200

    def paused() -> bool:
        nonlocal end
        answered_exactly()
        # A trickle of records: a write after the failed flush is refused at once.
        key = f"trickle-{len(written)}"
        written[key] = "t"
        end = end.merged(produce_tracked(producer, "blobs", [(key.encode(), b"t")]))
        time.sleep(0.1)
        return "free space" in (service.info("blobs")["last_error"] or "")

    service.wait_for(paused, 120, "the store to report its volume full")
    store_dir = small_volume / "state" / "blobs"
    before = files(store_dir)
    first = service.info("blobs")["seconds_since_last_contact"]
    # Several retries (backoff from 0.2 s): the store stays READY, answers, and creates no file.
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        answered_exactly()
        time.sleep(0.2)
    assert service.info("blobs")["seconds_since_last_contact"] > first + 5
    assert files(store_dir) - before == set()  # (a failed flush's partial file may go)
    assert not [name for name in before if "LOG.old" in name]
    assert service.log.count("Materializing is paused") == 1
    assert "reopened" not in service.log

    filler.unlink()
    service.wait_for(
        lambda: Position.parse(service.info("blobs")["position"]) == end,
        120,
        "the store to catch up once space is freed",
    )
    service.wait_for(lambda: service.info("blobs")["last_error"] is None, 30, "the error to clear")
    keys = sorted(written)
    answer = service.client.post("/v1/stores/blobs/keys:batchGet", json={"keys": keys})
    assert answer.json()["values"] == [written[key] for key in keys]
    assert "materializing resumes" in service.log
    # Caught up from the copy as it was: never reopened, never RESTORING.
    assert "reopened" not in service.log
    assert service.terminate() in (0, -15)
