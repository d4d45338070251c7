"""The sync client against a real uvicorn-served service: reads, pinning, typed errors, retries, deadlines."""

from __future__ import annotations

import hashlib

import httpx
import pyarrow as pa
import pytest

from clients import StatestoreClient
from clients import exceptions as e
from clients.flow import sent
from clients.retry import Deadline, RetryPolicy
from clients.wire import Call
from service.app import create_app
from service.local.broker import free_port
from store import InMemoryStore, StoreState
from tests.clients.conftest import BackgroundServer, ServeStores, json_records, make_settings
from tests.support.server import serve_app
from wire.position import Position

FAST_RETRY = RetryPolicy(initial_backoff=0.02, max_backoff=0.2)


def send(client: StatestoreClient, call: Call) -> httpx.Response:
    """One request as the client sends its own (retried within its deadline), built by hand."""
    return client._run(sent(call, Deadline(client.options.deadline), client.options))


def test_reads_decode_per_value_format(serve_stores: ServeStores, products_store: InMemoryStore) -> None:
    names = InMemoryStore("names")
    names.apply([(0, 0, b"k1", "Zoë".encode())])
    blobs = InMemoryStore("blobs")
    blobs.apply([(0, 0, b"\xff\x00", b"\x00\x01"), (1, 0, b"a/b", b"slash")])
    url = serve_stores(
        {"products": (products_store, "json"), "names": (names, "string"), "blobs": (blobs, "bytes")}
    )
    with StatestoreClient(url) as client:
        assert {info.name: info.value_format for info in client.stores()} == {
            "products": "json",
            "names": "string",
            "blobs": "bytes",
        }
        assert client.get("products", "p001") == {"name": "product 1", "price": 1.5}
        assert client.get("products", "p001", raw=True) == b'{"name": "product 1", "price": 1.5}'
        assert client.get("products", "absent") is None
        assert client.get("names", "k1") == "Zoë"
        assert client.get("blobs", b"\xff\x00") == b"\x00\x01"
        assert client.get("blobs", "a/b") == b"slash"
        assert client.position("products") == Position({0: 250})


def test_get_many_dedupes_chunks_and_keeps_request_order(serve_stores: ServeStores) -> None:
    blobs = InMemoryStore("blobs")
    blobs.apply([(0, i, bytes([i, 0xFF]), bytes([i]) * 3) for i in range(40)])
    url = serve_stores({"blobs": (blobs, "bytes")})
    keys = [bytes([i % 45, 0xFF]) for i in range(90, 0, -1)]  # duplicates, absent keys, binary
    with StatestoreClient(url, batch_size=7) as client:
        got = client.get_many("blobs", keys)
        assert got == [bytes([k[0]]) * 3 if k[0] < 40 else None for k in keys]
        assert client.get_many("blobs", []) == []
        arrow = client.get_arrow("blobs", pa.array([b"\x01\xff", b"nope"], pa.binary()))
        assert arrow.to_pylist() == [b"\x01\x01\x01", None]


def test_scan_iterates_across_pages_for_text_and_binary_prefixes(
    serve_stores: ServeStores, products_store: InMemoryStore
) -> None:
    blobs = InMemoryStore("blobs")
    blobs.apply([(0, i, b"\x00\xfe" + bytes([i]), b"v") for i in range(12)] + [(0, 99, b"\x01", b"other")])
    url = serve_stores({"products": (products_store, "json"), "blobs": (blobs, "bytes")})
    with StatestoreClient(url) as client:
        items = list(client.scan("products", "p1", page_size=7))
        assert [k for k, _ in items] == [f"p{i:03d}" for i in range(100, 200)]
        assert items[0][1] == {"name": "product 100", "price": 150.0}
        binary = list(client.scan("blobs", b"\x00\xfe", page_size=5))
        assert binary == [(b"\x00\xfe" + bytes([i]), b"v") for i in range(12)]
        assert list(client.scan("products", "zzz")) == []


def test_pinned_reads_wait_for_the_pinned_position(serve_stores: ServeStores) -> None:
    store = InMemoryStore("products")
    store.apply(json_records({"a": {"v": 1}}))
    url = serve_stores({"products": (store, "json")})
    with StatestoreClient(url, retry=FAST_RETRY) as client:
        pinned = client.pinned("products")
        assert pinned.position == Position({0: 1})
        assert pinned.get("a") == {"v": 1}
        ahead = client.pinned("products", {0: 2})
        with pytest.raises(e.DeadlineExceededError) as caught:
            client.get("products", "a", min_position=ahead.position, deadline=0.6)
        assert isinstance(caught.value.last_error, e.PositionNotReachedError)
        store.apply([(0, 1, b"a", b'{"v": 2}')])
        assert ahead.get("a") == {"v": 2}
        assert ahead.get_many(["a", "a"]) == [{"v": 2}, {"v": 2}]
        assert list(ahead.scan("")) == [("a", {"v": 2})]


