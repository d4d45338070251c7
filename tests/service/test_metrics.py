"""GET /metrics: request counts and latencies per route template, and store figures."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import platform
import time
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from store import (
    IndexSpec,
    InMemoryStore,
    Position,
    RestoreMode,
    RestoreProgress,
)
from store.freshness import FreshnessHistogram
from tests.service.conftest import RestoringStore, Service, product_store
from tests.support.scenes import ShownStore


def samples(service: Service) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = service.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def test_requests_are_counted_per_route_template_and_status(service: Service) -> None:
    for key in ("p1", "p2", "nope"):
        service.client.get(f"/v1/stores/products/keys/{key}")
    service.client.get("/no/such/route")
    found = samples(service)
    route = "/v1/stores/{store}/keys/{key:path}"
    ok = frozenset({("method", "GET"), ("route", route), ("code", "200")})
    missing = frozenset({("method", "GET"), ("route", route), ("code", "404")})
    assert found[("statestore_http_requests_total", ok)] == 2
    assert found[("statestore_http_requests_total", missing)] == 1
    assert found[("statestore_http_request_duration_seconds_count", ok)] == 2
    unmatched = frozenset({("method", "GET"), ("route", "unmatched"), ("code", "404")})
    assert found[("statestore_http_requests_total", unmatched)] == 1


def test_batch_gets_are_counted_per_route_template_and_status(service: Service) -> None:
    url = "/v1/stores/{}/keys:batchGet"
    assert service.client.post(url.format("products"), json={"keys": ["p1", "nope"]}).status_code == 200
    assert service.client.post(url.format("products"), json={"keys": [1]}).status_code == 400
    assert (
        service.client.post(
            url.format("products"), content=b"x", headers={"content-type": "text/plain"}
        ).status_code
        == 415
    )
    assert service.client.post(url.format("nosuch"), json={"keys": ["p1"]}).status_code == 404
    found = samples(service)

    def count(status: str) -> float:
        labels = frozenset({("method", "POST"), ("route", url.format("{store}")), ("code", status)})
        return found[("statestore_http_requests_total", labels)]

    assert [count(status) for status in ("200", "400", "415", "404")] == [1, 1, 1, 1]
    ok = frozenset({("method", "POST"), ("route", url.format("{store}")), ("code", "200")})
    assert found[("statestore_http_request_duration_seconds_count", ok)] == 1


def test_store_figures(service: Service) -> None:
    found = samples(service)
    products = frozenset({("store", "products")})
    assert found[("statestore_records_applied_total", products)] == 4
    assert found[("statestore_keys", products)] == 4
    assert found[("statestore_position", frozenset({("store", "products"), ("partition", "2")}))] == 2
    assert found[("statestore_lag_records", frozenset({("store", "products"), ("partition", "0")}))] == 0
    assert found[("statestore_state", frozenset({("store", "products"), ("state", "READY")}))] == 1
    assert found[("statestore_state", frozenset({("store", "products"), ("state", "RESTORING")}))] == 0
    assert found[("statestore_restore_waiting", products)] == 0


def test_a_store_waiting_for_a_bulk_restore_slot_is_shown(make_service: Callable[..., Service]) -> None:
    waiting = RestoreProgress(
        records_applied=0,
        records_remaining=250_000,
        records_per_second=0.0,
        target=Position({0: 250_000}),
        mode=RestoreMode.WAITING,
    )
    service = make_service({"queued": RestoringStore("queued", waiting)})
    found = samples(service)
    queued = frozenset({("store", "queued")})
    assert found[("statestore_restore_waiting", queued)] == 1
    assert found[("statestore_restore_remaining_records", queued)] == 250_000


def test_index_lookups_and_as_of_reads_are_counted_per_route_template(
    make_service: Callable[..., Service],
) -> None:
    store = InMemoryStore("positions", indexes=[IndexSpec("by_ticker", "ticker")], keeps_history=True)
    store.apply([(0, 0, b"pos-1", b'{"ticker":"AAPL"}'), (0, 1, b"pos-1", b'{"ticker":"MSFT"}')])
    config = {
        "name": "positions",
        "topic": "positions",
        "value_format": "json",
        "indexes": [{"name": "by_ticker", "field": "ticker"}],
        "history": {"retention_offsets": 100},
    }
    service = make_service({"positions": store}, configs=[config])
    for ticker in ("AAPL", "MSFT", "IBM"):
        service.client.get(f"/v1/stores/positions/indexes/by_ticker/{ticker}")
    service.client.get("/v1/stores/positions/indexes/by_name/AAPL")
    service.client.post("/v1/stores/positions/indexes/by_ticker:batchGet", json={"values": ["AAPL"]})
    assert service.client.get("/v1/stores/positions/keys/pos-1", params={"as_of": "0:1"}).status_code == 200
    service.client.get("/v1/stores/positions/keys/pos-1", params={"as_of": "x"})
    found = samples(service)

    def count(method: str, route: str, status: str) -> float:
        labels = frozenset({("method", method), ("route", route), ("code", status)})
        return found[("statestore_http_requests_total", labels)]

    lookup = "/v1/stores/{store}/indexes/{index}/{value:path}"
    assert count("GET", lookup, "200") == 3
    assert count("GET", lookup, "404") == 1
    assert count("POST", "/v1/stores/{store}/indexes/{index}:batchGet", "200") == 1
    assert count("GET", "/v1/stores/{store}/keys/{key:path}", "200") == 1
    assert count("GET", "/v1/stores/{store}/keys/{key:path}", "400") == 1


def test_build_info_names_the_running_versions(service: Service) -> None:
    [(labels, value)] = [
        (dict(labels), value)
        for (name, labels), value in samples(service).items()
        if name == "statestore_build_info"
    ]
    assert value == 1
    assert labels["version"] == importlib.metadata.version("statestore")
    assert labels["python"] == platform.python_version()
    assert labels["librdkafka"]
    assert labels["rocksdict"]


def test_restore_progress_and_time_left(make_service: Callable[..., Service]) -> None:
    progress = RestoreProgress(
        records_applied=300, records_remaining=900, records_per_second=150.0, target=Position({0: 1200})
    )
    stalled = dataclasses.replace(progress, records_per_second=0.0)
    stores = {
        "restoring": RestoringStore("restoring", progress),
        "stalled": RestoringStore("stalled", stalled),
        "products": product_store(),
    }
    service = make_service(stores)
    found = samples(service)
    restoring, stalled_store = frozenset({("store", "restoring")}), frozenset({("store", "stalled")})
    products = frozenset({("store", "products")})
    assert found[("statestore_restore_progress_ratio", restoring)] == 0.25
    assert found[("statestore_restore_eta_seconds", restoring)] == 6.0
    assert ("statestore_restore_eta_seconds", stalled_store) not in found, (
        "an unknown time left has no sample"
    )
    assert found[("statestore_restore_progress_ratio", products)] == 1.0
    assert found[("statestore_restore_eta_seconds", products)] == 0.0


def test_last_contact_is_a_unix_timestamp(make_service: Callable[..., Service]) -> None:
    store = ShownStore("products", seconds_since_last_contact=30.0)
    service = make_service({"products": store})
    before = time.time()
    contact = samples(service)[
        ("statestore_last_contact_timestamp_seconds", frozenset({("store", "products")}))
    ]
    assert before - 31 <= contact <= time.time() - 29


def test_freshness_is_a_histogram_per_store(make_service: Callable[..., Service]) -> None:
    histogram = FreshnessHistogram()
    for delay_ms in (3, 80, 400, 400_000):
        histogram.observe(1_000_000 - delay_ms, 1_000.0)
    service = make_service({"products": ShownStore("products", freshness=histogram.snapshot)})
    found = samples(service)

    def bucket(le: str) -> float:
        return found[("statestore_freshness_seconds_bucket", frozenset({("store", "products"), ("le", le)}))]

    assert [bucket(le) for le in ("0.005", "0.1", "0.5", "300.0", "+Inf")] == [1, 2, 3, 3, 4]
    assert found[("statestore_freshness_seconds_count", frozenset({("store", "products")}))] == 4
    total = found[("statestore_freshness_seconds_sum", frozenset({("store", "products")}))]
    assert abs(total - 400.483) < 1e-6


def test_process_metrics_are_exported(service: Service) -> None:
    figures = {name: value for (name, _), value in samples(service).items()}
    # The service's own process: a resident size of at least a few MiB, the open files, CPU used.
    assert figures["process_resident_memory_bytes"] > 4 * 2**20
    assert figures["process_virtual_memory_bytes"] >= figures["process_resident_memory_bytes"]
    assert figures["process_open_fds"] >= 1
    assert "process_cpu_seconds_total" in figures
    assert "python_info" in figures
