"""A JSON store whose topic holds values that are not JSON never answers invalid JSON: each bad
value is an error entry (``value-not-json``), counted and logged once per store."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable

import orjson
import pyarrow as pa
import pytest

from store import InMemoryStore
from store.json_values import NOT_JSON_PREFIX
from tests.service.conftest import Service, assert_problem

NOT_JSON = "urn:statestore:problem:value-not-json"
BAD = b'{"name": "Pen", truncated'


@pytest.fixture
def bad(make_service: Callable[..., Service]) -> Service:
    products = InMemoryStore("products", json_values=True)
    products.apply(
        [
            (0, 0, b"p1", b'{"name":"Pen"}'),
            (0, 1, b"p2", BAD),
            (0, 2, b"p3", b""),
            (0, 3, b"p4", b"\xff\xfe"),
            (0, 4, b"p5", b"[1, 2]"),
        ]
    )
    return make_service({"products": products})


def strict_json(text: str) -> object:
    """Parse ``text`` as JSON, refusing what Python's parser tolerates beyond the standard."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_single_get_of_a_bad_value_is_a_problem(bad: Service) -> None:
    for key in ("p2", "p3", "p4"):
        answer = bad.client.get(f"/v1/stores/products/keys/{key}")
        body = assert_problem(answer, 502, "value-not-json")
        assert body["store"] == "products"
        assert answer.headers["Statestore-Position"] == "0:5"
    assert bad.client.get("/v1/stores/products/keys/p5").json() == [1, 2]


def test_a_json_batch_answers_bad_values_as_error_entries(bad: Service) -> None:
    answer = bad.client.post(
        "/v1/stores/products/keys:batchGet", json={"keys": ["p1", "p2", "nope", "p3", "p5"]}
    )
    assert answer.status_code == 200
    body = strict_json(answer.text)
    assert isinstance(body, dict)
    assert body["values"] == [{"name": "Pen"}, None, None, None, [1, 2]]
    assert body["absent"] == [2]  # the bad values are errors, not absent keys
    assert [(e["index"], e["key"], e["type"], e["status"]) for e in body["errors"]] == [
        (1, "p2", NOT_JSON, 502),
        (3, "p3", NOT_JSON, 502),
    ]
    assert "topic has a bad record" in body["errors"][0]["detail"]
    fine = bad.client.post("/v1/stores/products/keys:batchGet", json={"keys": ["p1"]}).json()
    assert "errors" not in fine


def test_arrow_batches_carry_the_stored_bytes(bad: Service) -> None:
    sink = pa.BufferOutputStream()
    keys = pa.table({"key": pa.array([b"p1", b"p2"])})
    with pa.ipc.new_stream(sink, keys.schema) as writer:
        writer.write_table(keys)
    answer = bad.client.post(
        "/v1/stores/products/keys:batchGet",
        content=sink.getvalue().to_pybytes(),
        headers={"content-type": "application/vnd.apache.arrow.stream"},
    )
    values = pa.ipc.open_stream(answer.content).read_all().column("value").to_pylist()
    assert values == [b'{"name":"Pen"}', BAD]


def test_a_scan_page_answers_bad_values_as_items_with_an_error(bad: Service) -> None:
    answer = bad.client.get("/v1/stores/products/scan", params={"prefix": "p"})
    assert answer.status_code == 200
    body = strict_json(answer.text)
    assert isinstance(body, dict)
    items = body["items"]
    assert [item["key"] for item in items] == ["p1", "p2", "p3", "p4", "p5"]
    assert items[0] == {"key": "p1", "value": {"name": "Pen"}}
    assert "value" not in items[1]
    assert items[1]["error"]["type"] == NOT_JSON
    assert [e["key"] for e in body["errors"]] == ["p2", "p3", "p4"]


def test_bad_values_are_counted_per_store_and_logged_once(
    bad: Service, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="service.values"):
        for _ in range(3):
            bad.client.get("/v1/stores/products/keys/p2")
        bad.client.get("/v1/stores/products/scan", params={"prefix": "p"})
    logged = [r.getMessage() for r in caplog.records if r.name == "service.values"]
    assert len(logged) == 1, logged
    assert 'store "products" holds a value that is not JSON' in logged[0]
    metrics = bad.client.get("/metrics").text
    counted = re.search(r'^statestore_invalid_values_total\{store="products"\} (\S+)$', metrics, re.M)
    assert counted is not None
    assert float(counted.group(1)) == 6  # three gets, and the scan's three bad values


def test_reads_parse_no_stored_value(bad: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    """The values were checked when applied: batch, get and scan answer them from stored bytes."""
    stored = {b'{"name":"Pen"}', BAD, b"", b"\xff\xfe", b"[1, 2]"}
    parsed: list[bytes] = []
    real_loads = orjson.loads

    def counting_loads(value: bytes | str) -> object:
        parsed.append(value if isinstance(value, bytes) else value.encode())
        return real_loads(value)

    monkeypatch.setattr(orjson, "loads", counting_loads)
    keys = ["p1", "p2", "p3", "p4", "p5"]
    answer = bad.client.post("/v1/stores/products/keys:batchGet", json={"keys": keys})
    assert [e["index"] for e in answer.json()["errors"]] == [1, 2, 3]
    for key in keys:
        bad.client.get(f"/v1/stores/products/keys/{key}")
    assert len(bad.client.get("/v1/stores/products/scan", params={"prefix": "p"}).json()["items"]) == 5
    assert parsed, "the request bodies were parsed through the patched function"
    assert not stored & set(parsed)


def test_a_json_store_marks_each_value_that_is_no_json_once_when_applied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = InMemoryStore("products", json_values=True)
    parsed: list[bytes] = []
    real_loads = orjson.loads
    monkeypatch.setattr(orjson, "loads", lambda value: parsed.append(value) or real_loads(value))
    store.apply([(0, 0, b"p1", b'{"name":"Pen"}'), (0, 1, b"p2", BAD), (0, 2, b"p3", None)])
    assert parsed == [b'{"name":"Pen"}', BAD]
    with store.view() as view:
        assert view.get_many([b"p1", b"p2", b"p3"]) == [b'{"name":"Pen"}', NOT_JSON_PREFIX + BAD, None]


def test_an_arrow_scan_page_answers_bad_values_as_their_producer_wrote_them(bad: Service) -> None:
    answer = bad.client.get(
        "/v1/stores/products/scan",
        params={"prefix": "p"},
        headers={"Accept": "application/vnd.apache.arrow.stream"},
    )
    assert answer.status_code == 200
    table = pa.ipc.open_stream(answer.content).read_all()
    assert table.column("key").to_pylist() == [b"p1", b"p2", b"p3", b"p4", b"p5"]
    # As an Arrow batch get answers them: the client decoding them finds them bad.
    assert table.column("value").to_pylist() == [b'{"name":"Pen"}', BAD, b"", b"\xff\xfe", b"[1, 2]"]