def test_every_problem_type_the_service_sends_maps_to_its_error(
    serve_stores: ServeStores, products_store: InMemoryStore
) -> None:
    restoring = InMemoryStore("restoring", state=StoreState.RESTORING)
    url = serve_stores(
        {"products": (products_store, "json"), "restoring": (restoring, "json")},
        limits={"max_batch_keys": 5, "max_scan_limit": 50, "max_key_bytes": 16, "max_body_bytes": 4096},
    )
    no_retry = RetryPolicy(max_attempts=1)
    with StatestoreClient(url, retry=no_retry, batch_size=10) as client:
        with pytest.raises(e.UnknownStoreError):
            client.get("nope", "p1")
        with pytest.raises(e.UnknownStoreError):
            client.store("nope")
        with pytest.raises(e.StoreNotReadyError) as not_ready:
            client.get("restoring", "x")
        assert not_ready.value.retry_after is not None
        with pytest.raises(e.InvalidPositionError):
            client.get("products", "p001", min_position="zero")
        with pytest.raises(e.PositionNotReachedError):
            client.get("products", "p001", min_position="0:999", deadline=2)
        with pytest.raises(e.BatchTooLargeError) as too_many:
            client.get_many("products", [f"k{i}" for i in range(8)])
        assert too_many.value.limit == 5
        with pytest.raises(e.PageTooLargeError):
            list(client.scan("products", "p", page_size=51))
        with pytest.raises(e.KeyTooLargeError):
            client.get("products", "k" * 17)
        with pytest.raises(e.InvalidParameterError):
            list(client.scan("products", "p", page_size=0))
        with pytest.raises(e.BadKeyEncodingError):
            send(client, Call("GET", "/v1/stores/products/keys/%%%", {"key_encoding": "base64"}))
        with pytest.raises(e.MalformedRequestError):
            send(
                client,
                Call(
                    "POST",
                    "/v1/stores/products/keys:batchGet",
                    {},
                    {"Content-Type": "application/json"},
                    b"{",
                ),
            )
        with pytest.raises(e.UnsupportedMediaTypeError):
            send(
                client,
                Call("POST", "/v1/stores/products/keys:batchGet", {}, {"Content-Type": "text/csv"}, b"a"),
            )
        with pytest.raises(e.BodyTooLargeError):
            send(
                client,
                Call(
                    "POST",
                    "/v1/stores/products/keys:batchGet",
                    {},
                    {"Content-Type": "application/json"},
                    b" " * 5000,
                ),
            )
        with pytest.raises(e.MethodNotAllowedError):
            send(client, Call("DELETE", "/v1/stores/products/keys/p001"))
        with pytest.raises(e.RouteNotFoundError):
            send(client, Call("GET", "/v2/nothing"))


def test_bearer_tokens_unauthorized_and_forbidden(
    serve_stores: ServeStores, products_store: InMemoryStore
) -> None:
    other = InMemoryStore("other")
    token = "s3cret-token"
    url = serve_stores(
        {"products": (products_store, "json"), "other": (other, "json")},
        auth={
            "mode": "tokens",
            "tokens": [
                {"name": "t", "sha256": hashlib.sha256(token.encode()).hexdigest(), "stores": ["products"]}
            ],
        },
    )
    with StatestoreClient(url) as anonymous, pytest.raises(e.UnauthorizedError):
        anonymous.get("products", "p001")
    with StatestoreClient(url, token="wrong") as wrong, pytest.raises(e.UnauthorizedError):
        wrong.get("products", "p001")
    with StatestoreClient(url, token=token) as client:
        assert token not in repr(client)
        assert client.get("products", "p001") == {"name": "product 1", "price": 1.5}
        with pytest.raises(e.ForbiddenError):
            client.get("other", "x")


def test_unreachable_service_raises_after_the_deadline() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with StatestoreClient(url, retry=FAST_RETRY, deadline=0.5) as client:
        with pytest.raises(e.DeadlineExceededError) as caught:
            client.stores()
        assert isinstance(caught.value.last_error, e.TransportError)
        assert isinstance(caught.value.__cause__, e.TransportError)
    with StatestoreClient(url, retry=RetryPolicy(max_attempts=2)) as client, pytest.raises(e.TransportError):
        client.stores()


def test_reads_survive_a_service_restarted_mid_stream(products_store: InMemoryStore) -> None:
    app = create_app(make_settings({"products": "json"}), stores={"products": products_store})
    with serve_app(app) as url:
        port = int(url.rsplit(":", 1)[1])
        client = StatestoreClient(url, retry=FAST_RETRY, deadline=20)
        pages = client.scan("products", "p", page_size=50)
        first = [next(pages) for _ in range(50)]
    # The server is gone now; a new one comes up on the same port while the client retries.
    replacement = BackgroundServer(app, port, delay=0.7)
    try:
        rest = list(pages)
        # The rows past the first page could only come from the replacement (the client may finish
        # before the replacement's thread marks it started: uvicorn answers as soon as it listens).
        assert replacement.started.wait(15)
        assert [k for k, _ in first + rest] == [f"p{i:03d}" for i in range(250)]
        assert client.get_many("products", ["p001", "p249"]) == [
            {"name": "product 1", "price": 1.5},
            {"name": "product 249", "price": 373.5},
        ]
    finally:
        replacement.stop()
        client.close()
