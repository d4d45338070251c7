"""``fields=`` projects every read of a JSON document store: get, batch get (JSON and Arrow), scan
and index reads; only the fields asked cross the wire."""

from __future__ import annotations

import json
from collections.abc import Callable

import pyarrow as pa
import pytest

from store import IndexSpec, InMemoryStore
from tests.service.conftest import Service, assert_problem
from tests.service.test_answers import CountingStore
from tests.service.test_batch_get import ARROW, arrow_body, arrow_stream, read_arrow

ADA = {"name": "Ada", "age": 36, "address": {"city": "London", "zip": "N1"}, "tags": ["x"] * 50}
BO = {"name": "Bo", "address": {"city": "Oslo"}}


@pytest.fixture
def people(make_service: Callable[..., Service]) -> Service:
    store = InMemoryStore("people", json_values=True)
    store.apply(
        [
            (0, 0, b"u1", json.dumps(ADA).encode()),
            (0, 1, b"u2", json.dumps(BO).encode()),
            (0, 2, b"u3", b"not json"),
            (0, 3, b"u4", b"[1, 2]"),
        ]
    )
    return make_service(
        stores={"people": store}, configs=[{"name": "people", "topic": "people", "value_format": "json"}]
    )


def test_get_answers_only_the_fields_asked_nested_as_in_the_value(people: Service) -> None:
    whole = people.client.get("/v1/stores/people/keys/u1")
    projected = people.client.get("/v1/stores/people/keys/u1", params={"fields": "name,address.city"})
    assert projected.json() == {"name": "Ada", "address": {"city": "London"}}
    assert len(projected.content) * 5 < len(whole.content)
    missing = people.client.get("/v1/stores/people/keys/u2", params={"fields": "age,address.zip"})
    assert missing.json() == {"age": None, "address": {"zip": None}}
    not_object = people.client.get("/v1/stores/people/keys/u4", params={"fields": "name"})
    assert not_object.json() == [1, 2]
    bad = people.client.get("/v1/stores/people/keys/u3", params={"fields": "name"})
    assert_problem(bad, 502, "value-not-json")


def test_batch_get_and_scan_project_each_value_and_keep_error_entries(people: Service) -> None:
    batch = people.client.post(
        "/v1/stores/people/keys:batchGet",
        params={"fields": "address.city"},
        json={"keys": ["u1", "u3", "nope", "u2"]},
    ).json()
    assert batch["values"] == [{"address": {"city": "London"}}, None, None, {"address": {"city": "Oslo"}}]
    assert [error["index"] for error in batch["errors"]] == [1]
    arrow = people.client.post(
        "/v1/stores/people/keys:batchGet",
        params={"fields": "name"},
        content=arrow_body(pa.array([b"u2", b"u3", b"u1"])),
        headers={"content-type": ARROW},
    )
    assert read_arrow(arrow.content).column("value").to_pylist() == [
        b'{"name":"Bo"}',
        b"not json",  # as stored: the client decoding it finds it bad, as without fields=
        b'{"name":"Ada"}',
    ]
    scan = people.client.get("/v1/stores/people/scan", params={"prefix": "u", "fields": "name"}).json()
    assert [item.get("value") for item in scan["items"]] == [
        {"name": "Ada"},
        {"name": "Bo"},
        None,
        [1, 2],
    ]
    assert [error["key"] for error in scan["errors"]] == ["u3"]


@pytest.mark.parametrize("fields", ["", "a,,b", "a..b", ".a", ",".join(f"f{i}" for i in range(65))])
def test_malformed_fields_are_refused(people: Service, fields: str) -> None:
    answer = people.client.get("/v1/stores/people/keys/u1", params={"fields": fields})
    assert_problem(answer, 422, "invalid-parameter")


def test_fields_on_a_store_of_bytes_are_refused(service: Service) -> None:
    answer = service.client.get("/v1/stores/blobs/keys/b1", params={"fields": "a"})
    assert "bytes" in assert_problem(answer, 422, "invalid-parameter")["detail"]


