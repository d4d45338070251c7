"""``StatestoreClient.scan_arrow``: a store's keys and stored values as Arrow pages (real service)."""

from __future__ import annotations

import httpx
import pyarrow as pa
import pytest

from clients import StatestoreClient
from clients.arrow_scan import decode_arrow_page
from clients.exceptions import UnexpectedResponseError
from store import InMemoryStore
from tests.clients.conftest import ServeStores


def test_pages_hold_the_stored_keys_and_values_in_key_order(serve_stores: ServeStores) -> None:
    store = InMemoryStore("blobs", keeps_history=True)
    written = [(0, i, b"\x00k" + bytes([i]), bytes([i]) * 3) for i in range(250)]
    store.apply([*written, (0, 250, b"other", b"x")])
    store.apply([(0, 251 + i, b"\x00k" + bytes([i]), None) for i in range(10)])  # after 0:251
    url = serve_stores({"blobs": (store, "bytes")})
    with StatestoreClient(url) as client:
        pages = list(client.scan_arrow("blobs", b"\x00k", page_size=100, as_of="0:251"))
        now = pa.Table.from_batches(list(client.scan_arrow("blobs", b"\x00k", min_position="0:251")))
    assert [page.num_rows for page in pages] == [100, 100, 50]
    assert all(page.schema.names == ["key", "value"] for page in pages)
    table = pa.Table.from_batches(pages)
    assert table.column("key").to_pylist() == [key for _, _, key, _ in written]
    assert table.column("value").to_pylist() == [value for _, _, _, value in written]
    assert now.column("key").to_pylist() == [key for _, _, key, _ in written[10:]]


def test_an_answer_that_is_not_the_arrow_page_expected_is_an_error() -> None:
    with pytest.raises(UnexpectedResponseError, match="not the stream expected"):
        decode_arrow_page(b'{"items": []}')
    sink = pa.BufferOutputStream()
    table = pa.table({"key": pa.array(["k"]), "value": pa.array([1])})
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    with pytest.raises(UnexpectedResponseError, match="both must be binary"):
        decode_arrow_page(sink.getvalue().to_pybytes())


def test_a_service_answering_json_pages_fails_the_scan() -> None:
    def json_only(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"items": [], "next_after": None, "position": ""})

    with (
        StatestoreClient("http://statestore.invalid", transport=httpx.MockTransport(json_only)) as client,
        pytest.raises(UnexpectedResponseError),
    ):
        list(client.scan_arrow("blobs"))
