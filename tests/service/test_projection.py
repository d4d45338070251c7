"""``fields=`` projects every read of a JSON document store: get, batch get (JSON and Arrow), scan
and index reads; only the fields asked cross the wire."""

from __future__ import annotations

import json
from collections.abc import Callable

import pyarrow as pa
import pytest

from store import InMemoryStore
from tests.service.conftest import Service, assert_problem
from tests.service.test_batch_get import ARROW, arrow_body, read_arrow

ADA = {"name": "Ada", "age": 36, "address": {"city": "London", "zip": "N1"}, "tags": ["x"] * 50}
BO = {"name": "Bo", "address": {"city": "Oslo"}}


@pytest.fixture
def people(make_service: Callable[..., Service]) -> Service:
    store = InMemoryStore("people")
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
