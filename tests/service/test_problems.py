"""Problems the real app answers that the route tests do not reach: an unexpected failure of a
store (``internal-error``), and ``limits.retry_after_seconds`` on every answer that asks to retry."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx
import pytest

from store import (
    IndexSpec,
    InMemoryStore,
    Position,
    ReadOnlyKeyValueStore,
    ScanPage,
    StoreError,
    StoreState,
)
from tests.service.conftest import Service, WatchedStore, assert_problem
from tests.service.test_indexes import BATCH, POSITIONS_CONFIG, URL, BuildingIndexStore
from tests.service.test_metrics import samples

KEYS = "/v1/stores/products/keys"


class BrokenRead(RuntimeError):
    """An error no layer of the service knows: a bug, or a library failing in a new way."""


class BrokenStoreError(StoreError):
    """A store error the service has no problem type for."""


class FailingStore(InMemoryStore):
    """An in-memory store whose reads of key ``boom`` (and scans of prefix ``boom``) raise
    ``failure``; every other read answers."""

    def __init__(self, name: str, failure: Exception) -> None:
        super().__init__(name)
        self.failure = failure
        self.failures = 0

    @contextlib.contextmanager
    def view(self, as_of: Position | None = None) -> Iterator[ReadOnlyKeyValueStore]:
        with super().view(as_of) as view:
            yield _Failing(view, self)


class _Failing:
    def __init__(self, view: ReadOnlyKeyValueStore, store: FailingStore) -> None:
        self._view = view
        self._store = store

    def _check(self, keys: Sequence[bytes]) -> None:
        if any(key.startswith(b"boom") for key in keys):
            self._store.failures += 1
            raise self._store.failure

    def get(self, key: bytes) -> bytes | None:
        self._check([key])
        return self._view.get(key)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        self._check(keys)
        return self._view.get_many(keys)

    def prefix_scan(self, prefix: bytes, *, after: bytes | None = None, limit: int = 1000) -> ScanPage:
        self._check([prefix])
        return self._view.prefix_scan(prefix, after=after, limit=limit)

    def index_scan(
        self, index: str, value: bytes, *, after: bytes | None = None, limit: int = 1000
    ) -> ScanPage:
        return self._view.index_scan(index, value, after=after, limit=limit)

    def position(self) -> Position:
        return self._view.position()


@pytest.mark.parametrize(
    "failure", [BrokenRead("disk said no"), BrokenStoreError("new kind of trouble")], ids=["foreign", "store"]
)
def test_an_unexpected_error_is_an_internal_error_problem_and_the_service_goes_on(
    make_service: Callable[..., Service], caplog: pytest.LogCaptureFixture, failure: Exception
) -> None:
    store = FailingStore("products", failure)
    store.apply([(0, 0, b"p1", b'{"name":"Pen"}'), (0, 1, b"boom", b'{"name":"Bang"}')])
    service = make_service({"products": store})
    with caplog.at_level(logging.ERROR, logger="service.problems"):
        answers = [
            service.client.get(f"{KEYS}/boom"),
            service.client.post(f"{KEYS}:batchGet", json={"keys": ["p1", "boom"]}),
            service.client.get("/v1/stores/products/scan", params={"prefix": "boom"}),
        ]
    for answer in answers:
        body = assert_problem(answer, 500, "internal-error")
        # The problem says where to look and nothing of the error itself (it may hold data).
        assert "log" in body["detail"]
        assert str(failure) not in answer.text
        assert body["instance"].startswith("/v1/stores/products/")
    assert store.failures == len(answers)
    logged = [r for r in caplog.records if r.exc_info and r.exc_info[1] is failure]
    assert len(logged) == len(answers), "every unexpected error is logged with its traceback"
    # The service goes on serving, the same store included.
    assert service.client.get(f"{KEYS}/p1").json() == {"name": "Pen"}
    assert service.client.post(f"{KEYS}:batchGet", json={"keys": ["p1"]}).json()["values"] == [
        {"name": "Pen"}
    ]
    assert service.client.get("/readyz").status_code == 200
    found = samples(service)
    route = "/v1/stores/{store}/keys/{key:path}"
    failed = frozenset({("method", "GET"), ("route", route), ("code", "500")})
    assert found[("statestore_http_requests_total", failed)] == 1


RETRY_AFTER = 7


@pytest.fixture
def patient(make_service: Callable[..., Service]) -> Callable[..., Service]:
    """A service factory under ``limits.retry_after_seconds`` = 7."""

    def make(stores: dict[str, Any] | None = None, **limits: Any) -> Service:
        return make_service(stores, limits={"retry_after_seconds": RETRY_AFTER, **limits})

    return make


def test_retry_after_of_a_store_not_ready_follows_the_setting(patient: Callable[..., Service]) -> None:
    restoring = InMemoryStore("products", state=StoreState.RESTORING)
    service = patient({"products": restoring})
    for answer in (
        service.client.get(f"{KEYS}/p1"),
        service.client.post(f"{KEYS}:batchGet", json={"keys": ["p1"]}),
        service.client.get("/v1/stores/products/scan"),
    ):
        assert_problem(answer, 503, "store-not-ready")
        assert answer.headers["Retry-After"] == str(RETRY_AFTER)


def test_retry_after_of_a_position_not_reached_follows_the_setting(patient: Callable[..., Service]) -> None:
    service = patient()
    answer = service.client.get(f"{KEYS}/p1", params={"min_position": "0:100", "timeout_ms": 0})
    assert_problem(answer, 503, "position-not-reached")
    assert answer.headers["Retry-After"] == str(RETRY_AFTER)


def test_retry_after_of_an_index_being_built_follows_the_setting(
    make_service: Callable[..., Service],
) -> None:
    store = BuildingIndexStore("positions", indexes=[IndexSpec("by_qty", "lot.qty")])
    service = make_service(
        {"positions": store}, configs=[POSITIONS_CONFIG], limits={"retry_after_seconds": RETRY_AFTER}
    )
    for answer in (service.client.get(f"{URL}/AAPL"), service.client.post(BATCH, json={"values": ["AAPL"]})):
        assert_problem(answer, 503, "index-not-ready")
        assert answer.headers["Retry-After"] == str(RETRY_AFTER)


def test_retry_after_of_too_many_requests_follows_the_setting(patient: Callable[..., Service]) -> None:
    store = WatchedStore("products")
    service = patient({"products": store}, max_concurrent_requests=1)
    waiting: list[int] = []

    def wait_in_flight() -> None:
        with httpx.Client(base_url=service.url, timeout=60) as other:
            answer = other.get(f"{KEYS}/p1", params={"min_position": "0:100", "timeout_ms": 30_000})
            waiting.append(answer.status_code)

    waiter = threading.Thread(target=wait_in_flight)
    waiter.start()
    try:
        # Listened to: the waiter's request is in its wait, holding the only slot until 0:100.
        assert store.listened.wait(30), "the waiting request never reached the service"
        refused = service.client.get(f"{KEYS}/p1")
        assert_problem(refused, 429, "too-many-requests")
        assert refused.headers["Retry-After"] == str(RETRY_AFTER)
    finally:
        store.apply([(0, 99, b"p1", b"{}")])
        waiter.join(60)
    assert waiting == [200]
