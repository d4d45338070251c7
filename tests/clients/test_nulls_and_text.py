"""The Python clients tell a stored JSON ``null`` from an absent key (``default=``), and raise the
typed error for a ``string`` store's value that is not UTF-8."""

from __future__ import annotations

import asyncio

import pytest

from clients import AsyncStatestoreClient, StatestoreClient
from clients import exceptions as e
from store import InMemoryStore
from tests.clients.conftest import ServeStores

ABSENT = object()


@pytest.fixture
def url(serve_stores: ServeStores) -> str:
    products = InMemoryStore("products")
    products.apply([(0, 0, b"p1", b'{"name": "Pen"}'), (0, 1, b"nothing", b"null"), (0, 2, b"", b"null")])
    notes = InMemoryStore("notes")
    notes.apply([(0, 0, b"n1", "héllo".encode()), (0, 1, b"latin1", "caf\xe9".encode("latin-1"))])
    return serve_stores({"products": (products, "json"), "notes": (notes, "string")})


def test_a_stored_null_is_told_from_an_absent_key(url: str) -> None:
    with StatestoreClient(url) as client:
        assert client.get("products", "nothing", default=ABSENT) is None
        assert client.get("products", "nope", default=ABSENT) is ABSENT
        assert client.get("products", "", default=ABSENT) is None  # asked through the batch route
        assert client.get("products", "nope") is None  # the default default
        found = client.get_many("products", ["nothing", "nope", "p1", "nope"], default=ABSENT)
        assert found == [None, ABSENT, {"name": "Pen"}, ABSENT]
        assert client.get_many("products", ["nothing", "nope"], raw=True, default=ABSENT) == [b"null", ABSENT]
        view = client.pinned("products")
        assert view.get_many(["nothing", "nope"], default=ABSENT) == [None, ABSENT]
        assert view.get("nope", default=ABSENT) is ABSENT


def test_the_async_client_tells_them_apart_too(url: str) -> None:
    async def read() -> list[object]:
        async with AsyncStatestoreClient(url) as client:
            one = await client.get("products", "nope", default=ABSENT)
            many = await client.get_many("products", ["nothing", "nope"], default=ABSENT)
            return [one, *many]

    assert asyncio.run(read()) == [ABSENT, None, ABSENT]


def test_a_value_that_is_not_utf8_is_a_typed_error(url: str) -> None:
    with StatestoreClient(url) as client:
        assert client.get("notes", "n1") == "héllo"
        with pytest.raises(e.StoredValueNotUtf8Error) as raised:
            client.get("notes", "latin1")
        assert isinstance(raised.value, e.ValueDecodeError)
        with pytest.raises(e.ValueDecodeError):
            client.get_many("notes", ["n1", "latin1"])
        # The stored bytes stay readable as bytes (Arrow answers carry them as they are).
        assert client.get_many("notes", ["latin1"], raw=True) == [b"caf\xe9"]
