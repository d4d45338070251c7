"""The asyncio statestore client: the calls of :class:`clients.client.StatestoreClient`, awaited.

The reads are flows of :class:`clients.base.BaseClient`; this module runs them with asyncio.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any, TypeVar, Unpack

import httpx
import pyarrow as pa

from clients import indexes
from clients.answer import Answer
from clients.base import BaseClient, IndexReadAt, IndexRowsAt, ReadAt, Row
from clients.flow import Attempt, Emit, Flow, Sleep, Step, Thrown, Together, Walk, gathered
from clients.indexes import IndexValue
from clients.times import TimeLike
from clients.views import AtLeast, Exact, View
from clients.wire import Key, StoreInfo, ValueFormat
from wire.position import Position, PositionLike

T = TypeVar("T")


class AsyncStatestoreClient(BaseClient[httpx.AsyncClient, httpx.AsyncBaseTransport, AsyncIterator[Row]]):
    """An asyncio client of one statestore service; one connection pool, usable from many tasks.

    ``async with AsyncStatestoreClient(url) as client: await client.get("products", "p1")``.
    ``scan`` and ``index_lookup`` return async iterators (``async for``); the other reads are awaited.
    """

    def _connect(self, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=transport, **self.options.httpx_kwargs())

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncStatestoreClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- the driver: runs flows on the event loop ----------------------------------------------------

    async def _run(self, flow: Flow[T]) -> T:
        walk = Walk(flow)
        for step in walk:
            walk.reply(await self._perform(step))
        return walk.result

    async def _rows(self, flow: Flow[None]) -> AsyncIterator[Row]:
        walk = Walk(flow)
        for step in walk:
            if isinstance(step, Emit):
                for item in step.items:
                    yield item
            else:
                walk.reply(await self._perform(step))

    async def _perform(self, step: Step) -> Any:
        if isinstance(step, Attempt):
            try:
                return await self._http.send(self._request(step))
            except httpx.HTTPError as exc:
                return exc
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        if isinstance(step, Together):
            return await self._together(step.flows)
        raise TypeError(f"{step!r} is a step of a streaming read; run the flow with _rows")

    async def _together(self, flows: Sequence[Flow[Any]]) -> list[Any] | Thrown:
        """Runs ``flows`` as concurrent tasks; every one is waited for."""
        return gathered(await asyncio.gather(*(self._run(flow) for flow in flows), return_exceptions=True))

    # -- reads: see StatestoreClient for what each one does ------------------------------------------

    async def stores(self, *, deadline: float | None = None) -> list[StoreInfo]:
        """Every store the service serves."""
        return await self._run(self._stores_flow(deadline))

    async def store(self, store: str, *, deadline: float | None = None) -> StoreInfo:
        """One store's status (``UnknownStoreError`` if the service does not serve it)."""
        return await self._run(self._store_flow(store, deadline))

    async def position(self, store: str, *, deadline: float | None = None) -> Position:
        """The store's current position."""
        return await self._run(self._position_flow(store, None, deadline))

    async def value_format(self, store: str) -> ValueFormat:
        """The store's value format, asked once and cached."""
        return await self._run(self._value_format_flow(store))

    async def get(
        self,
        store: str,
        key: Key,
        *,
        raw: bool = False,
        default: Any = None,
        as_of_time: TimeLike | None = None,
        **read: Unpack[ReadAt],
    ) -> Any:
        """The value of ``key`` (decoded, or bytes if ``raw``), ``default`` if absent (a stored JSON
        ``null`` is ``None``: pass a ``default`` of your own to tell them apart); ``as_of_time=`` as
        in :meth:`StatestoreClient.get`."""
        return await self._run(self._get_flow(store, key, raw, read, default, as_of_time))

    async def get_many(
        self,
        store: str,
        keys: Sequence[Key],
        *,
        raw: bool = False,
        default: Any = None,
        as_of_times: Sequence[TimeLike] | None = None,
        **read: Unpack[ReadAt],
    ) -> list[Any]:
        """The values of ``keys`` in request order (``default`` for absent keys), deduped and batched;
        ``as_of_times=`` (one per key) as in :meth:`StatestoreClient.get_many`."""
        return await self._run(self._get_many_flow(store, keys, raw, read, default, as_of_times))

    async def get_with_position(
        self,
        store: str,
        key: Key,
        *,
        raw: bool = False,
        as_of_time: TimeLike | None = None,
        **read: Unpack[ReadAt],
    ) -> Answer[Any]:
        """:meth:`get`'s value and the position it was read at: ``value, position = await ...``."""
        return await self._run(self._get_answer_flow(store, key, raw, read, None, as_of_time))

    async def get_many_with_position(
        self,
        store: str,
        keys: Sequence[Key],
        *,
        raw: bool = False,
        as_of_times: Sequence[TimeLike] | None = None,
        **read: Unpack[ReadAt],
    ) -> Answer[list[Any]]:
        """:meth:`get_many`'s values and the position they were read at (see :class:`clients.Answer`)."""
        return await self._run(self._get_many_answer_flow(store, keys, raw, read, None, as_of_times))

    async def get_arrow(
        self, store: str, keys: pa.Array, as_of_times: pa.Array | None = None, **read: Unpack[ReadAt]
    ) -> pa.Array:
        """Stored values (``binary``, null when absent) for an Arrow array of keys, row for row."""
        return await self._run(self._get_arrow_flow(store, keys, read, as_of_times))

    async def index_arrow(
        self, store: str, index: str, values: pa.Array, **read: Unpack[IndexReadAt]
    ) -> pa.Table:
        """The rows of many distinct indexed values (see :meth:`StatestoreClient.index_arrow`)."""
        return await self._run(self._index_arrow_flow(store, index, values, read))

    async def index_get_many(
        self, store: str, index: str, values: Sequence[IndexValue], **read: Unpack[IndexRowsAt]
    ) -> dict[IndexValue, list[Row]]:
        """For every value, its ``(row key, value)`` rows in row-key order (``[]`` when none match)."""
        return await self._run(self._index_get_many_flow(store, index, values, read))

    async def consistent(self, store: str, position: PositionLike | None = None) -> AsyncConsistentStore:
        """A view of ``store`` whose reads are all exactly as of ``position`` (default: its position now)."""
        return AsyncConsistentStore(self, store, await self._run(self._position_flow(store, position)))

    async def pinned(self, store: str, position: PositionLike | None = None) -> AsyncPinnedStore:
        """A view of ``store`` whose reads all demand ``position`` (default: the store's position now)."""
        return AsyncPinnedStore(self, store, await self._run(self._position_flow(store, position)))