@pytest.fixture
def padded(make_service: Callable[..., Service]) -> tuple[Service, CountingStore]:
    """600 rows of 4 KB each (one ticker), under a 64 KiB answer bound."""
    positions = CountingStore("positions", indexes=[IndexSpec("by_ticker", "ticker")])
    rows = [json.dumps({"ticker": "A", "i": i, "pad": "x" * 4000}).encode() for i in range(600)]
    positions.apply([(0, i, f"p{i:03}".encode(), row) for i, row in enumerate(rows)])
    config = {"name": "positions", "topic": "positions", "value_format": "json"}
    service = make_service(
        stores={"positions": positions},
        configs=[{**config, "indexes": [{"name": "by_ticker", "field": "ticker"}]}],
        limits={"max_answer_bytes": 64 * 1024},
    )
    return service, positions


def test_the_answer_bound_counts_values_as_projected(padded: tuple[Service, CountingStore]) -> None:
    service, _ = padded
    keys = [f"p{i:03}" for i in range(100)]
    batch_url = "/v1/stores/positions/keys:batchGet"
    assert_problem(service.client.post(batch_url, json={"keys": keys}), 413, "answer-too-large")
    batch = service.client.post(batch_url, params={"fields": "i"}, json={"keys": keys})
    assert batch.json()["values"] == [{"i": i} for i in range(100)]
    arrow = service.client.post(
        batch_url,
        params={"fields": "i"},
        content=arrow_body(pa.array([key.encode() for key in keys])),
        headers={"content-type": ARROW},
    )
    assert read_arrow(arrow.content).column("value").to_pylist()[-1] == b'{"i":99}'
    scan_url = "/v1/stores/positions/scan"
    assert_problem(service.client.get(scan_url, params={"limit": 500}), 413, "answer-too-large")
    scan = service.client.get(scan_url, params={"limit": 500, "fields": "i"}).json()
    assert [item["value"] for item in scan["items"]] == [{"i": i} for i in range(500)]
    index_url = "/v1/stores/positions/indexes/by_ticker"
    assert_problem(service.client.get(f"{index_url}/A", params={"limit": 500}), 413, "answer-too-large")
    index = service.client.get(f"{index_url}/A", params={"limit": 500, "fields": "i"}).json()
    assert len(index["items"]) == 500
    assert index["items"][0]["value"] == {"i": 0}


def test_index_batch_answers_are_projected_in_json_and_arrow(padded: tuple[Service, CountingStore]) -> None:
    service, _ = padded
    url = "/v1/stores/positions/indexes/by_ticker:batchGet"
    body = {"values": ["A"], "limit_per_value": 3}
    as_json = service.client.post(url, params={"fields": "i"}, json=body).json()
    assert [item["value"] for item in as_json["results"][0]["items"]] == [{"i": 0}, {"i": 1}, {"i": 2}]
    as_arrow = service.client.post(
        url,
        params={"fields": "i", "limit_per_value": 3},
        content=arrow_stream({"value": pa.array(["A"])}),
        headers={"content-type": ARROW},
    )
    assert read_arrow(as_arrow.content).column("row").to_pylist() == [b'{"i":0}', b'{"i":1}', b'{"i":2}']


@pytest.mark.parametrize("query", ["fields=a..b", "fields=i&fields=ticker"])
def test_fields_are_checked_before_any_read(padded: tuple[Service, CountingStore], query: str) -> None:
    service, positions = padded
    for answer in (
        service.client.get(f"/v1/stores/positions/keys/p001?{query}"),
        service.client.post(f"/v1/stores/positions/keys:batchGet?{query}", json={"keys": ["p001"]}),
        service.client.get(f"/v1/stores/positions/scan?{query}"),
        service.client.get(f"/v1/stores/positions/indexes/by_ticker/A?{query}"),
        service.client.post(
            f"/v1/stores/positions/indexes/by_ticker:batchGet?{query}", json={"values": ["A"]}
        ),
    ):
        assert_problem(answer, 422, "invalid-parameter")
    assert (positions.keys_read, positions.items_read) == (0, 0)
