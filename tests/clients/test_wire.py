"""Request building and answer decoding (pure logic)."""

from __future__ import annotations

import base64

import httpx
import pyarrow as pa
import pytest

from clients import wire
from clients.exceptions import (
    StoreNotReadyError,
    UnexpectedResponseError,
    UnknownStoreError,
    ValueDecodeError,
)
from wire.position import Position


def test_dedupe_keeps_first_seen_order_and_maps_every_row() -> None:
    unique, index = wire.dedupe([b"b", b"a", b"b", b"c", b"a"])
    assert unique == [b"b", b"a", b"c"]
    assert [unique[i] for i in index] == [b"b", b"a", b"b", b"c", b"a"]


def test_text_keys_go_in_the_path_and_awkward_ones_as_base64() -> None:
    assert wire.path_key("p 1é") == ("p%201%C3%A9", {})
    assert wire.path_key("a/b") == (base64.urlsafe_b64encode(b"a/b").decode(), {"key_encoding": "base64"})
    assert wire.path_key(b"\xff\xfe")[1] == {"key_encoding": "base64"}
    assert base64.urlsafe_b64decode(wire.path_key(b"\xff\xfe")[0]) == b"\xff\xfe"
    with pytest.raises(TypeError, match="str or bytes"):
        wire.key_bytes(12)  # type: ignore[arg-type]


def test_reads_carry_min_position_in_its_text_form() -> None:
    call = wire.get_call("products", "p1", {1: 5, 0: 7})
    assert call.path == "/v1/stores/products/keys/p1"
    assert call.params == {"min_position": "0:7,1:5"}
    assert wire.read_params(None) == {}


def test_arrow_keys_round_trip_and_answers_are_checked_for_length() -> None:
    body = wire.encode_keys([b"a", b"\x00\xff", b"a"])
    table = pa.ipc.open_stream(body).read_all()
    assert table.column("key").to_pylist() == [b"a", b"\x00\xff", b"a"]

    answer = pa.record_batch(
        [pa.array([b"a", b"b"], pa.binary()), pa.array([b"1", None], pa.binary())], names=["key", "value"]
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, answer.schema) as writer:
        writer.write_batch(answer)
    encoded = sink.getvalue().to_pybytes()
    assert wire.decode_values(encoded, 2).to_pylist() == [b"1", None]
    with pytest.raises(UnexpectedResponseError, match="one per key"):
        wire.decode_values(encoded, 3)
    with pytest.raises(UnexpectedResponseError, match="Arrow"):
        wire.decode_values(b"not arrow", 1)


def test_values_decode_per_format() -> None:
    assert wire.decode_value(b'{"a": [1]}', "json") == {"a": [1]}
    assert wire.decode_value("é".encode(), "string") == "é"
    assert wire.decode_value(b"\xff", "bytes") == b"\xff"
    with pytest.raises(ValueDecodeError, match="json"):
        wire.decode_value(b"{", "json")
    assert wire.decode_json_member(base64.b64encode(b"\x00").decode(), "bytes") == b"\x00"
    assert wire.decode_json_member({"a": 1}, "json") == {"a": 1}


def test_scan_calls_encode_binary_prefixes_as_base64() -> None:
    text = wire.scan_call("s", "p", "p9", 10, None)
    assert text.params == {"prefix": "p", "after": "p9", "limit": "10"}
    binary = wire.scan_call("s", b"\xff", None, 10, "0:1")
    assert binary.params == {"key_encoding": "base64", "prefix": "/w==", "limit": "10", "min_position": "0:1"}


def _response(status: int, body: bytes, content_type: str, **headers: str) -> httpx.Response:
    request = httpx.Request("GET", "http://x/v1/stores/s")
    return httpx.Response(
        status, content=body, headers={"Content-Type": content_type, **headers}, request=request
    )


def test_problem_answers_become_typed_errors_with_retry_after() -> None:
    problem = b'{"type": "urn:statestore:problem:store-not-ready", "status": 503, "state": "RESTORING"}'
    error = wire.response_error(_response(503, problem, "application/problem+json", **{"Retry-After": "2"}))
    assert isinstance(error, StoreNotReadyError)
    assert error.retry_after == 2.0
    assert error.problem["state"] == "RESTORING"
    unknown = b'{"type": "urn:statestore:problem:unknown-store", "status": 404}'
    assert isinstance(
        wire.response_error(_response(404, unknown, "application/problem+json")), UnknownStoreError
    )
    assert wire.response_error(_response(200, b"{}", "application/json")) is None


def test_get_answers_decode_by_content_type_and_positions_parse() -> None:
    ok = _response(200, b'{"a": 1}', "application/json", **{"Statestore-Position": "0:3,1:4"})
    assert wire.decode_get(ok, raw=False) == {"a": 1}
    assert wire.decode_get(ok, raw=True) == b'{"a": 1}'
    assert wire.decode_get(_response(200, b"hi", "text/plain; charset=utf-8"), raw=False) == "hi"
    assert wire.position_of(ok) == Position({0: 3, 1: 4})


def test_store_info_parses_and_rejects_garbage() -> None:
    info = wire.StoreInfo.from_json(
        {
            "name": "p",
            "topic": "t",
            "value_format": "json",
            "state": "READY",
            "position": "0:5",
            "total_lag": 0,
        }
    )
    assert (info.name, info.value_format, info.position) == ("p", "json", Position({0: 5}))
    with pytest.raises(UnexpectedResponseError, match="StoreInfo"):
        wire.StoreInfo.from_json({"name": "p", "value_format": "xml", "state": "READY"})


def test_position_text_form_and_ordering() -> None:
    position = Position.parse("1:5, 0:7")
    assert str(position) == "0:7,1:5"
    assert position.reaches({0: 7})
    assert not position.reaches({2: 1})
    assert position.merged({1: 9, 2: 1}) == Position({0: 7, 1: 9, 2: 1})
    with pytest.raises(ValueError, match="partition:next_offset"):
        Position.parse("07")


def test_min_position_waits_get_a_budget_inside_the_deadline() -> None:
    assert wire.with_wait_budget({"min_position": "0:5"}, 2.0) == {
        "min_position": "0:5",
        "timeout_ms": "1600",
    }
    assert wire.with_wait_budget({"min_position": "0:5", "timeout_ms": "10"}, 2.0)["timeout_ms"] == "10"
    assert wire.with_wait_budget({"limit": "3"}, 2.0) == {"limit": "3"}
    assert wire.read_params(" 0:5 ") == {"min_position": "0:5"}
