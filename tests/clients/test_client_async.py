"""The asyncio client against a real uvicorn-served service."""

from __future__ import annotations

import asyncio

import pytest

from clients import AsyncStatestoreClient
from clients import exceptions as e
from clients.retry import RetryPolicy
from service.local.broker import free_port
from store import InMemoryStore
from tests.clients.conftest import ServeStores
from wire.position import Position


def test_async_client_reads_pins_and_maps_errors(
    serve_stores: ServeStores, products_store: InMemoryStore
) -> None:
    blobs = InMemoryStore("blobs")
    blobs.apply([(0, 0, b"\x00\xff", b"\x01")])
    url = serve_stores({"products": (products_store, "json"), "blobs": (blobs, "bytes")})

    async def scenario() -> None:
        async with AsyncStatestoreClient(url, batch_size=3) as client:
            assert [info.name for info in await client.stores()] == ["products", "blobs"]
            assert await client.get("products", "p002") == {"name": "product 2", "price": 3.0}
            assert await client.get("products", "nope") is None
            values = await client.get_many("products", ["p001", "x", "p001", "p003", "p004"])
            assert values == [
                {"name": "product 1", "price": 1.5},
                None,
                {"name": "product 1", "price": 1.5},
                {"name": "product 3", "price": 4.5},
                {"name": "product 4", "price": 6.0},
            ]
            assert await client.get_many("blobs", [b"\x00\xff", b"\x00\xff"]) == [b"\x01", b"\x01"]
            keys = [k async for k, _ in client.scan("products", "p00", page_size=4)]
            assert keys == [f"p00{i}" for i in range(10)]
            pinned = await client.pinned("products")
            assert pinned.position == Position({0: 250})
            assert await pinned.get("p000") == {"name": "product 0", "price": 0.0}
            many = await asyncio.gather(*(client.get("products", f"p{i:03d}") for i in range(20)))
            assert [v["name"] for v in many] == [f"product {i}" for i in range(20)]
            with pytest.raises(e.UnknownStoreError):
                await client.get("nope", "x")
            with pytest.raises(e.DeadlineExceededError) as caught:
                await client.get("products", "p001", min_position="0:251", deadline=0.5)
            assert isinstance(caught.value.last_error, e.PositionNotReachedError)
        async with AsyncStatestoreClient(
            f"http://127.0.0.1:{free_port()}", retry=RetryPolicy(initial_backoff=0.01), deadline=0.3
        ) as down:
            with pytest.raises(e.DeadlineExceededError) as unreachable:
                await down.stores()
            assert isinstance(unreachable.value.last_error, e.TransportError)

    asyncio.run(scenario())
