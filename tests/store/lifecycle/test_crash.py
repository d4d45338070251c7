"""Crash safety: a store process killed with SIGKILL anywhere (bulk bootstrap, WriteBatch bootstrap,
steady state) while a producer keeps writing restarts into exactly the topic's last value per key."""

from __future__ import annotations

import dataclasses
import functools
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from service.local.broker import LocalBroker
from store import Store, StoreTuning
from tests.support.kafka import latest_per_key, make_producer
from tests.support.stores import (
    StoreProcess,
    assert_equals_model,
    mixed_records,
    produce_tracked,
    tuning_settings,
)
from tests.support.writers import KeyedWriter

pytestmark = pytest.mark.slow

BASE_RECORDS = 200_000


@dataclasses.dataclass(frozen=True)
class Kill:
    """When to kill: during the bootstrap once ``restore_applied`` reaches ``applied`` (unless the
    store got READY first), or ``delay`` seconds into steady state."""

    during_bootstrap: bool
    applied: int = 0
    delay: float = 0.0


CHAINS = {
    # The bulk path: several SST chunks per bootstrap.
    "bulk": (
        StoreTuning().replace(
            bulk_load_min_records=1_000,
            bulk_load_chunk_records=20_000,
            poll_max_records=2_000,
            checkpoint_interval_seconds=0.3,
            metadata_check_interval_seconds=1.0,
            backoff_initial_seconds=0.05,
            backoff_max_seconds=0.5,
        ),
        [
            Kill(True, applied=20_000),
            Kill(True, applied=60_000),
            Kill(False, delay=0.4),
            Kill(False, delay=0.05),
        ],
    ),
    # The WriteBatch path, with a small write buffer so memtables are flushed mid-bootstrap.
    "batch": (
        StoreTuning().replace(
            bulk_load_min_records=0,
            write_buffer_bytes=512 * 1024,
            poll_max_records=1_000,
            checkpoint_interval_seconds=0.3,
            metadata_check_interval_seconds=1.0,
            backoff_initial_seconds=0.05,
            backoff_max_seconds=0.5,
        ),
        [
            Kill(True, applied=10_000),
            Kill(True, applied=50_000),
            Kill(False, delay=0.5),
            Kill(False, delay=0.1),
        ],
    ),
}


def reached(status: dict[str, Any], applied: int) -> bool:
    """The child's status line shows ``applied`` records restored, or the store READY."""
    restoring = status["state"] in ("RESTORING", "REBUILDING")
    return status["state"] == "READY" or (restoring and (status["restore_applied"] or 0) >= applied)


@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_kill_9_anywhere_then_restart_equals_the_model(
    broker: LocalBroker,
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    tmp_path: Path,
    chain: str,
) -> None:
    tuning, kills = CHAINS[chain]
    topic = make_topic(partitions=3)
    seed = mixed_records(BASE_RECORDS, keys=50_000, seed=21)
    seed_end = produce_tracked(make_producer(broker.bootstrap_servers, **{"linger.ms": 50}), topic, seed)
    state_dir = tmp_path / "crashing"
    settings: dict[str, Any] = {
        "bootstrap_servers": broker.bootstrap_servers,
        "topic": topic,
        "state_dir": str(state_dir),
        "name": chain,
        "tuning": tuning_settings(tuning),
    }
    writer = KeyedWriter(broker.bootstrap_servers, topic, seed=len(chain), keys=60_000)
    rng = random.Random(22)
    killed_during_bootstrap = 0
    try:
        for number, kill in enumerate(kills):
            writer.resume()
            child = StoreProcess(settings)
            try:
                if kill.during_bootstrap:
                    line = child.wait_for(functools.partial(reached, applied=kill.applied), 120)
                    killed_during_bootstrap += line["state"] != "READY"
                    time.sleep(rng.uniform(0, 0.02))
                else:
                    child.wait_for(lambda s: s["state"] == "READY", 120)
                    time.sleep(kill.delay)
            finally:
                child.kill()
            model, end = writer.pause(seed, seed_end)

            # Restart a copy of what the crash left behind: it must become exactly the model.
            copy = tmp_path / f"after-kill-{number}"
            shutil.copytree(state_dir, copy)
            restarted = make_store(topic, name=chain, tuning=tuning, directory=copy)
            assert restarted.wait_until_ready(120), restarted.status()
            assert_equals_model(restarted, model, end)
            restarted.stop()
            shutil.rmtree(copy)
    finally:
        writer.close()
    # The kills must have hit the bootstrap, or the test would prove less than it claims.
    assert killed_during_bootstrap >= 1, "every bootstrap finished before its kill; make the topic larger"


@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_a_kill_once_ready_restarts_from_the_checkpoint(
    broker: LocalBroker,
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    tmp_path: Path,
    chain: str,
) -> None:
    tuning, _kills = CHAINS[chain]
    topic = make_topic(partitions=3)
    records = mixed_records(30_000, keys=9_000, seed=23)
    end = produce_tracked(make_producer(broker.bootstrap_servers), topic, records)
    child = StoreProcess(
        {
            "bootstrap_servers": broker.bootstrap_servers,
            "topic": topic,
            "state_dir": str(tmp_path),
            "name": chain,
            "tuning": tuning_settings(tuning),
        }
    )
    try:
        child.wait_for(lambda s: s["state"] == "READY", 120)  # a store checkpoints as it gets READY
    finally:
        child.kill()

    restarted = make_store(topic, name=chain, tuning=tuning, directory=tmp_path)
    assert restarted.wait_until_ready(60), restarted.status()
    assert_equals_model(restarted, latest_per_key(records), end)
    # Nothing was read again: data and offsets were on disk together.
    assert restarted.status().records_applied_total == 0
