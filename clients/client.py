"""The synchronous statestore client (httpx, pooled connections, retries within a deadline)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

import httpx
import pyarrow as pa

from clients import indexes, wire
from clients.exceptions import DeadlineExceededError, KeyNotFoundError, StatestoreClientError, TransportError
from clients.indexes import IndexValue
from clients.options import DEFAULT_BATCH_SIZE, ClientOptions, Verify, log
from clients.position import Position, PositionLike
from clients.retry import Deadline, RetryPolicy, is_retryable, next_delay
from clients.views import ConsistentStore, PinnedStore
from clients.wire import Call, Key, StoreInfo, ValueFormat


def transport_error(call: Call, base_url: str, exc: httpx.HTTPError) -> TransportError:
    """A client error for an httpx failure; the caller raises it ``from`` the httpx error."""
    kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "failed"
    return TransportError(
        f"{call.method} {base_url}{call.path} {kind}: {exc or type(exc).__name__}; "
        "check that the service runs and the URL is right"
    )


def give_up(
    call: Call, error: StatestoreClientError, attempt: int, deadline: Deadline, policy: RetryPolicy
) -> BaseException:
    """What to raise when no retry follows: the error itself, or a deadline error caused by it."""
    attempts_left = policy.max_attempts is None or attempt < policy.max_attempts
    if is_retryable(error) and attempts_left:
        exhausted = DeadlineExceededError(
            f"{call.method} {call.path} did not succeed within its {deadline.seconds:g} s deadline "
            f"({attempt} attempt(s)); last error: {error}",
            last_error=error,
        )
        exhausted.__cause__ = error
        return exhausted
    return error


class StatestoreClient:
    """A client of one statestore service; thread-safe, one connection pool.

    ``client = StatestoreClient("http://127.0.0.1:8080", token=..., verify="ca.pem")``;
    ``client.get("products", "p1")``. Every read takes ``min_position=``; ``client.pinned("products")``
    gives a view whose reads all demand the position read once when it was made.
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
        transport: httpx.BaseTransport | None = None,
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
        self._http = httpx.Client(transport=transport, **self.options.httpx_kwargs())
        self._formats: dict[str, ValueFormat] = {}

    def __repr__(self) -> str:
        return f"StatestoreClient({self.options.url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> StatestoreClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------------

    def _send(self, call: Call, deadline: float | None = None) -> httpx.Response:
        limit = Deadline(deadline or self.options.deadline)
        attempt = 0
        while True:
            attempt += 1
            error: StatestoreClientError | None
            try:
                response = self._http.request(
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
            time.sleep(delay)

    # -- reads -------------------------------------------------------------------------------

    def stores(self, *, deadline: float | None = None) -> list[StoreInfo]:
        """Every store the service serves."""
        body = wire.json_body(self._send(Call("GET", "/v1/stores"), deadline))
        infos = [StoreInfo.from_json(item) for item in body.get("stores", [])]
        self._formats.update((info.name, info.value_format) for info in infos)
        return infos

    def store(self, store: str, *, deadline: float | None = None) -> StoreInfo:
        """One store's status: state, position, lag, value format (``UnknownStoreError`` if absent)."""
        info = StoreInfo.from_json(wire.json_body(self._send(Call("GET", wire.store_path(store)), deadline)))
        self._formats[store] = info.value_format
        return info

    def position(self, store: str, *, deadline: float | None = None) -> Position:
        """The store's current position (the version of the table it serves now)."""
        return self.store(store, deadline=deadline).position

    def value_format(self, store: str) -> ValueFormat:
        """The store's value format, asked once and cached."""
        if store not in self._formats:
            self.store(store)
        return self._formats[store]

    def get(
        self,
        store: str,
        key: Key,
        *,
        min_position: PositionLike | None = None,
        as_of: PositionLike | None = None,
        raw: bool = False,
        deadline: float | None = None,
    ) -> Any:
        """The value of ``key`` (decoded per the value format, or bytes if ``raw``), ``None`` if absent.

        ``as_of=`` reads the value exactly as of that position (the store must keep history);
        ``min_position=`` only demands a table at least that new. They exclude each other.
        """
        if key in ("", b""):
            found = self.get_many(
                store, [key], min_position=min_position, as_of=as_of, raw=raw, deadline=deadline
            )
            return found[0]
        limit = deadline or self.options.deadline
        try:
            response = self._send(wire.get_call(store, key, min_position, as_of), limit)
        except KeyNotFoundError:
            return None
        return wire.decode_get(response, raw)

    def get_many(
        self,
        store: str,
        keys: Sequence[Key],
        *,
        min_position: PositionLike | None = None,
        as_of: PositionLike | None = None,
        raw: bool = False,
        deadline: float | None = None,
    ) -> list[Any]:
        """The values of ``keys`` in request order (``None`` for absent keys).

        Duplicates are asked once; keys go in Arrow batches of ``batch_size``.
        """
        unique, index = wire.dedupe([wire.key_bytes(k) for k in keys])
        value_format = None if raw else self.value_format(store)
        found = self.get_arrow(
            store,
            pa.array(unique, type=pa.binary()),
            min_position=min_position,
            as_of=as_of,
            deadline=deadline,
        ).to_pylist()
        if value_format is not None:
            found = [None if v is None else wire.decode_value(v, value_format) for v in found]
        return [found[i] for i in index]

    def get_arrow(
        self,
        store: str,
        keys: pa.Array,
        *,
        min_position: PositionLike | None = None,
        as_of: PositionLike | None = None,
        deadline: float | None = None,
    ) -> pa.Array:
        """Stored values (``binary``, null when absent) for an Arrow array of keys, row for row.

        The building block of the Spark join: no dedupe, no decoding, one request per ``batch_size``.
        """
        wire.read_params(min_position, as_of=as_of)  # refuse both before anything is sent
        limit = Deadline(deadline or self.options.deadline)
        parts: list[pa.Array] = []
        size = self.options.batch_size
        for start in range(0, len(keys), size):
            chunk = keys.slice(start, size)
            remaining = limit.remaining()
            if remaining <= 0:
                raise DeadlineExceededError(f"batch get on store {store!r} ran past its deadline")
            response = self._send(wire.batch_get_call(store, chunk, min_position, as_of), remaining)
            parts.append(wire.decode_values(response.content, len(chunk)))
        if not parts:
            return pa.array([], type=pa.binary())
        return pa.concat_arrays(parts)

    def scan(
        self,
        store: str,
        prefix: Key = "",
        *,
        page_size: int = 1000,
        min_position: PositionLike | None = None,
        as_of: PositionLike | None = None,
        deadline: float | None = None,
    ) -> Iterator[tuple[Key, Any]]:
        """``(key, value)`` pairs whose key starts with ``prefix``, byte-ordered, across pages.

        Later pages demand at least the position of the first, so the scan never goes back in time;
        with ``as_of=`` every page reads exactly that position, so the whole scan is one version.
        Keys are ``str`` for a text prefix and ``bytes`` for a bytes prefix.
        """
        wire.read_params(min_position, as_of=as_of)
        value_format = self.value_format(store)
        floor = Position.of(min_position) if min_position is not None else None
        after: str | None = None
        while True:
            call = wire.scan_call(store, prefix, after, page_size, floor, as_of)
            response = self._send(call, deadline)
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

    def _index_pages(
        self,
        store: str,
        index: str,
        value: str,
        after: bytes | None,
        page_size: int,
        floor: Position | None,
        as_of: PositionLike | None,
        deadline: float | None,
    ) -> Iterator[tuple[bytes, Any]]:
        """Raw ``(row key, JSON value)`` items of one indexed value after ``after``, across pages."""
        while True:
            call = indexes.index_call(store, index, value, after, page_size, floor, as_of)
            response = self._send(call, deadline)
            items, after = indexes.decode_index_page(wire.json_body(response))
            seen = wire.position_of(response)
            if seen is not None and as_of is None:
                floor = seen if floor is None else floor.merged(seen)
            yield from items
            if after is None:
                return

    def index_lookup(
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
    ) -> Iterator[tuple[Key, Any]]:
        """Every ``(row key, value)`` whose indexed field equals ``value``, by row key, across pages.

        ``client.index_lookup("positions", "by_ticker", "AAPL")``. Pages read like :meth:`scan`:
        never back in time, or all exactly ``as_of``. Row keys are UTF-8 text unless ``binary_keys``.
        """
        wire.read_params(min_position, as_of=as_of)
        floor = Position.of(min_position) if min_position is not None else None
        text = indexes.index_text(value)
        for key, row in self._index_pages(store, index, text, None, page_size, floor, as_of, deadline):
            yield indexes.row_key(key, binary_keys), row

    def index_arrow(
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
        """The rows of many distinct indexed values: a table ``value: string, key: binary, row: binary``.

        Each value's rows are together, in request order and row-key order; a value without rows has
        one row with null ``key`` and ``row``. Values go in Arrow batches of ``batch_size``; a value
        with more than ``limit_per_value`` rows is paged on with GET (exactly ``as_of``, or at least
        the batch's position). The building block of the Spark index join.
        """
        wire.read_params(min_position, as_of=as_of)
        limit = Deadline(deadline or self.options.deadline)
        parts: list[pa.Table] = []
        size = self.options.batch_size
        for start in range(0, len(values), size):
            chunk = values.slice(start, size)
            if limit.remaining() <= 0:
                raise DeadlineExceededError(f"index lookup on store {store!r} ran past its deadline")
            call = indexes.index_batch_call(store, index, chunk, limit_per_value, min_position, as_of)
            response = self._send(call, limit.remaining())
            table = indexes.decode_index_batch(response.content, chunk)
            floor = None if as_of is not None else wire.position_of(response)
            more = {
                value: list(
                    self._index_pages(
                        store, index, value, cursor, limit_per_value, floor, as_of, limit.remaining()
                    )
                )
                for value, cursor in indexes.continued_values(table)
            }
            parts.append(indexes.with_more_pages(table, more))
        if not parts:
            return indexes.INDEX_ANSWER.empty_table().drop_columns(["next_after"])
        return pa.concat_tables(parts)

    def index_get_many(
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
        """For every value, its ``(row key, value)`` rows in row-key order (``[]`` when none match).

        ``client.index_get_many("positions", "by_ticker", ["AAPL", "MSFT"])``; values are asked once.
        """
        texts = [indexes.index_text(v) for v in values]
        unique = list(dict.fromkeys(texts))
        table = self.index_arrow(
            store,
            index,
            pa.array(unique, pa.string()),
            as_of=as_of,
            min_position=min_position,
            limit_per_value=limit_per_value,
            deadline=deadline,
        )
        return indexes.grouped_rows(table, values, texts, binary_keys)

    def consistent(self, store: str, position: PositionLike | None = None) -> ConsistentStore:
        """A view of ``store`` whose reads are all exactly as of ``position`` (default: its position now).

        Every read of it gives the same answer, on any replica, as long as the store keeps history
        back to ``position`` (else ``HistoryExpiredError``).
        """
        return ConsistentStore(
            self, store, Position.of(position) if position is not None else self.position(store)
        )

    def pinned(self, store: str, position: PositionLike | None = None) -> PinnedStore:
        """A view of ``store`` whose reads all demand ``position`` (default: the store's position now)."""
        return PinnedStore(
            self, store, Position.of(position) if position is not None else self.position(store)
        )
