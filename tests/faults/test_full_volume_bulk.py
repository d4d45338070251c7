"""A volume that fills during a bulk restore (``state_dir`` on a real 20 MB tmpfs, the restore's
worker processes writing SST files): one line says so and the store restores record by record,
pausing like any write to a full volume; never a traceback at every retry. Once space is freed it
restores exactly."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from service.local.broker import LocalBroker
from store import StoreState
from tests.faults.conftest import StoreFactory
from tests.support.kafka import latest_per_key, make_producer
from tests.support.stores import bulk_tuning, produce_tracked, read_table

pytestmark = pytest.mark.slow

RECORDS = 2_500  # incompressible values of 4 KiB: 10 MiB, more than the volume has free at first


def test_a_volume_that_fills_during_a_bulk_restore_pauses_with_one_line_and_restores_once_freed(
    broker: LocalBroker,
    make_topic: Callable[..., str],
    start_store: StoreFactory,
    small_volume: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    topic = make_topic(partitions=2)
    producer = make_producer(broker.bootstrap_servers, **{"linger.ms": 50})
    records = [(b"k-%05d" % i, os.urandom(4_096)) for i in range(RECORDS)]
    end = produce_tracked(producer, topic, records)
    # Room for the data once this goes: the operator frees it when the store says the volume is full.
    ballast = small_volume / "ballast"
    ballast.write_bytes(b"\0" * 14 * 1024 * 1024)
    # Chunks of 500 records (2 MiB files): the volume fills some chunks into the restore.
    tuning = bulk_tuning(min_records=1, chunk_records=500, write_buffer_bytes=4 * 1024 * 1024)
    store = start_store(topic, tuning=tuning, state_dir=small_volume / "state")

    deadline = time.monotonic() + 120
    while "free space" not in (store.status().last_error or ""):
        assert time.monotonic() < deadline, f"the store never said its volume is full: {store.status()}"
        assert store.state is not StoreState.FAILED, store.status()
        time.sleep(0.05)
    # Several backoffs (0.05 s to 0.5 s) pass: no retry loop, no traceback.
    time.sleep(3)
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "materializer error" in m], messages[-5:]
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    bulk = [m for m in messages if "the bulk restore cannot write its files" in m]
    assert len(bulk) == 1, bulk
    # Then at most the pauses of writes to a full volume (RocksDB may resume once, when the file
    # it failed to write is gone): not a line at every retry.
    full = [m for m in messages if "free space" in m]
    assert len(full) <= 3, full

    ballast.unlink()
    assert store.wait_until_ready(120), store.status()
    assert store.wait_for_position(end, 60), store.status()
    with store.view() as view:
        assert read_table(view) == latest_per_key(records)
    assert store.status().last_error is None
