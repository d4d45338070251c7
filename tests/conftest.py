"""Session fixtures: the real local Kafka-protocol broker, and factories for topics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from service.local.broker import LocalBroker
from tests.support.kafka import close_producers, create_topic, unique_topic


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test gets a node id of its own, and on several workers the slow files go out first."""
    _unique_node_ids(items)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker
        _slow_files_first(items)


def _unique_node_ids(items: list[pytest.Item]) -> None:
    """schemathesis names each operation's test ``test[GET /path]`` but gives all of them the test
    function's node id; pytest-xdist hands out tests by node id and would run one of them only. A
    test whose id is shared takes its name as the last part of its id; ids still shared stop the run."""
    counts = Counter(item.nodeid for item in items)
    for item in items:
        if counts[item.nodeid] > 1:
            unique = f"{item.nodeid.rpartition('::')[0]}::{item.name}"
            if hasattr(item, "_id"):  # pytest 9 keeps the id parsed
                item._id = type(item._id).parse(unique)
            else:
                item._nodeid = unique
    shared = [nodeid for nodeid, count in Counter(item.nodeid for item in items).items() if count > 1]
    if shared:
        raise pytest.UsageError(f"tests share node ids, some would not run on several workers: {shared[:5]}")


def _slow_files_first(items: list[pytest.Item]) -> None:
    """The files holding a test marked ``slow`` first (pytest-xdist, a file to each worker at a time,
    follows this order), so that the run does not end waiting on one long file while the other
    workers are idle. Files stay whole and in their order otherwise; a run on one process keeps the
    plain order."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)


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
