"""POST /v1/stores/{store}/keys:batchGet in JSON and Arrow IPC."""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable

import pyarrow as pa
import pytest

from service.arrow_body import MAX_RECORD_BATCHES
from store import InMemoryStore
from tests.service.conftest import Service, assert_problem
from tests.support.sockets import connect

ARROW = "application/vnd.apache.arrow.stream"
URL = "/v1/stores/products/keys:batchGet"


def arrow_stream(
    columns: dict[str, pa.Array], compression: str | None = None, chunk: int | None = None
) -> bytes:
    table = pa.table(columns)
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table, max_chunksize=chunk)
    return bytes(sink.getvalue().to_pybytes())


def arrow_body(column: pa.Array) -> bytes:
    return arrow_stream({"key": column})


def read_arrow(content: bytes) -> pa.Table:
    return pa.ipc.open_stream(content).read_all()


def test_json_batch_answers_in_request_order_with_nulls(service: Service) -> None:
    response = service.client.post(URL, json={"keys": ["p2", "nope", "p1", "p2"]})
    assert response.status_code == 200
    assert response.json() == {
        "values": [{"name": "Ink"}, None, {"name": "Pen"}, {"name": "Ink"}],
        "absent": [1],
        "position": "0:1,1:1,2:2",
    }
    assert response.headers["Statestore-Position"] == "0:1,1:1,2:2"


def test_json_batch_with_base64_keys(service: Service) -> None:
    keys = [base64.b64encode(b"\xff\x00").decode(), base64.urlsafe_b64encode(b"p1").decode()]
    response = service.client.post(URL, json={"keys": keys, "key_encoding": "base64"})
    assert response.json()["values"] == [{"name": "Binary"}, {"name": "Pen"}]
    by_query = service.client.post(URL, params={"key_encoding": "base64"}, json={"keys": keys})
    assert by_query.json()["values"] == [{"name": "Binary"}, {"name": "Pen"}]


def test_json_batch_of_string_store_answers_text(service: Service) -> None:
    response = service.client.post("/v1/stores/notes/keys:batchGet", json={"keys": ["n1", "x"]})
    assert response.json()["values"] == ["héllo", None]


def test_empty_batch(service: Service) -> None:
    assert service.client.post(URL, json={"keys": []}).json()["values"] == []


def test_arrow_round_trip_binary_keys(service: Service) -> None:
    keys = pa.array([b"p1", b"\xff\x00", b"nope", b"p1"], type=pa.binary())
    response = service.client.post(URL, content=arrow_body(keys), headers={"content-type": ARROW})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == ARROW
    assert response.headers["Statestore-Position"] == "0:1,1:1,2:2"
    table = read_arrow(response.content)
    assert table.schema.field("key").type == pa.binary()
    assert table.schema.field("value").type == pa.binary()
    assert table.to_pylist() == [
        {"key": b"p1", "value": b'{"name":"Pen"}'},
        {"key": b"\xff\x00", "value": b'{"name":"Binary"}'},
        {"key": b"nope", "value": None},
        {"key": b"p1", "value": b'{"name":"Pen"}'},
    ]


def test_arrow_string_keys_are_taken_as_utf8(service: Service) -> None:
    response = service.client.post(
        URL, content=arrow_body(pa.array(["p2", "a/b"])), headers={"content-type": ARROW}
    )
    assert read_arrow(response.content).column("value").to_pylist() == [
        b'{"name":"Ink"}',
        b'{"name":"Slash"}',
    ]


