"""The synchronous statestore client (httpx, pooled connections, retries within a deadline).

The reads are flows of :class:`clients.base.BaseClient`; this module runs them with blocking calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, TypeVar, Unpack, cast

import httpx
import pyarrow as pa

from clients import indexes
from clients.answer import Answer
from clients.arrow_scan import arrow_pages_flow
from clients.base import BaseClient, IndexReadAt, IndexRowsAt, ReadAt, Row
from clients.flow import Attempt, Emit, Flow, Sleep, Step, Thrown, Together, Walk, gathered
from clients.history_scan import HistoryPage, history_pages_flow
from clients.indexes import IndexValue
from clients.times import TimeLike, time_ms
from clients.views import AtLeast, Exact, View
from clients.wire import Key, StoreInfo, ValueFormat
from wire.position import Position, PositionLike

T = TypeVar("T")


class StatestoreClient(BaseClient[httpx.Client, httpx.BaseTransport, Iterator[Row]]):
    """A client of one statestore service; thread-safe, one connection pool.

    ``client = StatestoreClient("http://127.0.0.1:8080", token=..., verify="ca.pem")``, or
    ``StatestoreClient.from_env()`` (``STATESTORE_URL``, ``STATESTORE_TOKEN``);
    ``client.get("products", "p1")``; ``client.get_with_position(...)`` adds the answer's position.
    Every read takes ``min_position=``, ``as_of=`` and
    ``deadline=`` (:class:`clients.base.ReadAt`); ``client.pinned("products")`` gives a view whose
    reads all demand the position read once when it was made.
    """

    _pool: ThreadPoolExecutor | None = None  # the threads of concurrent requests, once first needed
    _pool_lock = threading.Lock()  # shared by every client: held only to start or stop a pool

    def _connect(self, transport: httpx.BaseTransport | None) -> httpx.Client:
        return httpx.Client(transport=transport, **self.options.httpx_kwargs())

    def close(self) -> None:
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self._http.close()

    def __enter__(self) -> StatestoreClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the driver: runs flows with blocking I/O ---------------------------------------------------

    def _run(self, flow: Flow[T]) -> T:
        walk = Walk(flow)
        for step in walk:
            walk.reply(self._perform(step))
        return walk.result

    def _rows(self, flow: Flow[None]) -> Iterator[Row]:
        walk = Walk(flow)
        for step in walk:
            if isinstance(step, Emit):
                yield from step.items
            else:
                walk.reply(self._perform(step))

    def _perform(self, step: Step) -> Any:
        if isinstance(step, Attempt):
            try:
                return self._http.send(self._request(step))
            except httpx.HTTPError as exc:
                return exc
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        if isinstance(step, Together):
            return self._together(step.flows)
        raise TypeError(f"{step!r} is a step of a streaming read; run the flow with _rows")

    def _together(self, flows: Sequence[Flow[Any]]) -> list[Any] | Thrown:
        """Runs ``flows`` on the client's threads (the calling thread alone for one flow).

        The threads are started on the first call and kept (starting them took milliseconds per
        call). A flow already on one of them runs its own ``Together`` in turn, in its thread: a
        pool thread never waits for another, so calls from any number of threads cannot deadlock.
        """
        if len(flows) == 1 or getattr(_pool_thread, "active", False):
            return gathered([self._settled(flow) for flow in flows])
        return gathered(list(self._threads().map(self._settled, flows)))

    def _threads(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    self.options.max_connections,
                    thread_name_prefix="statestore-client",
                    initializer=_mark_pool_thread,
                )
            return self._pool

    def _settled(self, flow: Flow[Any]) -> Any:
        """The flow's result, or the ``Exception`` it ended with."""
        try:
            return self._run(flow)
        except Exception as exc:
            return exc

    # -- reads ---------------------------------------------------------------------------------------

    def stores(self, *, deadline: float | None = None) -> list[StoreInfo]:
        """Every store the service serves."""
        return self._run(self._stores_flow(deadline))

    def store(self, store: str, *, deadline: float | None = None) -> StoreInfo:
        """One store's status: state, position, lag, value format (``UnknownStoreError`` if absent)."""
        return self._run(self._store_flow(store, deadline))

    def position(self, store: str, *, deadline: float | None = None) -> Position:
        """The store's current position (the version of the table it serves now)."""
        return self._run(self._position_flow(store, None, deadline))

    def value_format(self, store: str) -> ValueFormat:
        """The store's value format, asked once and cached."""
        return self._run(self._value_format_flow(store))

    def get(
        self,
        store: str,
        key: Key,
        *,
        raw: bool = False,
        default: Any = None,
        as_of_time: TimeLike | None = None,
        **read: Unpack[ReadAt],
    ) -> Any:
        """The value of ``key`` (decoded per the value format, or bytes if ``raw``), ``default`` if absent.

        A JSON store may hold the value ``null``, decoded as ``None``: pass a sentinel of your own
        as ``default`` to tell it from an absent key.
        ``as_of=`` reads the value exactly as of that position (the store must keep history);
        ``min_position=`` only demands a table at least that new. They exclude each other.
        ``as_of_time=`` (epoch ms, an aware ``datetime`` or RFC 3339 text) reads the key's record
        stamped last at or before that time (the store must keep history back to it).
        """
        return self._run(self._get_flow(store, key, raw, read, default, as_of_time))

    def get_many(
        self,
        store: str,
        keys: Sequence[Key],
        *,
        raw: bool = False,
        default: Any = None,
        as_of_times: Sequence[TimeLike] | None = None,
        **read: Unpack[ReadAt],
    ) -> list[Any]:
        """The values of ``keys`` in request order (``default`` for absent keys: see :meth:`get`).

        Duplicates are asked once; keys go in Arrow batches of ``batch_size``. ``as_of_times=``
        (one time per key) reads each key as of its own time, as ``get(as_of_time=)`` does.
        """
        return self._run(self._get_many_flow(store, keys, raw, read, default, as_of_times))

    def get_with_position(
        self,
        store: str,
        key: Key,
        *,
        raw: bool = False,
        as_of_time: TimeLike | None = None,
        **read: Unpack[ReadAt],
    ) -> Answer[Any]:
        """:meth:`get`'s value and the position it was read at: ``value, position = ...``.

        ``client.get("products", "p-1", min_position=answer.position)`` later never reads an older table.
        """
        return self._run(self._get_answer_flow(store, key, raw, read, None, as_of_time))

    def get_many_with_position(
        self,
        store: str,
        keys: Sequence[Key],
        *,
        raw: bool = False,
        as_of_times: Sequence[TimeLike] | None = None,
        **read: Unpack[ReadAt],
    ) -> Answer[list[Any]]:
        """:meth:`get_many`'s values and the position they were read at (see :class:`clients.Answer`)."""
        return self._run(self._get_many_answer_flow(store, keys, raw, read, None, as_of_times))

    def get_arrow(
        self, store: str, keys: pa.Array, as_of_times: pa.Array | None = None, **read: Unpack[ReadAt]
    ) -> pa.Array:
        """Stored values (``binary``, null when absent) for an Arrow array of keys, row for row
        (each as of its time in ``as_of_times``, ``timestamp`` or ``int64`` epoch ms, when given).

        The building block of the Spark join: no dedupe, no decoding, one request per ``batch_size``.
        """
        return self._run(self._get_arrow_flow(store, keys, read, as_of_times))

    def scan_arrow(
        self, store: str, prefix: bytes = b"", *, page_size: int = 10_000, **read: Unpack[ReadAt]
    ) -> Iterator[pa.RecordBatch]:
        """The keys starting with ``prefix`` and their stored values, as Arrow pages: record batches
        of ``key`` and ``value`` (both ``binary``, values as :meth:`get_arrow` answers them).

        Pages come in key order (a sharded store's shards one after another) and are fetched as the
        caller reaches them; positions as for :meth:`scan` (``as_of=`` makes every page one version).
        """
        return cast(
            Iterator[pa.RecordBatch], self._rows(arrow_pages_flow(self, store, prefix, page_size, read))
        )

    def history_arrow(
        self, store: str, as_of_time: TimeLike, *, page_size: int = 10_000, **read: Unpack[ReadAt]
    ) -> Iterator[HistoryPage]:
        """The store's whole history as Arrow pages (:mod:`clients.history_scan`), read to answer
        any time from ``as_of_time`` on (below the store's time floor: ``HistoryExpiredError``).

        Pages come in key order and are fetched as the caller reaches them; pass ``as_of=`` (a
        position) to read every page from one version of the history.
        """
        flow = history_pages_flow(self, store, page_size, time_ms(as_of_time), read)
        return cast(Iterator[HistoryPage], self._rows(flow))

    def index_arrow(self, store: str, index: str, values: pa.Array, **read: Unpack[IndexReadAt]) -> pa.Table:
        """The rows of many distinct indexed values: a table ``value: string, key: binary, row: binary``.

        Each value's rows are together, in request order and row-key order; a value without rows has
        one row with null ``key`` and ``row``. Values go in Arrow batches of ``batch_size``; a value
        with more than ``limit_per_value`` rows is paged on with GET (exactly ``as_of``, or at least
        the batch's position). The building block of the Spark index join.
        """
        return self._run(self._index_arrow_flow(store, index, values, read))

    def index_get_many(
        self, store: str, index: str, values: Sequence[IndexValue], **read: Unpack[IndexRowsAt]
    ) -> dict[IndexValue, list[Row]]:
        """For every value, its ``(row key, value)`` rows in row-key order (``[]`` when none match).

        ``client.index_get_many("positions", "by_ticker", ["AAPL", "MSFT"])``; values are asked once.
        """
        return self._run(self._index_get_many_flow(store, index, values, read))

    def consistent(self, store: str, position: PositionLike | None = None) -> ConsistentStore:
        """A view of ``store`` whose reads are all exactly as of ``position`` (default: its position now).

        Every read of it gives the same answer, on any replica, as long as the store keeps history
        back to ``position`` (else ``HistoryExpiredError``).
        """
        return ConsistentStore(self, store, self._run(self._position_flow(store, position)))

    def pinned(self, store: str, position: PositionLike | None = None) -> PinnedStore:
        """A view of ``store`` whose reads all demand ``position`` (default: the store's position now)."""
        return PinnedStore(self, store, self._run(self._position_flow(store, position)))


