"""What the sync and async clients share: their configuration, and every read written once as a flow.

:class:`BaseClient` builds the requests, retries, batches, pages and decodes, all as flows
(:mod:`clients.flow`) that do no I/O; :class:`clients.client.StatestoreClient` runs them with blocking
httpx calls and :class:`clients.aio.AsyncStatestoreClient` with asyncio. Each flavour adds only its
driver and the thin public methods that run one flow each. A flow may also run several flows at once
(``flow.Together``): one call can send its parts concurrently and merge the answers.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, Self, TypedDict, TypeVar, Unpack

import httpx
import pyarrow as pa

from clients import flow, indexes, merging, wire
from clients.answer import Answer, merged_positions
from clients.environment import service_token, service_url
from clients.exceptions import AnswerTooLargeError, DeadlineExceededError, KeyNotFoundError
from clients.flow import Attempt, Flow, Together
from clients.indexes import IndexValue
from clients.natural_keys import NUMBER_FORMATS, stored_key, stored_key_array
from clients.options import DEFAULT_BATCH_SIZE, Cert, ClientOptions, Verify
from clients.paging import Pager
from clients.retry import Deadline, RetryPolicy
from clients.routing import ShardRouting
from clients.sharding import Sharding, grouped_by_shard, in_request_order
from clients.times import TimeLike, time_ms, times_ms
from clients.wire import Key
from wire.position import Position, PositionLike

HttpT = TypeVar("HttpT", bound=httpx.Client | httpx.AsyncClient)
TransportT = TypeVar("TransportT", bound=httpx.BaseTransport | httpx.AsyncBaseTransport)
T = TypeVar("T")
RowsT = TypeVar("RowsT")
"""What a streaming read returns: an ``Iterator`` of :data:`Row`, or an ``AsyncIterator``."""
Row = tuple[Key, Any]
"""One item of a streaming read: ``(key, value)``."""


class ReadAt(TypedDict, total=False):
    """The keywords every read takes.

    ``min_position=`` demands a table at least that new (the read waits for it, within the deadline);
    ``as_of=`` reads exactly that position (the store must keep history back to it); not both.
    ``deadline=`` bounds the call with its retries, in seconds (default: the client's ``deadline``).
    ``fields=`` (``get``, ``get_many``, ``get_arrow`` of JSON stores) answers each value with only
    these dotted paths (docs/http-api.md, "Projection").
    """

    min_position: PositionLike | None
    as_of: PositionLike | None
    deadline: float | None
    fields: Sequence[str] | None


class IndexReadAt(ReadAt, total=False):
    """The keywords of a batch index read: those of every read, and ``limit_per_value=``.

    ``limit_per_value`` is the number of rows per value one batch answer holds (default 1,000);
    a value with more rows is paged on with GET.
    """

    limit_per_value: int


class IndexRowsAt(IndexReadAt, total=False):
    """The keywords of a batch index read, and ``binary_keys=True`` for row keys as ``bytes``."""

    binary_keys: bool


@dataclasses.dataclass(frozen=True, slots=True)
class _IndexBatch:
    """What every batch of one index lookup asks, but its values; ``shard`` is where it goes."""

    store: str
    index: str
    limit_per_value: int
    min_position: PositionLike | None
    as_of: PositionLike | None
    shard: int | None = None

    def on(self, sharding: Sharding, shard: int | None) -> _IndexBatch:
        """This lookup sent to ``shard``, with its part of the positions."""
        if shard is None:
            return self
        return dataclasses.replace(
            self,
            min_position=sharding.part(self.min_position, shard),
            as_of=sharding.part(self.as_of, shard),
            shard=shard,
        )


def pinned_at(read: ReadAt) -> tuple[PositionLike | None, PositionLike | None]:
    """``(min_position, as_of)`` of a read, refused before anything is sent when both are given."""
    min_position, as_of = read.get("min_position"), read.get("as_of")
    wire.read_params(min_position, as_of=as_of)
    return min_position, as_of


def floor_of(min_position: PositionLike | None) -> Position | None:
    return Position.of(min_position) if min_position is not None else None


class BaseClient(ShardRouting, ABC, Generic[HttpT, TransportT, RowsT]):
    """A client of one statestore service, or of every shard of a sharded one: configuration, one
    connection pool, reads as flows.

    With a URL template (``http://statestore-{shard}.statestore:8080``) the client reads each store's
    sharding from any shard (once; again after a 421 ``wrong-shard``), sends every key to its shard,
    splits batches per shard and sends the parts concurrently, merges the answers in request order
    and listings in key order, and merges positions. A URL without ``{shard}`` is one shard: no
    extra request, no threads.
    """

    def __init__(
        self,
        url: str | ClientOptions,
        *,
        token: str | None = None,
        verify: Verify = True,
        cert: Cert | None = None,
        timeout: float = 10.0,
        deadline: float = 30.0,
        retry: RetryPolicy | None = None,
        batch_size: int | None = None,
        transport: TransportT | None = None,
    ) -> None:
        """``url`` is the service's base URL (a template holding ``{shard}`` for a sharded deployment),
        or the :class:`ClientOptions` of another client.

        ``token`` is sent as a bearer token; ``verify`` is ``True`` (system CAs), ``False`` or a CA
        bundle; ``cert`` is a client certificate for mTLS, ``(certfile, keyfile)`` or one PEM file
        with both; ``timeout`` bounds one attempt and ``deadline`` a whole call with its retries;
        ``batch_size`` is the number of keys per batch request; ``transport`` replaces httpx's.
        """
        if isinstance(url, ClientOptions):
            self.options = url
        else:
            self.options = ClientOptions(
                url,
                token=token,
                verify=verify,
                cert=cert,
                timeout=timeout,
                deadline=deadline,
                retry=retry or RetryPolicy(),
                batch_size=batch_size or DEFAULT_BATCH_SIZE,
            )
        super().__init__()
        self._http: HttpT = self._connect(transport)

    @classmethod
    def from_url(cls, url: str | None = None, *, token: str | None = None, **options: Any) -> Self:
        """A client of ``url`` (default: ``$STATESTORE_URL``), sending ``token`` (default:
        ``$STATESTORE_TOKEN``); ``options`` are the constructor's (``verify=``, ``deadline=``, ...).

        Raises ``ClientConfigError`` when no URL is given and ``STATESTORE_URL`` is unset.
        """
        return cls(service_url(url), token=service_token(token), **options)

    @classmethod
    def from_env(cls, **options: Any) -> Self:
        """A client configured by ``STATESTORE_URL`` and ``STATESTORE_TOKEN`` (``options`` as for
        the constructor); the same as ``from_url()`` with no URL."""
        return cls.from_url(None, **options)

    @abstractmethod
    def _connect(self, transport: TransportT | None) -> HttpT:
        """The httpx client (one connection pool) this client sends with."""

    @abstractmethod
    def _rows(self, flow: Flow[None]) -> RowsT:
        """The items a streaming flow emits, as this flavour's iterator (run lazily)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.options.url!r})"

    def _request(self, attempt: Attempt) -> httpx.Request:
        call = attempt.call
        return self._http.build_request(
            call.method,
            self.options.url_of(call.shard) + call.path,
            params=attempt.params,
            headers=call.headers,
            content=call.content,
            timeout=attempt.timeout,
        )

    # -- streaming reads: the same method serves both flavours ------------------------------------

    def scan(
        self,
        store: str,
        prefix: Key = "",
        *,
        after: Key | None = None,
        page_size: int = 1000,
        **read: Unpack[ReadAt],
    ) -> RowsT:
        """``(key, value)`` pairs whose key starts with ``prefix``, byte-ordered, across pages.

        With ``after``, the scan starts strictly after that key (to resume a scan, or to read one
        key range); pages are fetched only as the caller reaches them, so stopping early is cheap.

        Later pages demand at least the position of the first, so the scan never goes back in time;
        with ``as_of=`` every page reads exactly that position, so the whole scan is one version.
        Keys are ``str`` for a text prefix and ``bytes`` for a bytes prefix. ``deadline=`` bounds
        each page. An ``Iterator`` from the sync client, an ``AsyncIterator`` from the async one.
        """
        return self._rows(self._scan_flow(store, prefix, after, page_size, read))

    def index_lookup(
        self,
        store: str,
        index: str,
        value: IndexValue,
        *,
        page_size: int = 1000,
        binary_keys: bool = False,
        **read: Unpack[ReadAt],
    ) -> RowsT:
        """Every ``(row key, value)`` whose indexed field equals ``value``, by row key, across pages.

        ``client.index_lookup("positions", "by_ticker", "AAPL")``. Pages read like :meth:`scan`:
        never back in time, or all exactly ``as_of``. Row keys are UTF-8 text unless ``binary_keys``.
        """
        return self._rows(self._index_lookup_flow(store, index, value, page_size, binary_keys, read))

    # -- flows: every read, routed to its shards (see clients.routing) ----------------------------

    def _get_flow(
        self, store: str, key: Key, raw: bool, read: ReadAt, default: Any = None, time: TimeLike | None = None
    ) -> Flow[Any]:
        answer = yield from self._get_answer_flow(store, key, raw, read, default, time)
        return answer.value

    def _get_answer_flow(
        self, store: str, key: Key, raw: bool, read: ReadAt, default: Any = None, time: TimeLike | None = None
    ) -> Flow[Answer[Any]]:
        at = None if time is None else time_ms(time)
        if key in ("", b""):
            # The empty key has no path segment: the batch route asks for it.
            times = None if at is None else [at]
            found = yield from self._get_many_answer_flow(store, [key], raw, read, default, times)
            return Answer(found.value[0], found.position)
        min_position, as_of = pinned_at(read)
        deadline = self._deadline(read.get("deadline"))
        key_format = yield from self._key_format_flow(store)
        # Number keys go as the producer's bytes: those are what a sharded store is routed by.
        sent: Key = (
            key
            if isinstance(key, str | bytes) and key_format not in NUMBER_FORMATS
            else stored_key(key, key_format)
        )

        def read_key(sharding: Sharding) -> Flow[Answer[Any]]:
            shard = sharding.shard_of(wire.key_bytes(sent))
            call = wire.get_call(
                store,
                sent,
                sharding.part(min_position, shard),
                sharding.part(as_of, shard),
                fields=read.get("fields"),
            )
            call = wire.at_time(call, at)
            try:
                response = yield from self._sent(call.to(self._target(shard)), deadline)
            except KeyNotFoundError as absent:
                return Answer(default, merged_positions([absent.position]))
            self._notice_growth(store, sharding, response)
            return Answer(wire.decode_get(response, raw), merged_positions([wire.position_of(response)]))

        return (yield from self._routed(store, deadline, read_key))

    def _get_many_flow(
        self,
        store: str,
        keys: Sequence[Key],
        raw: bool,
        read: ReadAt,
        default: Any = None,
        times: Sequence[TimeLike] | None = None,
    ) -> Flow[list[Any]]:
        answer = yield from self._get_many_answer_flow(store, keys, raw, read, default, times)
        return answer.value

    def _get_many_answer_flow(
        self,
        store: str,
        keys: Sequence[Key],
        raw: bool,
        read: ReadAt,
        default: Any = None,
        times: Sequence[TimeLike] | None = None,
    ) -> Flow[Answer[list[Any]]]:
        key_format = yield from self._key_format_flow(store)
        stored_keys = [stored_key(k, key_format) for k in keys]
        known_format = yield from self._value_format_flow(store)
        value_format = None if raw else known_format
        # JSON documents whole, as stored: a store decoding at ingest (reported as json) would
        # answer Arrow structs, which leave maps out and bad values null.
        stored = known_format == "json"
        if times is None:
            unique, index = wire.dedupe(stored_keys)
            array, position = yield from self._get_arrow_answer_flow(
                store, pa.array(unique, type=pa.binary()), read, stored=stored
            )
        else:
            if len(times) != len(keys):
                raise ValueError(
                    f"as_of_times must hold one time per key: {len(times)} times, {len(keys)} keys"
                )
            # A key asked at two times is two reads: pairs are deduped, not keys.
            pairs, index = wire.dedupe(list(zip(stored_keys, times_ms(times), strict=True)))
            unique_keys = pa.array([k for k, _ in pairs], type=pa.binary())
            unique_times = pa.array([t for _, t in pairs], pa.timestamp("ms"))  # epoch ms as they are
            array, position = yield from self._get_arrow_answer_flow(
                store, unique_keys, read, unique_times, stored=stored
            )
        # Arrow answers null only for an absent key; a stored JSON null is the bytes ``null``.
        found = array.to_pylist()
        if value_format is not None:
            found = [default if v is None else wire.decode_value(v, value_format) for v in found]
        elif default is not None:
            found = [default if v is None else v for v in found]
        return Answer([found[i] for i in index], position)

    def _batches(self, values: pa.Array, deadline: Deadline, what: str) -> Iterator[pa.Array]:
        """``values`` in slices of ``batch_size``; a slice not yet sent when ``deadline`` passes fails."""
        size = self.options.batch_size
        for start in range(0, len(values), size):
            if deadline.expired:
                raise DeadlineExceededError(f"{what} ran past its deadline")
            yield values.slice(start, size)

    def _get_arrow_flow(
        self, store: str, keys: pa.Array, read: ReadAt, times: pa.Array | None = None
    ) -> Flow[pa.Array]:
        answer = yield from self._get_arrow_answer_flow(store, keys, read, times)
        return answer.value

    def _get_arrow_answer_flow(
        self,
        store: str,
        keys: pa.Array,
        read: ReadAt,
        times: pa.Array | None = None,
        stored: bool = False,
    ) -> Flow[Answer[pa.Array]]:
        min_position, as_of = pinned_at(read)
        deadline = self._deadline(read.get("deadline"))
        if times is not None and len(times) != len(keys):
            raise ValueError(f"as_of_times must hold one time per key: {len(times)} times, {len(keys)} keys")
        if not pa.types.is_binary(keys.type):
            keys = stored_key_array(keys, (yield from self._key_format_flow(store)))
        fields = read.get("fields")

        def read_keys(sharding: Sharding) -> Flow[Answer[pa.Array]]:
            if sharding.shards == 1:
                return (
                    yield from self._get_arrow_shard(
                        store, keys, sharding, 0, min_position, as_of, deadline, fields, times, stored
                    )
                )
            groups = grouped_by_shard(sharding.shards_of(keys), sharding.shards)
            if not groups:
                return Answer(pa.array([], type=pa.binary()), Position())
            parts: list[Answer[pa.Array]] = yield Together(
                tuple(
                    self._get_arrow_shard(
                        store,
                        keys.take(rows),
                        sharding,
                        shard,
                        sharding.part(min_position, shard),
                        sharding.part(as_of, shard),
                        deadline,
                        fields,
                        None if times is None else times.take(rows),
                        stored,
                    )
                    for shard, rows in groups
                )
            )
            return Answer(
                in_request_order([part.value for part in parts], [rows for _, rows in groups]),
                merged_positions(part.position for part in parts),
            )

        return (yield from self._routed(store, deadline, read_keys))

    def _get_arrow_shard(
        self,
        store: str,
        keys: pa.Array,
        sharding: Sharding,
        shard: int,
        min_position: PositionLike | None,
        as_of: PositionLike | None,
        deadline: Deadline,
        fields: Sequence[str] | None = None,
        times: pa.Array | None = None,
        stored: bool = False,
    ) -> Flow[Answer[pa.Array]]:
        """The values of keys that all live on ``shard``, in batches of ``batch_size`` (each key as of
        its time in ``times``, when given)."""
        parts: list[pa.Array] = []
        positions: list[Position | None] = []
        sent = 0
        for chunk in self._batches(keys, deadline, f"batch get on store {store!r}"):
            chunk_times = None if times is None else times.slice(sent, len(chunk))
            sent += len(chunk)
            call = wire.batch_get_call(store, chunk, min_position, as_of, fields, chunk_times, stored)
            call = call.to(self._target(shard))
            response = yield from self._sent(call, deadline)
            self._notice_growth(store, sharding, response)
            parts.append(wire.decode_values(response.content, len(chunk)))
            positions.append(wire.position_of(response))
        values = pa.concat_arrays(parts) if parts else pa.array([], type=pa.binary())
        return Answer(values, merged_positions(positions))

    def _listing_flow(
        self,
        store: str,
        read: ReadAt,
        pager_of: Callable[[Sharding, int], Pager[Any]],
        key: Callable[[Any], Any],
        after: Any = None,
    ) -> Flow[None]:
        """Every item of a listing after cursor ``after`` (``pager_of(sharding, shard)`` pages one
        shard), in key order."""
        min_position, _ = pinned_at(read)
        seconds = read.get("deadline")
        sharding = yield from self._routing_flow(store, self._deadline(seconds))
        if sharding.shards == 1:
            send = self._sender(seconds, self._target(0))
            yield from pager_of(sharding, 0).every_page(send, after, floor_of(min_position))
            return
        listings = [
            merging.Listing(
                pager_of(sharding, shard),
                self._sender(seconds, shard),
                floor_of(sharding.part(min_position, shard)),
                after,
            )
            for shard in range(sharding.shards)
        ]
        yield from merging.merged(listings, key)

    def _scan_flow(
        self, store: str, prefix: Key, after: Key | None, page_size: int, read: ReadAt
    ) -> Flow[None]:
        _, as_of = pinned_at(read)
        value_format = yield from self._value_format_flow(store)
        binary = isinstance(prefix, bytes)

        def row(item: Any) -> Row:
            key = wire.decode_scan_key(item["key"], binary)
            return key, wire.decode_json_member(item["value"], value_format)

        def decode(page: Any) -> tuple[Iterator[Row], str | None]:
            return map(row, page.get("items", [])), page.get("next_after")

        def pager_of(sharding: Sharding, shard: int) -> Pager[str]:
            exact = sharding.part(as_of, shard)
            return Pager(
                lambda after, floor: wire.scan_call(store, prefix, after, page_size, floor, exact),
                decode,
                exact,
            )

        cursor = None if after is None else wire.scan_cursor(after, binary)
        key_format = yield from self._key_format_flow(store)
        order = scan_order(key_format if not binary else "bytes")
        yield from self._listing_flow(store, read, pager_of, order, cursor)

    def _index_pager(
        self, store: str, index: str, value: str, page_size: int, as_of: PositionLike | None
    ) -> Pager[bytes]:
        """The pages of the rows whose indexed field is ``value``; items are ``(raw row key, value)``."""
        return Pager(
            lambda after, floor: indexes.index_call(store, index, value, after, page_size, floor, as_of),
            indexes.decode_index_page,
            as_of,
        )

    def _index_lookup_flow(
        self, store: str, index: str, value: IndexValue, page_size: int, binary_keys: bool, read: ReadAt
    ) -> Flow[None]:
        _, as_of = pinned_at(read)
        text = indexes.index_text(value)

        key_format = yield from self._key_format_flow(store)

        def pager_of(sharding: Sharding, shard: int) -> Pager[bytes]:
            pager = self._index_pager(store, index, text, page_size, sharding.part(as_of, shard))
            return pager.with_items(lambda item: (indexes.row_key(item[0], binary_keys, key_format), item[1]))

        numbers = key_format in NUMBER_FORMATS and not binary_keys
        order = scan_order(key_format) if numbers else (lambda item: wire.key_bytes(item[0]))
        yield from self._listing_flow(store, read, pager_of, order)

    def _index_arrow_flow(
        self, store: str, index: str, values: pa.Array, read: IndexReadAt
    ) -> Flow[pa.Table]:
        min_position, as_of = pinned_at(read)
        limit_per_value = read.get("limit_per_value", indexes.DEFAULT_LIMIT_PER_VALUE)
        deadline = self._deadline(read.get("deadline"))
        sharding = yield from self._routing_flow(store, deadline)
        lookup = _IndexBatch(store, index, limit_per_value, min_position, as_of)
        if sharding.shards == 1:
            return (
                yield from self._index_arrow_shard(lookup.on(sharding, self._target(0)), values, deadline)
            )
        # Every shard indexes its own rows: each is asked for every value, and the rows merged.
        tables = yield Together(
            tuple(
                self._index_arrow_shard(lookup.on(sharding, shard), values, deadline)
                for shard in range(sharding.shards)
            )
        )
        return indexes.merged_answers(tables, values)

    def _index_arrow_shard(self, lookup: _IndexBatch, values: pa.Array, deadline: Deadline) -> Flow[pa.Table]:
        """The rows of ``values`` on one shard (or the one service), in batches, paged on per value."""
        parts: list[pa.Table] = []
        for chunk in self._batches(values, deadline, f"index lookup on store {lookup.store!r}"):
            parts.extend((yield from self._index_chunk_flow(lookup, chunk, deadline)))
        if not parts:
            return indexes.INDEX_ANSWER.empty_table().drop_columns(["next_after"])
        return pa.concat_tables(parts)

    def _index_chunk_flow(
        self, lookup: _IndexBatch, chunk: pa.Array, deadline: Deadline
    ) -> Flow[list[pa.Table]]:
        """The answers for ``chunk``, halved and asked again while the service finds one too large.

        A batch of values whose rows together pass the service's ``limits.max_answer_rows`` is
        refused whole (413 ``answer-too-large``); its halves are smaller answers. A single value
        still too large is the caller's to narrow (``limit_per_value``).
        """
        call = indexes.index_batch_call(
            lookup.store, lookup.index, chunk, lookup.limit_per_value, lookup.min_position, lookup.as_of
        )
        try:
            response = yield from self._sent(call.to(lookup.shard), deadline)
        except AnswerTooLargeError:
            if len(chunk) < 2:
                raise
            half = len(chunk) // 2
            first = yield from self._index_chunk_flow(lookup, chunk.slice(0, half), deadline)
            second = yield from self._index_chunk_flow(lookup, chunk.slice(half), deadline)
            return first + second
        table = indexes.decode_index_batch(response.content, chunk)
        # A value with more rows than the batch answered is paged on at the batch's position.
        floor = None if lookup.as_of is not None else wire.position_of(response)
        more: dict[str, list[tuple[bytes, Any]]] = {}
        for value, cursor in indexes.continued_values(table):
            pager = self._index_pager(lookup.store, lookup.index, value, lookup.limit_per_value, lookup.as_of)
            rows = pager.every_page(self._sender(deadline, lookup.shard), cursor, floor)
            more[value] = yield from flow.collected(rows)
        return [indexes.with_more_pages(table, more)]

    def _index_get_many_flow(
        self, store: str, index: str, values: Sequence[IndexValue], read: IndexRowsAt
    ) -> Flow[dict[IndexValue, list[Row]]]:
        texts = [indexes.index_text(v) for v in values]
        unique = pa.array(list(dict.fromkeys(texts)), pa.string())
        table = yield from self._index_arrow_flow(store, index, unique, read)
        key_format = yield from self._key_format_flow(store)
        return indexes.grouped_rows(table, values, texts, read.get("binary_keys", False), key_format)


def scan_order(key_format: str) -> Callable[[Any], Any]:
    """The merge key of scan items across shards: each shard lists its keys in stored byte order,
    so the merged listing is in byte order too. For ``long`` and ``int`` keys (answered as decimal
    text) that is the order of the big-endian two's complement bytes: 0, 1, ... up to the largest,
    then the most negative up to -1."""
    if key_format in NUMBER_FORMATS:
        return lambda item: stored_key(item[0], key_format)
    return lambda item: item[0]