def test_arrow_large_batch_across_record_batches(make_service: Callable[..., Service]) -> None:
    store = InMemoryStore("products")
    store.apply([(0, i, f"k{i:05}".encode(), f"v{i}".encode()) for i in range(5000)])
    service = make_service({"products": store})
    table = pa.Table.from_batches(
        [
            pa.record_batch({"key": pa.array([f"k{i:05}".encode() for i in range(s, s + 1000)])})
            for s in range(0, 6000, 1000)
        ]
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    response = service.client.post(URL, content=sink.getvalue().to_pybytes(), headers={"content-type": ARROW})
    values = read_arrow(response.content).column("value").to_pylist()
    assert values == [f"v{i}".encode() for i in range(5000)] + [None] * 1000


@pytest.mark.parametrize(
    "body",
    [b"{", b"[]", b'{"keys": "p1"}', b'{"keys": [1, 2]}', b'{"nokeys": []}', b"\xff\xfe"],
)
def test_malformed_json_body(service: Service, body: bytes) -> None:
    response = service.client.post(URL, content=body, headers={"content-type": "application/json"})
    problem = assert_problem(response, 400, "malformed-request")
    assert isinstance(problem["errors"], list)


@pytest.mark.parametrize(
    "body",
    [
        b"not arrow at all",
        b"",
        arrow_body(pa.array([1, 2, 3])),  # wrong type
        arrow_body(pa.array([b"p1", None])),  # null key
    ],
)
def test_malformed_arrow_body(service: Service, body: bytes) -> None:
    response = service.client.post(URL, content=body, headers={"content-type": ARROW})
    assert_problem(response, 400, "malformed-request")


def test_arrow_body_without_key_column(service: Service) -> None:
    table = pa.table({"id": pa.array([b"p1"])})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    response = service.client.post(URL, content=sink.getvalue().to_pybytes(), headers={"content-type": ARROW})
    assert_problem(response, 400, "malformed-request")


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
def test_compressed_arrow_bodies_are_read(service: Service, compression: str) -> None:
    body = arrow_stream({"key": pa.array([b"p1", b"nope", b"p2"] * 100)}, compression)
    response = service.client.post(URL, content=body, headers={"content-type": ARROW})
    assert response.status_code == 200, response.text
    assert read_arrow(response.content).column("value").to_pylist()[:3] == [
        b'{"name":"Pen"}',
        None,
        b'{"name":"Ink"}',
    ]


def test_arrow_columns_besides_key_are_refused(service: Service) -> None:
    body = arrow_stream({"key": pa.array([b"p1"]), "price": pa.array([1.5])})
    problem = assert_problem(
        service.client.post(URL, content=body, headers={"content-type": ARROW}), 400, "malformed-request"
    )
    assert "'price'" in problem["detail"]


def test_arrow_body_over_the_limit_once_decompressed_is_refused_before_decompressing(
    make_service: Callable[..., Service],
) -> None:
    service = make_service(limits={"max_body_bytes": 4096})
    # 8 keys of 1,000 zero bytes weigh a few hundred bytes compressed, 8 KB decompressed.
    body = arrow_stream({"key": pa.array([bytes(1000)] * 8)}, "zstd")
    assert len(body) < 4096
    problem = assert_problem(
        service.client.post(URL, content=body, headers={"content-type": ARROW}), 413, "body-too-large"
    )
    assert "once decompressed" in problem["detail"]
    assert problem["limit"] == 4096


def test_arrow_body_of_too_many_record_batches_is_refused(service: Service) -> None:
    body = arrow_stream({"key": pa.array([b"p1"] * (MAX_RECORD_BATCHES + 1))}, chunk=1)
    problem = assert_problem(
        service.client.post(URL, content=body, headers={"content-type": ARROW}), 400, "malformed-request"
    )
    assert "record batches" in problem["detail"]


def test_bad_base64_key_in_body(service: Service) -> None:
    response = service.client.post(URL, json={"keys": ["***"], "key_encoding": "base64"})
    assert_problem(response, 400, "bad-key-encoding")


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", None])
def test_unsupported_media_type(service: Service, content_type: str | None) -> None:
    headers = {"content-type": content_type} if content_type else {}
    response = service.client.post(URL, content=b'{"keys": []}', headers=headers)
    assert_problem(response, 415, "unsupported-media-type")


def test_batch_too_large_json_and_arrow(make_service: Callable[..., Service]) -> None:
    service = make_service(limits={"max_batch_keys": 3})
    body = assert_problem(
        service.client.post(URL, json={"keys": ["a", "b", "c", "d"]}), 413, "batch-too-large"
    )
    assert body["limit"] == 3
    response = service.client.post(
        URL, content=arrow_body(pa.array(["a"] * 4)), headers={"content-type": ARROW}
    )
    assert_problem(response, 413, "batch-too-large")
    assert service.client.post(URL, json={"keys": ["a", "b", "c"]}).status_code == 200


def test_key_too_large_in_batch(make_service: Callable[..., Service]) -> None:
    service = make_service(limits={"max_key_bytes": 8})
    assert_problem(service.client.post(URL, json={"keys": ["p1", "x" * 9]}), 413, "key-too-large")
    response = service.client.post(
        URL, content=arrow_body(pa.array([b"y" * 9])), headers={"content-type": ARROW}
    )
    assert_problem(response, 413, "key-too-large")


def test_body_too_large_declared_and_streamed(make_service: Callable[..., Service]) -> None:
    service = make_service(limits={"max_body_bytes": 100})
    big = b'{"keys": ["' + b"x" * 200 + b'"]}'
    body = assert_problem(
        service.client.post(URL, content=big, headers={"content-type": "application/json"}),
        413,
        "body-too-large",
    )
    assert body["limit"] == 100

    def chunks() -> object:
        yield big[:50]
        yield big[50:]

    streamed = service.client.post(URL, content=chunks(), headers={"content-type": "application/json"})  # type: ignore[arg-type]
    assert_problem(streamed, 413, "body-too-large")
    assert service.client.get("/healthz").status_code == 200


def test_arrow_body_whose_offsets_go_backwards_is_refused(service: Service) -> None:
    # The IPC reader checks buffer sizes, not offsets: a key ending before it starts is no key.
    body = bytearray(arrow_body(pa.array([b"p1", b"p2", b"p3"], pa.binary())))
    offsets = body.find(struct.pack("<4i", 0, 2, 4, 6))
    assert offsets > 0
    body[offsets : offsets + 16] = struct.pack("<4i", 0, 4, 2, 6)
    response = service.client.post(URL, content=bytes(body), headers={"content-type": ARROW})
    problem = assert_problem(response, 400, "malformed-request")
    assert "not a valid Arrow IPC stream" in problem["detail"]


def test_a_batch_body_that_stops_coming_is_answered_request_timeout_at_the_deadline(
    make_service: Callable[..., Service],
) -> None:
    service = make_service(limits={"request_timeout_ms": 300})
    sock = connect(service.url)
    try:
        sock.sendall(
            b"POST /v1/stores/products/keys:batchGet HTTP/1.1\r\nHost: test\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
            b'{"keys": ["p1",'  # and the rest never comes
        )
        sock.settimeout(30)
        answer = b""
        while b"\r\n\r\n" not in answer or b"request-timeout" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 503 "), answer[:200]
    assert b"urn:statestore:problem:request-timeout" in answer
