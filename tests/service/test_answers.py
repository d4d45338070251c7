"""Answers bounded in bytes (``limits.max_answer_bytes``): refused with 413 before they are built,
duplicate keys read once and counted each time; the work done is counted, not timed."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import orjson
import pyarrow as pa
import pytest

from service.answers import GET_CHUNK
from store import IndexSpec, InMemoryStore, Position, ReadOnlyKeyValueStore, ScanPage
from tests.service.conftest import Service, assert_problem

ARROW = "application/vnd.apache.arrow.stream"
MIB = 1024 * 1024


class _CountingView:
    def __init__(self, inner: ReadOnlyKeyValueStore, store: CountingStore) -> None:
        self._inner = inner
        self._store = store

    def get(self, key: bytes) -> bytes | None:
        return self.get_many([key])[0]

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        self._store.keys_read += len(keys)
        return self._inner.get_many(keys)

    def prefix_scan(self, prefix: bytes, *, after: bytes | None = None, limit: int = 1000) -> ScanPage:
        page = self._inner.prefix_scan(prefix, after=after, limit=limit)
        self._store.items_read += len(page.items)
        return page

    def index_scan(
        self, index: str, value: bytes, *, after: bytes | None = None, limit: int = 1000
    ) -> ScanPage:
        page = self._inner.index_scan(index, value, after=after, limit=limit)
        self._store.items_read += len(page.items)
        return page

    def position(self) -> Position:
        return self._inner.position()


class CountingStore(InMemoryStore):
    """An in-memory store counting the keys and items its views read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.keys_read = 0
        self.items_read = 0

    @contextlib.contextmanager
    def view(self, as_of: Position | None = None) -> Iterator[ReadOnlyKeyValueStore]:
        with super().view(as_of) as inner:
            yield _CountingView(inner, self)  # type: ignore[misc]


def _arrow_keys(keys: list[bytes]) -> bytes:
    sink = pa.BufferOutputStream()
    table = pa.table({"key": pa.array(keys, pa.binary())})
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _batch(service: Service, keys: list[bytes], media: str) -> Any:
    url = "/v1/stores/products/keys:batchGet"
    if media == ARROW:
        return service.client.post(url, content=_arrow_keys(keys), headers={"content-type": ARROW})
    return service.client.post(url, json={"keys": [key.decode() for key in keys]})


@pytest.mark.parametrize("media", ["application/json", ARROW])
def test_a_1_mib_value_asked_1000_times_is_refused_having_been_read_once(
    make_service: Callable[..., Service], media: str
) -> None:
    products = CountingStore("products")
    products.apply([(0, 0, b"big", b'"' + b"a" * (MIB - 2) + b'"'), (0, 1, b"p1", b"1")])
    service = make_service(stores={"products": products})  # the default bound: 64 MiB
    body = assert_problem(_batch(service, [b"big"] * 1000, media), 413, "answer-too-large")
    assert body["limit"] == 64 * MIB
    assert "limits.max_answer_bytes" in body["detail"]
    assert products.keys_read == 1
    # Within the bound, duplicates are answered in request order, each distinct key read once.
    products.keys_read = 0
    answer = _batch(service, [b"p1", b"big", b"nope", b"p1", b"big"], media)
    assert answer.status_code == 200
    if media == ARROW:
        values = pa.ipc.open_stream(answer.content).read_all().column("value").to_pylist()
        assert [None if v is None else len(v) for v in values] == [1, MIB, None, 1, MIB]
    else:
        values = answer.json()["values"]
        assert [None if v is None else len(str(v)) for v in values] == [1, MIB - 2, None, 1, MIB - 2]
    assert products.keys_read == 3


def test_distinct_keys_past_the_bound_stop_being_read_after_one_chunk(
    make_service: Callable[..., Service],
) -> None:
    products = CountingStore("products")
    products.apply([(0, i, f"k{i}".encode(), b"1" * 1100) for i in range(3 * GET_CHUNK)])
    service = make_service(stores={"products": products}, limits={"max_answer_bytes": MIB})
    keys = [f"k{i}".encode() for i in range(3 * GET_CHUNK)]
    assert_problem(_batch(service, keys, "application/json"), 413, "answer-too-large")
    assert products.keys_read == GET_CHUNK
    # The same keys fit in three answers.
    for start in range(0, len(keys), GET_CHUNK // 2):
        assert _batch(service, keys[start : start + GET_CHUNK // 2], "application/json").status_code == 200


def test_a_scan_page_past_the_bound_is_refused_and_a_smaller_one_served(
    make_service: Callable[..., Service],
) -> None:
    products = CountingStore("products")
    products.apply([(0, i, f"s{i:03}".encode(), b'"' + b"v" * 4094 + b'"') for i in range(600)])
    service = make_service(stores={"products": products}, limits={"max_answer_bytes": 64 * 1024})
    body = assert_problem(
        service.client.get("/v1/stores/products/scan", params={"prefix": "s", "limit": 500}),
        413,
        "answer-too-large",
    )
    assert body["limit"] == 64 * 1024
    assert products.items_read <= 256  # one chunk of the page, not the 500 items asked
    page = service.client.get("/v1/stores/products/scan", params={"prefix": "s", "limit": 16})
    assert page.status_code == 200
    assert len(page.json()["items"]) == 16
    assert page.json()["next_after"] == "s015"


def test_index_reads_past_the_bound_are_refused(make_service: Callable[..., Service]) -> None:
    positions = CountingStore("positions", indexes=[IndexSpec("by_ticker", "ticker")])
    values = [orjson.dumps({"ticker": "A", "pad": "x" * 4000, "i": i}) for i in range(600)]
    positions.apply([(0, i, f"pos-{i:03}".encode(), value) for i, value in enumerate(values)])
    config = {"name": "positions", "topic": "positions", "value_format": "json"}
    service = make_service(
        stores={"positions": positions},
        configs=[{**config, "indexes": [{"name": "by_ticker", "field": "ticker"}]}],
        limits={"max_answer_bytes": 64 * 1024},
    )
    url = "/v1/stores/positions/indexes/by_ticker"
    assert_problem(service.client.get(f"{url}/A", params={"limit": 500}), 413, "answer-too-large")
    assert positions.items_read <= 256
    assert len(service.client.get(f"{url}/A", params={"limit": 10}).json()["items"]) == 10
    batch = service.client.post(f"{url}:batchGet", json={"values": ["A", "A"], "limit_per_value": 500})
    assert assert_problem(batch, 413, "answer-too-large")["limit"] == 64 * 1024
    small = service.client.post(f"{url}:batchGet", json={"values": ["A", "B"], "limit_per_value": 10})
    assert [len(result["items"]) for result in small.json()["results"]] == [10, 0]
