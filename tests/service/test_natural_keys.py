"""Keys by their natural value over HTTP: ``long`` and ``int`` keys (Kafka's ``LongSerializer`` and
``IntegerSerializer`` bytes) read and answered as numbers, ``string`` keys as text."""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable

import pyarrow as pa
import pytest

from store import InMemoryStore
from tests.service.conftest import Service, assert_problem
from tests.service.test_batch_get import ARROW, arrow_body, read_arrow

LONG = struct.Struct(">q")
INT = struct.Struct(">i")


def _long_store() -> InMemoryStore:
    store = InMemoryStore("customers")
    store.apply(
        [
            (0, 0, LONG.pack(42), b'{"name":"Ada"}'),
            (0, 1, LONG.pack(-7), b'{"name":"Neg"}'),
            (1, 0, LONG.pack(2**63 - 1), b'{"name":"Max"}'),
            # a record some other producer wrote: not a long
            (1, 1, b"odd", b'{"name":"Odd"}'),
        ]
    )
    return store


def _int_store() -> InMemoryStore:
    store = InMemoryStore("accounts")
    store.apply([(0, 0, INT.pack(42), b"forty-two")])
    return store


@pytest.fixture
def service_with_keys(make_service: Callable[..., Service]) -> Service:
    stores = {"customers": _long_store(), "accounts": _int_store()}
    return make_service(
        stores=stores,
        configs=[
            {"name": "customers", "topic": "customers", "value_format": "json", "key_format": "long"},
            {"name": "accounts", "topic": "accounts", "value_format": "string", "key_format": "int"},
        ],
    )


def test_get_finds_the_long_serializer_record_by_its_number(service_with_keys: Service) -> None:
    client = service_with_keys.client
    assert client.get("/v1/stores/customers/keys/42").json() == {"name": "Ada"}
    assert client.get("/v1/stores/customers/keys/-7").json() == {"name": "Neg"}
    assert client.get(f"/v1/stores/customers/keys/{2**63 - 1}").json() == {"name": "Max"}
    assert client.get("/v1/stores/accounts/keys/42").text == "forty-two"
    assert_problem(client.get("/v1/stores/customers/keys/43"), 404, "key-not-found")
    info = client.get("/v1/stores/customers").json()
    assert info["key_format"] == "long"


@pytest.mark.parametrize("key", ["abc", "4.2", "+42", "4_2", "٤٢", str(2**63), "", " 42"])
def test_a_key_that_is_no_long_is_a_400_naming_the_format(service_with_keys: Service, key: str) -> None:
    response = service_with_keys.client.post("/v1/stores/customers/keys:batchGet", json={"keys": ["42", key]})
    body = assert_problem(response, 400, "bad-key-encoding")
    assert body["key_format"] == "long"
    assert "long" in body["detail"]
    if key:
        body = assert_problem(
            service_with_keys.client.get(f"/v1/stores/customers/keys/{key}"), 400, "bad-key-encoding"
        )
        assert "key_format: long" in body["detail"]


def test_int_keys_have_the_int_range(service_with_keys: Service) -> None:
    body = assert_problem(
        service_with_keys.client.get(f"/v1/stores/accounts/keys/{2**31}"), 400, "bad-key-encoding"
    )
    assert body["key_format"] == "int"


def test_batch_get_takes_numbers_as_json_text_and_arrow_integers(service_with_keys: Service) -> None:
    client = service_with_keys.client
    answer = client.post("/v1/stores/customers/keys:batchGet", json={"keys": ["-7", "5", "42"]}).json()
    assert answer["values"] == [{"name": "Neg"}, None, {"name": "Ada"}]
    for column in (pa.array([42, 5, -7], pa.int64()), pa.array([42, 5, -7], pa.int32())):
        response = client.post(
            "/v1/stores/customers/keys:batchGet", content=arrow_body(column), headers={"content-type": ARROW}
        )
        table = read_arrow(response.content)
        assert table.column("key").to_pylist() == [42, 5, -7]
        assert table.column("value").to_pylist() == [b'{"name":"Ada"}', None, b'{"name":"Neg"}']
    # Text keys of a number store are numbers; binary keys the stored bytes themselves.
    text = client.post(
        "/v1/stores/customers/keys:batchGet",
        content=arrow_body(pa.array(["42"])),
        headers={"content-type": ARROW},
    )
    assert read_arrow(text.content).column("value").to_pylist() == [b'{"name":"Ada"}']
    raw = client.post(
        "/v1/stores/customers/keys:batchGet",
        content=arrow_body(pa.array([LONG.pack(42)], pa.binary())),
        headers={"content-type": ARROW},
    )
    assert read_arrow(raw.content).column("value").to_pylist() == [b'{"name":"Ada"}']
    too_big = client.post(
        "/v1/stores/accounts/keys:batchGet",
        content=arrow_body(pa.array([2**40], pa.int64())),
        headers={"content-type": ARROW},
    )
    assert assert_problem(too_big, 400, "bad-key-encoding")["key_format"] == "int"


def test_integer_keys_of_a_store_without_number_keys_are_refused(service: Service) -> None:
    response = service.client.post(
        "/v1/stores/products/keys:batchGet",
        content=arrow_body(pa.array([1], pa.int64())),
        headers={"content-type": ARROW},
    )
    assert "key_format" in assert_problem(response, 400, "malformed-request")["detail"]


def test_scan_answers_numbers_and_names_a_key_that_is_no_long(service_with_keys: Service) -> None:
    client = service_with_keys.client
    one = client.get("/v1/stores/customers/scan", params={"prefix": "42"}).json()
    assert one["items"] == [{"key": "42", "value": {"name": "Ada"}}]
    # The whole store holds a key no LongSerializer wrote: an error naming it, never a made-up number.
    body = assert_problem(client.get("/v1/stores/customers/scan"), 400, "bad-key-encoding")
    assert base64.b64encode(b"odd").decode() in body["detail"]
    raw = client.get("/v1/stores/customers/scan", params={"key_encoding": "base64"}).json()
    assert [base64.b64decode(item["key"]) for item in raw["items"]] == sorted(
        [LONG.pack(42), LONG.pack(-7), LONG.pack(2**63 - 1), b"odd"]
    )
    page = client.get("/v1/stores/customers/scan", params={"limit": 1}).json()
    assert page["items"] == [{"key": "42", "value": {"name": "Ada"}}]
    assert page["next_after"] == "42"