_pool_thread = threading.local()


def _mark_pool_thread() -> None:
    _pool_thread.active = True


class StoreView(View[Iterator[Row]]):
    """Reads of one store tied to a position: the client's reads without ``store`` and the pin."""

    client: StatestoreClient

    def get(
        self, key: Key, *, raw: bool = False, default: Any = None, as_of_time: TimeLike | None = None
    ) -> Any:
        return self.client.get(self.store, key, raw=raw, default=default, as_of_time=as_of_time, **self._read)

    def get_many(
        self,
        keys: Sequence[Key],
        *,
        raw: bool = False,
        default: Any = None,
        as_of_times: Sequence[TimeLike] | None = None,
    ) -> list[Any]:
        return self.client.get_many(
            self.store, keys, raw=raw, default=default, as_of_times=as_of_times, **self._read
        )

    def get_arrow(self, keys: pa.Array, as_of_times: pa.Array | None = None) -> pa.Array:
        return self.client.get_arrow(self.store, keys, as_of_times, **self._read)

    def index_arrow(
        self, index: str, values: pa.Array, *, limit_per_value: int = indexes.DEFAULT_LIMIT_PER_VALUE
    ) -> pa.Table:
        return self.client.index_arrow(
            self.store, index, values, limit_per_value=limit_per_value, **self._read
        )

    def index_get_many(
        self, index: str, values: Sequence[IndexValue], *, binary_keys: bool = False
    ) -> dict[IndexValue, list[Row]]:
        return self.client.index_get_many(self.store, index, values, binary_keys=binary_keys, **self._read)


class ConsistentStore(Exact, StoreView):
    """Reads of one store exactly as of ``position`` (see :meth:`StatestoreClient.consistent`)."""


class PinnedStore(AtLeast, StoreView):
    """Reads of one store that never see a table version older than ``position``."""
