"""A short soak (longer: ``python -m bench soak --seconds N``): concurrent gets, batch gets and scans
against a real ``statestore serve`` while the topic takes a steady write rate."""

from __future__ import annotations

import pytest

from service.local.broker import LocalBroker
from tests.faults.conftest import ServiceFactory
from tests.faults.soak import seed, soak
from tests.support.kafka import create_topic, make_producer

pytestmark = pytest.mark.slow

SECONDS = 30
# Generous: the soak writes ~3 MB of records; the process must not keep what it served.
MAX_GROWTH_AFTER_WARM_UP = 64 * 1024 * 1024


def test_soak_has_no_server_errors_no_position_going_back_and_flat_memory(
    own_broker: LocalBroker, start_service: ServiceFactory
) -> None:
    servers = own_broker.bootstrap_servers
    create_topic(servers, "soak", partitions=3)
    producer = make_producer(servers)
    seed(producer, "soak")
    service = start_service(servers, [{"name": "soak", "topic": "soak", "value_format": "json"}])
    service.wait_ready()

    result = soak(service.url, "soak", producer, "soak", pid=service.process.pid, seconds=SECONDS)

    assert not result.errors, result.errors[:5]
    assert result.server_errors == 0, result.answers
    assert {status for _kind, status in result.answers} <= {200, 404}, result.answers
    assert {kind for kind, _status in result.answers} == {"get", "batch", "scan"}
    assert not result.regressions, result.regressions[:5]
    assert result.records_written > 0
    warm = [rss for seconds, rss in result.rss if seconds >= SECONDS / 3]
    assert max(warm) - warm[0] < MAX_GROWTH_AFTER_WARM_UP, [rss // 2**20 for _, rss in result.rss]
    assert service.terminate() in (0, -15)
