"""Views of one store tied to a position read once.

``client.pinned("products")``: every read demands at least that position (never older data).
``client.consistent("tickers")``: every read is ``as_of`` exactly that position, so it answers the
same version of the table on every replica and every retry, while the store keeps history back to it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from clients.indexes import IndexValue
from clients.position import Position
from clients.wire import Key

if TYPE_CHECKING:
    from clients.aio import AsyncStatestoreClient
    from clients.client import StatestoreClient


class ConsistentStore:
    """Reads of one store exactly as of ``position`` (see :meth:`StatestoreClient.consistent`)."""

    def __init__(self, client: StatestoreClient, store: str, position: Position) -> None:
        self.client = client
        self.store = store
        self.position = position

    def __repr__(self) -> str:
        return f"ConsistentStore({self.store!r}, as_of={str(self.position)!r})"

    def get(self, key: Key, *, raw: bool = False) -> Any:
        return self.client.get(self.store, key, as_of=self.position, raw=raw)

    def get_many(self, keys: Sequence[Key], *, raw: bool = False) -> list[Any]:
        return self.client.get_many(self.store, keys, as_of=self.position, raw=raw)

    def get_arrow(self, keys: pa.Array) -> pa.Array:
        return self.client.get_arrow(self.store, keys, as_of=self.position)

    def scan(self, prefix: Key = "", *, page_size: int = 1000) -> Iterator[tuple[Key, Any]]:
        return self.client.scan(self.store, prefix, page_size=page_size, as_of=self.position)

    def index_lookup(
        self, index: str, value: IndexValue, *, page_size: int = 1000, binary_keys: bool = False
    ) -> Iterator[tuple[Key, Any]]:
        return self.client.index_lookup(
            self.store, index, value, as_of=self.position, page_size=page_size, binary_keys=binary_keys
        )

    def index_get_many(
        self, index: str, values: Sequence[IndexValue], *, binary_keys: bool = False
    ) -> dict[IndexValue, list[tuple[Key, Any]]]:
        return self.client.index_get_many(
            self.store, index, values, as_of=self.position, binary_keys=binary_keys
        )


class AsyncConsistentStore:
    """Async reads of one store exactly as of ``position`` (see :meth:`AsyncStatestoreClient.consistent`)."""

    def __init__(self, client: AsyncStatestoreClient, store: str, position: Position) -> None:
        self.client = client
        self.store = store
        self.position = position

    def __repr__(self) -> str:
        return f"AsyncConsistentStore({self.store!r}, as_of={str(self.position)!r})"

    async def get(self, key: Key, *, raw: bool = False) -> Any:
        return await self.client.get(self.store, key, as_of=self.position, raw=raw)

    async def get_many(self, keys: Sequence[Key], *, raw: bool = False) -> list[Any]:
        return await self.client.get_many(self.store, keys, as_of=self.position, raw=raw)

    def scan(self, prefix: Key = "", *, page_size: int = 1000) -> AsyncIterator[tuple[Key, Any]]:
        return self.client.scan(self.store, prefix, page_size=page_size, as_of=self.position)

    def index_lookup(
        self, index: str, value: IndexValue, *, page_size: int = 1000, binary_keys: bool = False
    ) -> AsyncIterator[tuple[Key, Any]]:
        return self.client.index_lookup(
            self.store, index, value, as_of=self.position, page_size=page_size, binary_keys=binary_keys
        )

    async def index_get_many(
        self, index: str, values: Sequence[IndexValue], *, binary_keys: bool = False
    ) -> dict[IndexValue, list[tuple[Key, Any]]]:
        return await self.client.index_get_many(
            self.store, index, values, as_of=self.position, binary_keys=binary_keys
        )


class PinnedStore:
    """Reads of one store that never see a table version older than ``position``."""

    def __init__(self, client: StatestoreClient, store: str, position: Position) -> None:
        self.client = client
        self.store = store
        self.position = position

    def __repr__(self) -> str:
        return f"PinnedStore({self.store!r}, position={str(self.position)!r})"

    def get(self, key: Key, *, raw: bool = False) -> Any:
        return self.client.get(self.store, key, min_position=self.position, raw=raw)

    def get_many(self, keys: Sequence[Key], *, raw: bool = False) -> list[Any]:
        return self.client.get_many(self.store, keys, min_position=self.position, raw=raw)

    def get_arrow(self, keys: pa.Array) -> pa.Array:
        return self.client.get_arrow(self.store, keys, min_position=self.position)

    def scan(self, prefix: Key = "", *, page_size: int = 1000) -> Iterator[tuple[Key, Any]]:
        return self.client.scan(self.store, prefix, page_size=page_size, min_position=self.position)


class AsyncPinnedStore:
    """Async reads of one store that never see a table version older than ``position``."""

    def __init__(self, client: AsyncStatestoreClient, store: str, position: Position) -> None:
        self.client = client
        self.store = store
        self.position = position

    def __repr__(self) -> str:
        return f"AsyncPinnedStore({self.store!r}, position={str(self.position)!r})"

    async def get(self, key: Key, *, raw: bool = False) -> Any:
        return await self.client.get(self.store, key, min_position=self.position, raw=raw)

    async def get_many(self, keys: Sequence[Key], *, raw: bool = False) -> list[Any]:
        return await self.client.get_many(self.store, keys, min_position=self.position, raw=raw)

    def scan(self, prefix: Key = "", *, page_size: int = 1000) -> AsyncIterator[tuple[Key, Any]]:
        return self.client.scan(self.store, prefix, page_size=page_size, min_position=self.position)
