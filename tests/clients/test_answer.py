"""Reads that keep their answer's position, and clients configured from a URL or the environment,
against a real uvicorn-served service."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from clients import Answer, AsyncStatestoreClient, ClientConfigError, StatestoreClient
from clients import exceptions as e
from store import InMemoryStore
from tests.clients.conftest import ServeStores, json_records
from wire.position import Position

TOKEN = "answer-token"


def two_partitions() -> InMemoryStore:
    store = InMemoryStore("products")
    store.apply(json_records({"a": {"v": 1}, "b": {"v": 2}}, partition=0))
    store.apply(json_records({"c": {"v": 3}}, partition=1))
    return store


def test_get_with_position_gives_the_value_and_the_version_it_was_read_at(serve_stores: ServeStores) -> None:
    store = two_partitions()
    url = serve_stores({"products": (store, "json")})
    with StatestoreClient(url, batch_size=2) as client:
        answer = client.get_with_position("products", "a")
        assert answer == Answer({"v": 1}, Position({0: 2, 1: 1}))
        value, position = answer  # unpacks like a tuple
        assert (value, position) == ({"v": 1}, Position({0: 2, 1: 1}))
        # Absent: the 404 carries the position too.
        assert client.get_with_position("products", "zzz") == Answer(None, Position({0: 2, 1: 1}))
        store.apply([(1, 1, b"c", b'{"v": 30}')])
        assert client.get_with_position("products", "c") == Answer({"v": 30}, Position({0: 2, 1: 2}))
        # Several batches (batch_size=2): the per-partition maximum of their positions.
        many = client.get_many_with_position("products", ["a", "b", "c", "nope", "a"])
        assert many.value == [{"v": 1}, {"v": 2}, {"v": 30}, None, {"v": 1}]
        assert many.position == Position({0: 2, 1: 2})
        assert client.get_many_with_position("products", []) == Answer([], Position())
        # The plain reads are unchanged.
        assert client.get("products", "a") == {"v": 1}
        assert client.get_many("products", ["a", "nope"]) == [{"v": 1}, None]
        # A read demanding the answer's position is served (it is the store's own).
        assert client.get("products", "c", min_position=many.position) == {"v": 30}


def test_async_reads_with_position(serve_stores: ServeStores) -> None:
    url = serve_stores({"products": (two_partitions(), "json")})

    async def scenario() -> None:
        async with AsyncStatestoreClient(url) as client:
            assert await client.get_with_position("products", "b") == Answer({"v": 2}, Position({0: 2, 1: 1}))
            many = await client.get_many_with_position("products", ["c", "x"])
            assert many == Answer([{"v": 3}, None], Position({0: 2, 1: 1}))

    asyncio.run(scenario())


def test_from_url_and_from_env_take_the_token_from_the_environment(
    serve_stores: ServeStores, monkeypatch: pytest.MonkeyPatch
) -> None:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    url = serve_stores(
        {"products": (two_partitions(), "json")},
        auth={"mode": "tokens", "tokens": [{"name": "t", "sha256": digest, "stores": ["products"]}]},
    )
    monkeypatch.delenv("STATESTORE_URL", raising=False)
    monkeypatch.delenv("STATESTORE_TOKEN", raising=False)
    with StatestoreClient.from_url(url) as anonymous, pytest.raises(e.UnauthorizedError):
        anonymous.get("products", "a")
    with pytest.raises(ClientConfigError, match="STATESTORE_URL"):
        StatestoreClient.from_env()

    monkeypatch.setenv("STATESTORE_URL", url)
    monkeypatch.setenv("STATESTORE_TOKEN", TOKEN)
    with StatestoreClient.from_env(deadline=5) as client:
        assert client.options.deadline == 5
        assert client.get("products", "a") == {"v": 1}
    with StatestoreClient.from_url() as client:
        assert client.get("products", "b") == {"v": 2}
    # An explicit token wins over the variable.
    with StatestoreClient.from_url(url, token="wrong") as wrong, pytest.raises(e.UnauthorizedError):
        wrong.get("products", "a")

    async def scenario() -> None:
        async with AsyncStatestoreClient.from_env() as client:
            assert await client.get("products", "c") == {"v": 3}

    asyncio.run(scenario())
