"""GET /v1/stores/{store}/scan: byte order, cursors across pages, one snapshot per page."""

from __future__ import annotations

import base64
from collections.abc import Callable

import pyarrow as pa
import pytest

from store import InMemoryStore
from tests.service.conftest import Service, assert_problem

URL = "/v1/stores/products/scan"


@pytest.fixture
def scanned(make_service: Callable[..., Service]) -> Service:
    store = InMemoryStore("products")
    records = [(0, i, f"p{i:04}".encode(), f'{{"i":{i}}}'.encode()) for i in range(250)]
    records += [(1, 0, b"q1", b'{"i":-1}'), (1, 1, b"p\xff", b'{"i":-2}')]
    store.apply(records)
    return make_service({"products": store})


def test_scan_pages_through_every_key_of_a_prefix(scanned: Service) -> None:
    seen: list[str] = []
    after: str | None = None
    pages = 0
    while True:
        params: dict[str, str | int] = {"prefix": "p0", "limit": 40}
        if after is not None:
            params["after"] = after
        response = scanned.client.get(URL, params=params)
        assert response.status_code == 200
        body = response.json()
        assert body["position"] == response.headers["Statestore-Position"] == "0:250,1:2"
        seen += [item["key"] for item in body["items"]]
        assert all(item["value"]["i"] == int(item["key"][1:]) for item in body["items"])
        pages += 1
        after = body["next_after"]
        if after is None:
            break
    assert seen == [f"p{i:04}" for i in range(250)]
    assert pages == 7


def test_scan_default_limit_is_100(scanned: Service) -> None:
    body = scanned.client.get(URL, params={"prefix": "p"}).json()
    assert len(body["items"]) == 100
    assert body["next_after"] == "p0099"


def test_scan_without_prefix_in_byte_order_with_base64(scanned: Service) -> None:
    items: list[bytes] = []
    after: str | None = None
    while True:
        params = {"limit": 1000, "key_encoding": "base64", **({"after": after} if after else {})}
        body = scanned.client.get(URL, params=params).json()
        items += [base64.b64decode(item["key"]) for item in body["items"]]
        after = body["next_after"]
        if after is None:
            break
    assert items == sorted(items)
    assert items[-2:] == [b"p\xff", b"q1"]


def test_scan_of_non_utf8_key_asks_for_base64(scanned: Service) -> None:
    assert_problem(scanned.client.get(URL, params={"prefix": "p", "after": "p0249"}), 400, "bad-key-encoding")


def test_scan_empty_result(scanned: Service) -> None:
    body = scanned.client.get(URL, params={"prefix": "zzz"}).json()
    assert body["items"] == []
    assert body["next_after"] is None


@pytest.mark.parametrize("limit", ["0", "-3", "ten", "1.5"])
def test_scan_invalid_limit(scanned: Service, limit: str) -> None:
    body = assert_problem(scanned.client.get(URL, params={"limit": limit}), 422, "invalid-parameter")
    assert body["errors"][0]["loc"] == ["query", "limit"]


def test_scan_page_too_large(make_service: Callable[..., Service]) -> None:
    service = make_service(limits={"max_scan_limit": 50})
    body = assert_problem(service.client.get(URL, params={"limit": 51}), 413, "page-too-large")
    assert body["limit"] == 50
    assert service.client.get(URL, params={"limit": 50, "prefix": "p"}).status_code == 200


def test_scan_prefix_too_large(scanned: Service) -> None:
    assert_problem(scanned.client.get(URL, params={"prefix": "p" * 5000}), 413, "key-too-large")


def test_scan_bad_base64_prefix(scanned: Service) -> None:
    response = scanned.client.get(URL, params={"prefix": "%%", "key_encoding": "base64"})
    assert_problem(response, 400, "bad-key-encoding")


def test_scan_prefix_that_is_not_utf8_asks_for_base64(scanned: Service) -> None:
    response = scanned.client.get(URL + "?prefix=p%FF")
    assert_problem(response, 400, "bad-key-encoding")
    by_base64 = scanned.client.get(URL, params={"prefix": "cP8=", "key_encoding": "base64"})
    assert [item["key"] for item in by_base64.json()["items"]] == ["cP8="]


ARROW = "application/vnd.apache.arrow.stream"


def arrow_page(service: Service, params: dict[str, str | int]) -> tuple[pa.Table, str]:
    response = service.client.get(URL, params=params, headers={"Accept": ARROW})
    assert response.status_code == 200
    assert response.headers["content-type"] == ARROW
    return pa.ipc.open_stream(response.content).read_all(), response.headers["Statestore-Position"]


def test_an_arrow_scan_pages_the_stored_keys_and_values_as_the_json_scan_does(scanned: Service) -> None:
    keys: list[bytes] = []
    values: list[bytes] = []
    cursors: list[str | None] = []
    after: str | None = None
    while True:
        params: dict[str, str | int] = {
            "limit": 100,
            "key_encoding": "base64",
            **({"after": after} if after else {}),
        }
        table, position = arrow_page(scanned, params)
        assert table.schema.names == ["key", "value"]
        assert table.schema.field("key").type == table.schema.field("value").type == pa.binary()
        assert position == "0:250,1:2"
        keys += table.column("key").to_pylist()
        values += table.column("value").to_pylist()
        json_page = scanned.client.get(URL, params=params).json()
        after = None if table.schema.metadata is None else table.schema.metadata[b"next_after"].decode()
        assert after == json_page["next_after"]
        cursors.append(after)
        if after is None:
            break
    assert len(cursors) == 3
    assert keys == sorted(keys)
    assert len(keys) == 252
    assert keys[-2:] == [b"p\xff", b"q1"]
    stored = {f"p{i:04}".encode(): f'{{"i":{i}}}'.encode() for i in range(250)}
    stored |= {b"q1": b'{"i":-1}', b"p\xff": b'{"i":-2}'}
    assert dict(zip(keys, values, strict=True)) == stored


def test_an_arrow_scan_of_a_text_prefix_gives_its_cursor_as_text(scanned: Service) -> None:
    table, _ = arrow_page(scanned, {"prefix": "p01", "limit": 60})
    assert table.column("key").to_pylist()[:2] == [b"p0100", b"p0101"]
    assert table.schema.metadata == {b"next_after": b"p0159"}
    last, _ = arrow_page(scanned, {"prefix": "p01", "limit": 60, "after": "p0159"})
    assert last.column("key").to_pylist() == [f"p{i:04}".encode() for i in range(160, 200)]
    assert last.schema.metadata is None