class AsyncStoreView(View[AsyncIterator[Row]]):
    """Async reads of one store tied to a position (see :class:`clients.client.StoreView`)."""

    client: AsyncStatestoreClient

    async def get(
        self, key: Key, *, raw: bool = False, default: Any = None, as_of_time: TimeLike | None = None
    ) -> Any:
        return await self.client.get(
            self.store, key, raw=raw, default=default, as_of_time=as_of_time, **self._read
        )

    async def get_many(
        self,
        keys: Sequence[Key],
        *,
        raw: bool = False,
        default: Any = None,
        as_of_times: Sequence[TimeLike] | None = None,
    ) -> list[Any]:
        return await self.client.get_many(
            self.store, keys, raw=raw, default=default, as_of_times=as_of_times, **self._read
        )

    async def get_arrow(self, keys: pa.Array, as_of_times: pa.Array | None = None) -> pa.Array:
        return await self.client.get_arrow(self.store, keys, as_of_times, **self._read)

    async def index_arrow(
        self, index: str, values: pa.Array, *, limit_per_value: int = indexes.DEFAULT_LIMIT_PER_VALUE
    ) -> pa.Table:
        return await self.client.index_arrow(
            self.store, index, values, limit_per_value=limit_per_value, **self._read
        )

    async def index_get_many(
        self, index: str, values: Sequence[IndexValue], *, binary_keys: bool = False
    ) -> dict[IndexValue, list[Row]]:
        return await self.client.index_get_many(
            self.store, index, values, binary_keys=binary_keys, **self._read
        )


class AsyncConsistentStore(Exact, AsyncStoreView):
    """Async reads of one store exactly as of ``position`` (see :meth:`AsyncStatestoreClient.consistent`)."""


class AsyncPinnedStore(AtLeast, AsyncStoreView):
    """Async reads of one store that never see a table version older than ``position``."""
