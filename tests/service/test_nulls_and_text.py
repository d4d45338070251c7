"""A stored JSON ``null`` is told from an absent key; a ``string`` store's value that is not UTF-8 is
an error entry (``value-not-utf8``), never text with replacement characters."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pyarrow as pa
import pytest

from store import InMemoryStore
from tests.service.conftest import Service, assert_problem

NOT_UTF8 = "urn:statestore:problem:value-not-utf8"
BATCH = "/v1/stores/{}/keys:batchGet"


@pytest.fixture
def odd(make_service: Callable[..., Service]) -> Service:
    products = InMemoryStore("products")
    products.apply([(0, 0, b"p1", b'{"name":"Pen"}'), (0, 1, b"nothing", b"null")])
    notes = InMemoryStore("notes", topic="notes-topic")
    notes.apply([(0, 0, b"n1", "héllo".encode()), (0, 1, b"latin1", "caf\xe9".encode("latin-1"))])
    return make_service({"products": products, "notes": notes, "blobs": InMemoryStore("blobs")})


def test_a_stored_null_is_not_an_absent_key_in_a_json_batch(odd: Service) -> None:
    answer = odd.client.post(BATCH.format("products"), json={"keys": ["nothing", "nope", "p1", "nope"]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["values"] == [None, None, {"name": "Pen"}, None]
    assert body["absent"] == [1, 3]
    assert "errors" not in body
    every = odd.client.post(BATCH.format("products"), json={"keys": ["p1", "nothing"]}).json()
    assert every["absent"] == []


def test_a_stored_null_is_the_bytes_null_in_an_arrow_batch(odd: Service) -> None:
    sink = pa.BufferOutputStream()
    table = pa.table({"key": pa.array([b"nothing", b"nope"], type=pa.binary())})
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    answer = odd.client.post(
        BATCH.format("products"),
        content=sink.getvalue().to_pybytes(),
        headers={"content-type": "application/vnd.apache.arrow.stream"},
    )
    assert pa.ipc.open_stream(answer.content).read_all().column("value").to_pylist() == [b"null", None]


def test_a_single_get_of_a_value_that_is_not_utf8_is_a_problem(odd: Service) -> None:
    body = assert_problem(odd.client.get("/v1/stores/notes/keys/latin1"), 502, "value-not-utf8")
    assert body["store"] == "notes"
    assert "not UTF-8 text" in body["detail"]
    assert odd.client.get("/v1/stores/notes/keys/n1").text == "héllo"


def test_a_batch_answers_a_value_that_is_not_utf8_as_an_error_entry(
    odd: Service, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="service.values"):
        for _ in range(2):
            answer = odd.client.post(BATCH.format("notes"), json={"keys": ["n1", "latin1", "nope"]})
            body = answer.json()
            assert body["values"] == ["héllo", None, None]
            assert body["absent"] == [2]
            assert [(e["index"], e["key"], e["type"], e["status"]) for e in body["errors"]] == [
                (1, "latin1", NOT_UTF8, 502)
            ]
            assert "\ufffd" not in answer.text
    logged = [r.getMessage() for r in caplog.records if "not UTF-8 text" in r.getMessage()]
    assert len(logged) == 1, logged  # once per store
    assert "(value-not-utf8)" in logged[0]
    metrics = odd.client.get("/metrics").text
    assert 'statestore_invalid_values_total{store="notes"} 2.0' in metrics


def test_a_scan_answers_a_value_that_is_not_utf8_as_an_error_item(odd: Service) -> None:
    body = odd.client.get("/v1/stores/notes/scan", params={"prefix": ""}).json()
    assert body["items"][0]["key"] == "latin1"
    assert "value" not in body["items"][0]
    assert body["items"][0]["error"]["type"] == NOT_UTF8
    assert body["items"][1] == {"key": "n1", "value": "héllo"}
    assert [e["key"] for e in body["errors"]] == ["latin1"]
