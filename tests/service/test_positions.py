"""min_position: reads wait (bounded) for the store to reach a position, then answer or 503."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import pytest

from tests.service.conftest import Service, WatchedStore, apply_once_waited, assert_problem


@pytest.fixture
def behind(make_service: Callable[..., Service]) -> tuple[Service, WatchedStore]:
    store = WatchedStore("products")
    store.apply([(0, 0, b"p1", b'{"v":1}'), (1, 0, b"p2", b'{"v":1}')])
    return make_service({"products": store}), store


def test_reached_position_answers_at_once(behind: tuple[Service, WatchedStore]) -> None:
    service, _ = behind
    response = service.client.get("/v1/stores/products/keys/p1", params={"min_position": "0:1,1:1"})
    assert response.status_code == 200
    assert response.headers["Statestore-Position"] == "0:1,1:1"


def test_read_waits_until_the_position_is_reached(behind: tuple[Service, WatchedStore]) -> None:
    service, store = behind
    writer = apply_once_waited(store, [(0, 1, b"p1", b'{"v":2}'), (0, 2, b"p3", b"{}")])
    try:
        response = service.client.get(
            "/v1/stores/products/keys/p1", params={"min_position": "0:3", "timeout_ms": 10_000}
        )
    finally:
        writer.join()
    assert response.status_code == 200
    assert response.json() == {"v": 2}
    assert response.headers["Statestore-Position"] == "0:3,1:1"


def test_batch_and_scan_wait_too(behind: tuple[Service, WatchedStore]) -> None:
    service, store = behind
    writer = apply_once_waited(store, [(2, 0, b"p9", b'{"v":9}')])
    try:
        batch = service.client.post(
            "/v1/stores/products/keys:batchGet", params={"min_position": "2:1"}, json={"keys": ["p9"]}
        )
    finally:
        writer.join()
    assert batch.json()["values"] == [{"v": 9}]
    scan = service.client.get("/v1/stores/products/scan", params={"min_position": "2:1", "prefix": "p9"})
    assert [item["key"] for item in scan.json()["items"]] == ["p9"]


def test_position_not_reached_in_time_is_503(behind: tuple[Service, WatchedStore]) -> None:
    service, _ = behind
    response = service.client.get(
        "/v1/stores/products/keys/p1", params={"min_position": "0:100", "timeout_ms": 100}
    )
    body = assert_problem(response, 503, "position-not-reached")
    assert body["store"] == "products"
    assert body["position"] == "0:1,1:1"
    assert body["min_position"] == "0:100"
    assert response.headers["Retry-After"] == "1"
    assert response.headers["Statestore-Position"] == "0:1,1:1"


def test_configured_timeout_bounds_the_wait(make_service: Callable[..., Service]) -> None:
    service = make_service(limits={"min_position_timeout_seconds": 0.1})
    response = service.client.get(
        "/v1/stores/products/keys/p1", params={"min_position": "0:100", "timeout_ms": 3_600_000}
    )
    assert "0.1 s" in assert_problem(response, 503, "position-not-reached")["detail"]


@pytest.mark.parametrize(
    "position", ["zz", "0:1,0:2", "0:-1", "a:b", "0:1,", "\uff11:1", "0:\u0661", "0:1_0", "0:1,,1:2"]
)
def test_malformed_min_position(behind: tuple[Service, WatchedStore], position: str) -> None:
    service, _ = behind
    response = service.client.get("/v1/stores/products/keys/p1", params={"min_position": position})
    assert_problem(response, 400, "invalid-position")


@pytest.mark.parametrize("timeout_ms", ["1_000", "\uff11", "1e3", "0x10"])
def test_integer_parameters_take_ascii_digits_only(
    behind: tuple[Service, WatchedStore], timeout_ms: str
) -> None:
    service, _ = behind
    response = service.client.get(
        "/v1/stores/products/keys/p1", params={"min_position": "0:1", "timeout_ms": timeout_ms}
    )
    assert_problem(response, 422, "invalid-parameter")


def test_malformed_timeout(behind: tuple[Service, WatchedStore]) -> None:
    service, _ = behind
    response = service.client.get(
        "/v1/stores/products/keys/p1", params={"min_position": "0:1", "timeout_ms": "x"}
    )
    assert_problem(response, 422, "invalid-parameter")


def test_request_timeout_cuts_a_long_wait(make_service: Callable[..., Service]) -> None:
    service = make_service(limits={"request_timeout_ms": 200, "min_position_timeout_seconds": 30})
    response = service.client.get("/v1/stores/products/keys/p1", params={"min_position": "0:100"})
    body = assert_problem(response, 503, "request-timeout")
    assert body["instance"] == "/v1/stores/products/keys/p1"
    assert response.headers["Retry-After"] == "1"
    assert service.client.get("/v1/stores/products/keys/p1").status_code == 200


def test_too_many_requests_in_flight(make_service: Callable[..., Service]) -> None:
    store = WatchedStore("products")
    store.apply([(0, 0, b"p1", b'{"v":1}')])
    service = make_service({"products": store}, limits={"max_concurrent_requests": 1})
    waiting: list[int] = []

    def wait_long() -> None:
        with httpx.Client(base_url=service.url, timeout=60) as other:
            answer = other.get(
                "/v1/stores/products/keys/p1", params={"min_position": "0:100", "timeout_ms": 30_000}
            )
            waiting.append(answer.status_code)

    waiter = threading.Thread(target=wait_long)
    waiter.start()
    try:
        # Once the store is listened to, the waiter's request is in its wait: it holds the only slot
        # until the store reaches 0:100.
        assert store.listened.wait(30), "the waiting request never reached the service"
        refused = service.client.get("/v1/stores/products/keys/p1")
        assert_problem(refused, 429, "too-many-requests")
        assert refused.headers["Retry-After"] == "1"
        # Key GETs and the other routes take different paths into the app, and count together.
        batch = service.client.post("/v1/stores/products/keys:batchGet", json={"keys": ["p1"]})
        assert_problem(batch, 429, "too-many-requests")
        # Probes are never refused.
        assert service.client.get("/healthz").status_code == 200
    finally:
        store.apply([(0, 99, b"p2", b"{}")])
        waiter.join(60)
    assert waiting == [200]
    assert service.client.get("/v1/stores/products/keys/p1").status_code == 200
