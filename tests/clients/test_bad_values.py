"""A JSON store's value that is not JSON reaches the Python client as an error, never as absent."""

from __future__ import annotations

import pytest

from clients import StatestoreClient
from clients.exceptions import StoredValueNotJsonError, ValueDecodeError
from store import InMemoryStore
from tests.clients.conftest import ServeStores


@pytest.fixture
def url(serve_stores: ServeStores) -> str:
    store = InMemoryStore("products", json_values=True)
    store.apply([(0, 0, b"p1", b'{"name":"Pen"}'), (0, 1, b"p2", b"{truncated"), (0, 2, b"q1", b"{}")])
    return serve_stores({"products": (store, "json")})


def test_get_raises_for_a_bad_value_and_reads_the_others(url: str) -> None:
    with StatestoreClient(url) as client:
        assert client.get("products", "p1") == {"name": "Pen"}
        with pytest.raises(StoredValueNotJsonError, match="not a JSON document") as raised:
            client.get("products", "p2")
        assert isinstance(raised.value, ValueDecodeError)
        with pytest.raises(ValueDecodeError):
            client.get_many("products", ["p1", "p2"])
        assert client.get_many("products", ["p1", "q1"]) == [{"name": "Pen"}, {}]


def test_a_scan_over_a_bad_value_raises_and_one_without_reads(url: str) -> None:
    with StatestoreClient(url) as client:
        with pytest.raises(StoredValueNotJsonError) as raised:
            list(client.scan("products", "p"))
        assert [error["key"] for error in raised.value.problem["errors"]] == ["p2"]
        assert list(client.scan("products", "q")) == [("q1", {})]
