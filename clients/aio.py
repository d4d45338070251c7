"""The asyncio statestore client: the same calls as :class:`clients.client.StatestoreClient`, awaited."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any

import httpx
import pyarrow as pa

from clients import wire
from clients.client import give_up, transport_error
from clients.exceptions import DeadlineExceededError, KeyNotFoundError, StatestoreClientError
from clients.options import DEFAULT_BATCH_SIZE, ClientOptions, Verify, log
from clients.position import Position, PositionLike
from clients.retry import Deadline, RetryPolicy, next_delay
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
        raw: bool = False,
        deadline: float | None = None,
    ) -> Any:
        """The value of ``key`` (decoded, or bytes if ``raw``), ``None`` if absent."""
        if key in ("", b""):
            found = await self.get_many(store, [key], min_position=min_position, raw=raw, deadline=deadline)
            return found[0]
        try:
            response = await self._send(wire.get_call(store, key, min_position), deadline)
        except KeyNotFoundError:
            return None
        return wire.decode_get(response, raw)

    async def get_many(
        self,
        store: str,
        keys: Sequence[Key],
        *,
        min_position: PositionLike | None = None,
        raw: bool = False,
        deadline: float | None = None,
    ) -> list[Any]:
        """The values of ``keys`` in request order (``None`` for absent keys), deduped and batched."""
        unique, index = wire.dedupe([wire.key_bytes(k) for k in keys])
        value_format = None if raw else await self.value_format(store)
        array = await self.get_arrow(
            store, pa.array(unique, type=pa.binary()), min_position=min_position, deadline=deadline
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
        deadline: float | None = None,
    ) -> pa.Array:
        """Stored values (``binary``, null when absent) for an Arrow array of keys, row for row."""
        limit = Deadline(deadline or self.options.deadline)
        parts: list[pa.Array] = []
        size = self.options.batch_size
        for start in range(0, len(keys), size):
            chunk = keys.slice(start, size)
            remaining = limit.remaining()
            if remaining <= 0:
                raise DeadlineExceededError(f"batch get on store {store!r} ran past its deadline")
            response = await self._send(wire.batch_get_call(store, chunk, min_position), remaining)
            parts.append(wire.decode_values(response.content, len(chunk)))
        return pa.concat_arrays(parts) if parts else pa.array([], type=pa.binary())

    async def scan(
        self,
        store: str,
        prefix: Key = "",
        *,
        page_size: int = 1000,
        min_position: PositionLike | None = None,
        deadline: float | None = None,
    ) -> AsyncIterator[tuple[Key, Any]]:
        """``(key, value)`` pairs whose key starts with ``prefix``, byte-ordered, across pages."""
        value_format = await self.value_format(store)
        floor = Position.of(min_position) if min_position is not None else None
        after: str | None = None
        while True:
            response = await self._send(wire.scan_call(store, prefix, after, page_size, floor), deadline)
            page = wire.json_body(response)
            seen = wire.position_of(response)
            if seen is not None:
                floor = seen if floor is None else floor.merged(seen)
            for item in page.get("items", []):
                yield (
                    wire.decode_scan_key(item["key"], isinstance(prefix, bytes)),
                    wire.decode_json_member(item["value"], value_format),
                )
            after = page.get("next_after")
            if after is None:
                return

    async def pinned(self, store: str, position: PositionLike | None = None) -> AsyncPinnedStore:
        """A view of ``store`` whose reads all demand ``position`` (default: the store's position now)."""
        pinned = Position.of(position) if position is not None else await self.position(store)
        return AsyncPinnedStore(self, store, pinned)


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
