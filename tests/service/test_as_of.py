"""as_of: every read answers as of exactly a position; waits when not reached; 410 below the floor."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import orjson
import pyarrow as pa
import pytest

from store import HistoryExpiredError, IndexSpec, InMemoryStore, Position, ReadOnlyKeyValueStore
from tests.service.conftest import Service, WatchedStore, apply_once_waited, assert_problem, product_store

ARROW = "application/vnd.apache.arrow.stream"
KEYS = "/v1/stores/positions/keys"
CONFIG = {
    "name": "positions",
    "topic": "positions",
    "value_format": "json",
    "indexes": [{"name": "by_ticker", "field": "ticker"}],
    "history": {"retention_ms": 86_400_000, "retention_offsets": 1000},
}


def row(ticker: str, qty: int) -> bytes:
    return orjson.dumps({"ticker": ticker, "qty": qty})


def history_store() -> WatchedStore:
    """Three versions of a small table over two partitions.

    at 0:2,1:1  p1=AAPL/1 p2=AAPL/2 p3=MSFT/3
    at 0:3,1:2  p1 moved to MSFT, p3 deleted
    at 0:4,1:2  p4=AAPL/4
    """
    store = WatchedStore("positions", indexes=[IndexSpec("by_ticker", "ticker")], keeps_history=True)
    store.apply([(0, 0, b"p1", row("AAPL", 1)), (0, 1, b"p2", row("AAPL", 2)), (1, 0, b"p3", row("MSFT", 3))])
    store.apply([(0, 2, b"p1", row("MSFT", 1)), (1, 1, b"p3", None)])
    store.apply([(0, 3, b"p4", row("AAPL", 4))])
    return store


@pytest.fixture
def history(make_service: Callable[..., Service]) -> tuple[Service, WatchedStore]:
    store = history_store()
    return make_service({"positions": store, "products": product_store()}, configs=[CONFIG]), store


def test_get_as_of_answers_the_value_below_the_position(history: tuple[Service, WatchedStore]) -> None:
    service, _ = history
    old = service.client.get(f"{KEYS}/p1", params={"as_of": "0:2,1:1"})
    assert old.status_code == 200
    assert old.json() == {"ticker": "AAPL", "qty": 1}
    assert old.headers["Statestore-Position"] == "0:2,1:1"
    assert service.client.get(f"{KEYS}/p1").json() == {"ticker": "MSFT", "qty": 1}
    # Partitions the position does not name count as 0: nothing of partition 1 is visible.
    absent = service.client.get(f"{KEYS}/p3", params={"as_of": "0:4"})
    assert assert_problem(absent, 404, "key-not-found")["store"] == "positions"
    assert absent.headers["Statestore-Position"] == "0:4,1:0"
    deleted = service.client.get(f"{KEYS}/p3", params={"as_of": "0:4,1:2"})
    assert deleted.status_code == 404
    assert service.client.get(f"{KEYS}/p3", params={"as_of": "0:0,1:1"}).json()["qty"] == 3
    # The empty position is the empty table.
    assert service.client.get(f"{KEYS}/p1", params={"as_of": ""}).status_code == 404


def test_batch_get_as_of_json_and_arrow(history: tuple[Service, WatchedStore]) -> None:
    service, _ = history
    response = service.client.post(
        f"{KEYS}:batchGet", params={"as_of": "0:2,1:1"}, json={"keys": ["p1", "p3", "p4"]}
    )
    assert response.headers["Statestore-Position"] == "0:2,1:1"
    assert response.json() == {
        "values": [{"ticker": "AAPL", "qty": 1}, {"ticker": "MSFT", "qty": 3}, None],
        "absent": [2],
        "position": "0:2,1:1",
    }
    table = pa.table({"key": pa.array([b"p4", b"p1"])})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    arrow = service.client.post(
        f"{KEYS}:batchGet",
        params={"as_of": "0:3,1:2"},
        content=sink.getvalue().to_pybytes(),
        headers={"content-type": ARROW},
    )
    assert arrow.headers["Statestore-Position"] == "0:3,1:2"
    values = pa.ipc.open_stream(arrow.content).read_all().column("value").to_pylist()
    assert values == [None, row("MSFT", 1)]


def test_scan_as_of(history: tuple[Service, WatchedStore]) -> None:
    service, _ = history
    body = service.client.get("/v1/stores/positions/scan", params={"as_of": "0:2,1:1", "prefix": "p"}).json()
    assert [item["key"] for item in body["items"]] == ["p1", "p2", "p3"]
    assert body["position"] == "0:2,1:1"
    now = service.client.get("/v1/stores/positions/scan", params={"prefix": "p"}).json()
    assert [item["key"] for item in now["items"]] == ["p1", "p2", "p4"]


def test_index_lookups_as_of(history: tuple[Service, WatchedStore]) -> None:
    service, _ = history
    url = "/v1/stores/positions/indexes/by_ticker"
    at = {"as_of": "0:2,1:1"}
    aapl = service.client.get(f"{url}/AAPL", params=at).json()
    assert [item["key"] for item in aapl["items"]] == ["p1", "p2"]
    assert aapl["position"] == "0:2,1:1"
    assert [item["key"] for item in service.client.get(f"{url}/AAPL").json()["items"]] == ["p2", "p4"]
    batch = service.client.post(f"{url}:batchGet", params=at, json={"values": ["MSFT", "AAPL"]})
    assert batch.headers["Statestore-Position"] == "0:2,1:1"
    results = batch.json()["results"]
    assert [[item["key"] for item in result["items"]] for result in results] == [["p3"], ["p1", "p2"]]


def test_as_of_waits_until_the_store_reaches_it(history: tuple[Service, WatchedStore]) -> None:
    service, store = history
    writer = apply_once_waited(store, [(1, 2, b"p5", row("IBM", 5)), (1, 3, b"p5", row("IBM", 6))])
    try:
        response = service.client.get(f"{KEYS}/p5", params={"as_of": "0:4,1:3", "timeout_ms": 10_000})
    finally:
        writer.join()
    assert response.status_code == 200
    assert response.json() == {"ticker": "IBM", "qty": 5}
    assert response.headers["Statestore-Position"] == "0:4,1:3"


def test_as_of_not_reached_in_time_is_503(history: tuple[Service, WatchedStore]) -> None:
    service, _ = history
    for response in (
        service.client.get(f"{KEYS}/p1", params={"as_of": "0:100", "timeout_ms": 50}),
        service.client.post(
            "/v1/stores/positions/indexes/by_ticker:batchGet",
            params={"as_of": "0:100", "timeout_ms": 50},
            json={"values": ["AAPL"]},
        ),
    ):
        body = assert_problem(response, 503, "position-not-reached")
        assert body["position"] == "0:4,1:2"
        assert body["as_of"] == body["min_position"] == "0:100"
        assert response.headers["Retry-After"] == "1"
        assert response.headers["Statestore-Position"] == "0:4,1:2"


def test_as_of_problems(history: tuple[Service, WatchedStore]) -> None:
    service, _ = history
    client = service.client
    both = client.get(f"{KEYS}/p1", params={"as_of": "0:1", "min_position": "0:1"})
    assert assert_problem(both, 422, "invalid-parameter")["errors"][0]["loc"] == ["query", "as_of"]
    for malformed in ("zz", "0:1,0:2", "0:-1"):
        assert_problem(client.get(f"{KEYS}/p1", params={"as_of": malformed}), 400, "invalid-position")
    not_kept = client.get("/v1/stores/products/keys/p1", params={"as_of": "0:1"})
    assert assert_problem(not_kept, 400, "history-not-kept")["store"] == "products"
    scan_not_kept = client.get("/v1/stores/products/scan", params={"as_of": "0:1"})
    assert_problem(scan_not_kept, 400, "history-not-kept")
    # Nothing changed.
    assert client.get(f"{KEYS}/p1").json() == {"ticker": "MSFT", "qty": 1}


class FlooredStore(InMemoryStore):
    """An in-memory store that has pruned its history below ``floor`` (as retention does)."""

    floor = Position({0: 2, 1: 1})

    @contextlib.contextmanager
    def view(self, as_of: Position | None = None) -> Iterator[ReadOnlyKeyValueStore]:
        if as_of is not None and not Position({p: as_of.get(p, 0) for p in self.floor}).reaches(self.floor):
            raise HistoryExpiredError(self.name, as_of, self.floor)
        with super().view(as_of) as view:
            yield view

    def history_floor(self) -> Position:
        return self.floor


def test_as_of_below_the_floor_is_410_with_the_floor(make_service: Callable[..., Service]) -> None:
    store = FlooredStore("positions", indexes=[IndexSpec("by_ticker", "ticker")], keeps_history=True)
    store.apply([(0, i, f"p{i}".encode(), row("AAPL", i)) for i in range(4)])
    store.apply([(1, 0, b"q", row("MSFT", 0)), (1, 1, b"q", row("MSFT", 1))])
    service = make_service({"positions": store}, configs=[CONFIG])
    expired_reads = [
        service.client.get(f"{KEYS}/p1", params={"as_of": "0:1,1:1"}),
        service.client.post(f"{KEYS}:batchGet", params={"as_of": "0:2"}, json={"keys": ["p1"]}),
        service.client.get("/v1/stores/positions/scan", params={"as_of": "0:3,1:0"}),
        service.client.get("/v1/stores/positions/indexes/by_ticker/AAPL", params={"as_of": "0:1,1:2"}),
    ]
    for response in expired_reads:
        body = assert_problem(response, 410, "history-expired")
        assert body["store"] == "positions"
        assert body["floor"] == "0:2,1:1"
        assert Position.parse(body["as_of"])
    assert service.client.get(f"{KEYS}/p1", params={"as_of": "0:2,1:1"}).json() == {
        "ticker": "AAPL",
        "qty": 1,
    }
    info = service.client.get("/v1/stores/positions").json()
    assert info["history"] == {"floor": "0:2,1:1", "retention_ms": 86_400_000, "retention_offsets": 1000}


def test_store_info_history(history: tuple[Service, WatchedStore]) -> None:
    positions, _ = history
    info = positions.client.get("/v1/stores/positions").json()
    assert info["history"] == {"floor": "0:0,1:0", "retention_ms": 86_400_000, "retention_offsets": 1000}
    assert info["indexes"] == {"by_ticker": {"field": "ticker", "state": "ready", "rows_indexed": None}}
    assert positions.client.get("/v1/stores/products").json()["history"] is None
