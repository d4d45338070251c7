"""The OpenAPI document as a contract, checked by a fuzzer against the real service.

A real uvicorn serves real RocksDB stores materialized from topics on the real broker. schemathesis
generates requests that the app's own OpenAPI document calls valid and checks that the service
accepts every one ("positive data acceptance": no 400, 410, 413, 415 or 422 for a request the
document allows), and that every answer matches the documented statuses, content types, headers
and shapes. Generated clients and gateways trust that document, so it must say what the service
accepts. Bounded: a fixed number of examples per operation, no example database.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import hypothesis
import orjson
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service.app import create_app
from service.local.broker import LocalBroker
from service.settings import Settings
from store import InMemoryStore
from tests.support.contract import accepts_valid_requests, follow_the_cross_location_rules
from tests.support.kafka import create_topic, produce_keyed
from tests.support.server import serve_app

# Topic names unique to this run: the broker lives for the whole test session.
RUN = time.time_ns()
STORES: list[dict[str, Any]] = [
    {"name": "products", "topic": "products", "value_format": "json"},
    {"name": "notes", "topic": "notes", "value_format": "string"},
    {"name": "blobs", "topic": "blobs", "value_format": "bytes"},
    {
        "name": "positions",
        "topic": "positions",
        "value_format": "json",
        "indexes": [{"name": "by_ticker", "field": "ticker"}],
        "history": {"retention_offsets": 1000},
    },
]


def records(store: str) -> list[tuple[bytes, bytes | None]]:
    """A few rows per store, a tombstone among them."""
    if store == "products":
        rows = [(b"p-%d" % i, orjson.dumps({"name": f"item {i}", "price": i})) for i in range(20)]
    elif store == "positions":
        rows = [(b"pos-%d" % i, orjson.dumps({"ticker": ["AAPL", "MSFT", "7"][i % 3]})) for i in range(20)]
    else:
        rows = [(b"k-%d" % i, b"value %d" % i) for i in range(20)]
    return [*rows, (rows[0][0], None)]


def wait_ready(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while httpx.get(f"{url}/readyz").status_code != 200:
        assert time.monotonic() < deadline, httpx.get(f"{url}/readyz").text
        time.sleep(0.05)


def settings(**more: Any) -> Settings:
    stores = [{**store, "topic": f"contract-{store['topic']}-{RUN}"} for store in STORES]
    limits = {"min_position_timeout_seconds": 0.05, "max_key_bytes": 256, "max_batch_keys": 50}
    return Settings(stores=stores, limits=limits, **more)


def document() -> dict[str, Any]:
    """The OpenAPI document of the service configured as below (it follows the configuration only)."""
    placeholders = {store["name"]: InMemoryStore(store["name"]) for store in STORES}
    return create_app(settings(), placeholders).openapi()


@pytest.fixture(scope="module")
def service(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real service over every kind of store, READY; yields its URL."""
    configured = settings(
        kafka={"bootstrap_servers": broker.bootstrap_servers},
        state_dir=tmp_path_factory.mktemp("contract-state"),
    )
    for store in configured.stores:
        create_topic(broker.bootstrap_servers, store.topic, partitions=3)
        produce_keyed(broker.bootstrap_servers, store.topic, records(store.name), "murmur2_random")
    app = create_app(configured)
    assert app.openapi() == document()
    with serve_app(app) as url:
        wait_ready(url)
        yield url


def no_unplanned_server_error(ctx: Any, response: Any, case: schemathesis.Case) -> bool | None:
    """Only the documented 503s (store not ready, position not reached) may be 5xx."""
    assert response.status_code < 500 or response.status_code == 503, response.text[:500]
    return None


CHECKS: list[Callable[..., Any]] = [
    accepts_valid_requests,
    response_schema_conformance,
    content_type_conformance,
    status_code_conformance,
    response_headers_conformance,
    no_unplanned_server_error,
]

fuzzed = schemathesis.openapi.from_dict(document())


@fuzzed.parametrize()
@hypothesis.settings(
    max_examples=25, deadline=None, suppress_health_check=list(hypothesis.HealthCheck), database=None
)
def test_the_service_accepts_what_its_document_allows(case: schemathesis.Case, service: str) -> None:
    follow_the_cross_location_rules(case)
    case.call_and_validate(base_url=service, checks=CHECKS, excluded_checks=[not_a_server_error])
