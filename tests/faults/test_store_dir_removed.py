"""A store directory removed while the store serves: the store notices, takes its lock again (so
no other process can take the directory), says so in its status and log, and reads go on."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from service.local.broker import LocalBroker
from store import RestoreSlots, Store, StoreLockedError
from tests.faults.conftest import StoreFactory
from tests.support.kafka import make_producer
from tests.support.stores import produce_tracked

pytestmark = pytest.mark.slow

# Another process trying the lock as a second service on the same state_dir would.
TRY_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    sys.exit(3)
"""


def _locked_elsewhere(lock: Path) -> bool:
    done = subprocess.run([sys.executable, "-c", TRY_LOCK, str(lock)], check=False, timeout=60)
    assert done.returncode in (0, 3), done
    return done.returncode == 3


def test_a_removed_store_directory_gets_its_lock_back_and_the_store_says_so(
    broker: LocalBroker,
    make_topic: Callable[..., str],
    start_store: StoreFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="store")
    topic = make_topic(partitions=1)
    end = produce_tracked(make_producer(broker.bootstrap_servers), topic, [(b"k1", b"v1"), (b"k2", b"v2")])
    store = start_store(topic)
    assert store.wait_until_ready(60), store.status()
    assert store.wait_for_position(end, 60), store.status()
    lock = store.config.path / "statestore.lock"
    assert _locked_elsewhere(lock)

    shutil.rmtree(store.config.path)
    deadline = time.monotonic() + 60
    while "was removed while the store was serving" not in (store.status().last_error or ""):
        assert time.monotonic() < deadline, f"the store never noticed: {store.status()}"
        time.sleep(0.05)
    assert lock.is_file()
    assert _locked_elsewhere(lock)
    # A second store on the same directory is refused, as before the removal.
    with pytest.raises(StoreLockedError):
        Store(store.config, RestoreSlots(1)).start()
    assert "restart the service" in (store.status().last_error or "")
    logged = [r.getMessage() for r in caplog.records if "was removed while" in r.getMessage()]
    assert len(logged) == 1, logged
    # Reads go on from the files the store holds open.
    with store.view() as view:
        assert view.get_many([b"k1", b"k2"]) == [b"v1", b"v2"]
    store.stop()
    # Stopped, the store lets the lock go.
    assert not _locked_elsewhere(lock)
