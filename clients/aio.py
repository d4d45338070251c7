"""The asyncio statestore client: the same calls as :class:`clients.client.StatestoreClient`, awaited."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any

import httpx
import pyarrow as pa

from clients import indexes, wire
from clients.client import give_up, transport_error
from clients.exceptions import DeadlineExceededError, KeyNotFoundError, StatestoreClientError
from clients.indexes import IndexValue
from clients.options import DEFAULT_BATCH_SIZE, ClientOptions, Verify, log
from clients.position import Position, PositionLike
from clients.retry import Deadline, RetryPolicy, next_delay
from clients.views import AsyncConsistentStore, AsyncPinnedStore
from clients.wire import Call, Key, StoreInfo, ValueFormat


class AsyncStatestoreClient:
    """An asyncio client of one statestore service; one connection pool, usable from many tasks.

    ``async with AsyncStatestoreClient(url) as client: await client.get("products", "p1")``.
    """

    def __init__(
        self,
        url: str | ClientOptions,
        *,
        token: str | None = None,
        verify: Verify = True,
        timeout: float = 10.0,
        deadline: float = 30.0,
        retry: RetryPolicy | None = None,
        batch_size: int | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if isinstance(url, ClientOptions):
            self.options = url
        else:
            self.options = ClientOptions(
                url,
                token=token,
                verify=verify,
                timeout=timeout,
                deadline=deadline,
                retry=retry or RetryPolicy(),
                batch_size=batch_size or DEFAULT_BATCH_SIZE,
            )
        self._http = httpx.AsyncClient(transport=transport, **self.options.httpx_kwargs())
        self._formats: dict[str, ValueFormat] = {}

    def __repr__(self) -> str:
        return f"AsyncStatestoreClient({self.options.url!r})"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncStatestoreClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _send(self, call: Call, deadline: float | None = None) -> httpx.Response:
        limit = Deadline(deadline or self.options.deadline)
        attempt = 0
        while True:
            attempt += 1
            error: StatestoreClientError | None
            try:
                response = await self._http.request(
                    call.method,
                    call.path,
                    params=wire.with_wait_budget(call.params, limit.remaining()),
                    headers=call.headers,
                    content=call.content,
                    timeout=max(0.001, min(self.options.timeout, limit.remaining())),
                )
                error = wire.response_error(response)
            except httpx.HTTPError as exc:
                error = transport_error(call, self.options.url, exc)
                error.__cause__ = exc
            if error is None:
                return response
            delay = next_delay(self.options.retry, attempt, error, limit)
            if delay is None:
                raise give_up(call, error, attempt, limit, self.options.retry)
            log.info("retrying %s %s in %.3f s after: %s", call.method, call.path, delay, error)
            await asyncio.sleep(delay)

    async def stores(self, *, deadline: float | None = None) -> list[StoreInfo]:
        """Every store the service serves."""
        body = wire.json_body(await self._send(Call("GET", "/v1/stores"), deadline))
        infos = [StoreInfo.from_json(item) for item in body.get("stores", [])]
        self._formats.update((info.name, info.value_format) for info in infos)
        return infos

    async def store(self, store: str, *, deadline: float | None = None) -> StoreInfo:
        """One store's status (``UnknownStoreError`` if the service does not serve it)."""
        response = await self._send(Call("GET", wire.store_path(store)), deadline)
        info = StoreInfo.from_json(wire.json_body(response))
        self._formats[store] = info.value_format
        return info

    async def position(self, store: str, *, deadline: float | None = None) -> Position:
        """The store's current position."""
        return (await self.store(store, deadline=deadline)).position

    async def value_format(self, store: str) -> ValueFormat:
        """The store's value format, asked once and cached."""
        if store not in self._formats:
            await self.store(store)
        return self._formats[store]

    async def get(
        self,
        store: str,
        key: Key,
        *,
        min_position: PositionLike | None = None,
        as_of: PositionLike | None = None,
        raw: bool = False,
        deadline: float | None = None,
    ) -> Any:
        """The value of ``key`` (decoded, or bytes if ``raw``), ``None`` if absent (exactly ``as_of``)."""
        if key in ("", b""):
            found = await self.get_many(
                store, [key], min_position=min_position, as_of=as_of, raw=raw, deadline=deadline
            )
            return found[0]
        try:
            response = await self._send(wire.get_call(store, key, min_position, as_of), deadline)
        except KeyNotFoundError:
            return None
        return wire.decode_get(response, raw)

    async def get_many(
        self,
        store: str,
        keys: Sequence[Key],
        *,
        min_position: PositionLike | None = None,
        as_of: PositionLike | None = None,
        raw: bool = False,
        deadline: float | None = None,
    ) -> list[Any]:
        """The values of ``keys`` in request order (``None`` for absent keys), deduped and batched."""
        unique, index = wire.dedupe([wire.key_bytes(k) for k in keys])
        value_format = None if raw else await self.value_format(store)
        array = await self.get_arrow(
            store,
            pa.array(unique, type=pa.binary()),
            min_position=min_position,
            as_of=as_of,
            deadline=deadline,
        )
        found = array.to_pylist()
        if value_format is not None:
            found = [None if v is None else wire.decode_value(v, value_format) for v in found]
        return [found[i] for i in index]

    async def get_arrow(
        self,
        store: str,
        keys: pa.Array,
        *,
        min_position: PositionLike | None = None,
        as_of: PositionLike | None = None,
        deadline: float | None = None,
    ) -> pa.Array:
        """Stored values (``binary``, null when absent) for an Arrow array of keys, row for row."""
        wire.read_params(min_position, as_of=as_of)
        limit = Deadline(deadline or self.options.deadline)
        parts: list[pa.Array] = []
        size = self.options.batch_size
        for start in range(0, len(keys), size):
            chunk = keys.slice(start, size)
            remaining = limit.remaining()
            if remaining <= 0:
                raise DeadlineExceededError(f"batch get on store {store!r} ran past its deadline")
            response = await self._send(wire.batch_get_call(store, chunk, min_position, as_of), remaining)
            parts.append(wire.decode_values(response.content, len(chunk)))
        return pa.concat_arrays(parts) if parts else pa.array([], type=pa.binary())

    async def scan(
        self,
        store: str,
        prefix: Key = "",
        *,
        page_size: int = 1000,
        min_position: PositionLike | None = None,
        as_of: PositionLike | None = None,
        deadline: float | None = None,
    ) -> AsyncIterator[tuple[Key, Any]]:
        """``(key, value)`` pairs whose key starts with ``prefix``, byte-ordered, across pages."""
        wire.read_params(min_position, as_of=as_of)
        value_format = await self.value_format(store)
        floor = Position.of(min_position) if min_position is not None else None
        after: str | None = None
        while True:
            call = wire.scan_call(store, prefix, after, page_size, floor, as_of)
            response = await self._send(call, deadline)
            page = wire.json_body(response)
            seen = wire.position_of(response)
            if seen is not None and as_of is None:
                floor = seen if floor is None else floor.merged(seen)
            for item in page.get("items", []):
                yield (
                    wire.decode_scan_key(item["key"], isinstance(prefix, bytes)),
                    wire.decode_json_member(item["value"], value_format),
                )
            after = page.get("next_after")
            if after is None:
                return

    async def _index_pages(
        self,
        store: str,
        index: str,
        value: str,
        after: bytes | None,
        page_size: int,
        floor: Position | None,
        as_of: PositionLike | None,
        deadline: float | None,
    ) -> list[tuple[bytes, Any]]:
        """Raw ``(row key, JSON value)`` items of one indexed value after ``after``, every page."""
        found: list[tuple[bytes, Any]] = []
        async for item in self._index_page_iter(
            store, index, value, after, page_size, floor, as_of, deadline
        ):
            found.append(item)
        return found

    async def _index_page_iter(
        self,
        store: str,
        index: str,
        value: str,
        after: bytes | None,
        page_size: int,
        floor: Position | None,
        as_of: PositionLike | None,
        deadline: float | None,
    ) -> AsyncIterator[tuple[bytes, Any]]:
        while True:
            call = indexes.index_call(store, index, value, after, page_size, floor, as_of)
            response = await self._send(call, deadline)
            items, after = indexes.decode_index_page(wire.json_body(response))
            seen = wire.position_of(response)
            if seen is not None and as_of is None:
                floor = seen if floor is None else floor.merged(seen)
            for item in items:
                yield item
            if after is None:
                return

    async def index_lookup(
        self,
        store: str,
        index: str,
        value: IndexValue,
        *,
        as_of: PositionLike | None = None,
        min_position: PositionLike | None = None,
        page_size: int = 1000,
        binary_keys: bool = False,
        deadline: float | None = None,
    ) -> AsyncIterator[tuple[Key, Any]]:
        """Every ``(row key, value)`` whose indexed field equals ``value``, by row key, across pages."""
        wire.read_params(min_position, as_of=as_of)
        floor = Position.of(min_position) if min_position is not None else None
        text = indexes.index_text(value)
        pages = self._index_page_iter(store, index, text, None, page_size, floor, as_of, deadline)
        async for key, row in pages:
            yield indexes.row_key(key, binary_keys), row

    async def index_arrow(
        self,
        store: str,
        index: str,
        values: pa.Array,
        *,
        as_of: PositionLike | None = None,
        min_position: PositionLike | None = None,
        limit_per_value: int = indexes.DEFAULT_LIMIT_PER_VALUE,
        deadline: float | None = None,
    ) -> pa.Table:
        """The rows of many distinct indexed values (see :meth:`StatestoreClient.index_arrow`)."""
        wire.read_params(min_position, as_of=as_of)
        limit = Deadline(deadline or self.options.deadline)
        parts: list[pa.Table] = []
        size = self.options.batch_size
        for start in range(0, len(values), size):
            chunk = values.slice(start, size)
            if limit.remaining() <= 0:
                raise DeadlineExceededError(f"index lookup on store {store!r} ran past its deadline")
            call = indexes.index_batch_call(store, index, chunk, limit_per_value, min_position, as_of)
            response = await self._send(call, limit.remaining())
            table = indexes.decode_index_batch(response.content, chunk)
            floor = None if as_of is not None else wire.position_of(response)
            more = {
                value: await self._index_pages(
                    store, index, value, cursor, limit_per_value, floor, as_of, limit.remaining()
                )
                for value, cursor in indexes.continued_values(table)
            }
            parts.append(indexes.with_more_pages(table, more))
        if not parts:
            return indexes.INDEX_ANSWER.empty_table().drop_columns(["next_after"])
        return pa.concat_tables(parts)

    async def index_get_many(
        self,
        store: str,
        index: str,
        values: Sequence[IndexValue],
        *,
        as_of: PositionLike | None = None,
        min_position: PositionLike | None = None,
        limit_per_value: int = indexes.DEFAULT_LIMIT_PER_VALUE,
        binary_keys: bool = False,
        deadline: float | None = None,
    ) -> dict[IndexValue, list[tuple[Key, Any]]]:
        """For every value, its ``(row key, value)`` rows in row-key order (``[]`` when none match)."""
        texts = [indexes.index_text(v) for v in values]
        table = await self.index_arrow(
            store,
            index,
            pa.array(list(dict.fromkeys(texts)), pa.string()),
            as_of=as_of,
            min_position=min_position,
            limit_per_value=limit_per_value,
            deadline=deadline,
        )
        return indexes.grouped_rows(table, values, texts, binary_keys)

    async def consistent(self, store: str, position: PositionLike | None = None) -> AsyncConsistentStore:
        """A view of ``store`` whose reads are all exactly as of ``position`` (default: its position now)."""
        pinned = Position.of(position) if position is not None else await self.position(store)
        return AsyncConsistentStore(self, store, pinned)

    async def pinned(self, store: str, position: PositionLike | None = None) -> AsyncPinnedStore:
        """A view of ``store`` whose reads all demand ``position`` (default: the store's position now)."""
        pinned = Position.of(position) if position is not None else await self.position(store)
        return AsyncPinnedStore(self, store, pinned)
