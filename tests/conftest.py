"""Session fixtures: the real local Kafka-protocol broker, and factories for topics."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from service.local.broker import LocalBroker
from tests.support.kafka import close_producers, create_topic, unique_topic


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """One embedded Tansu broker for the whole test session, on a free loopback port."""
    log = tmp_path_factory.mktemp("broker") / "tansu.log"
    with LocalBroker(log_path=log) as running:
        yield running
        close_producers(running.bootstrap_servers)


@pytest.fixture
def make_topic(broker: LocalBroker) -> Callable[..., str]:
    """Factory: create a fresh compacted topic on the session broker and return its name."""

    def make(partitions: int = 3, prefix: str = "t") -> str:
        topic = unique_topic(prefix)
        create_topic(broker.bootstrap_servers, topic, partitions)
        return topic

    return make


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path
