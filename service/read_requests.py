"""Each read request checked once, whole, before any read: one object per route family.

A route asks :class:`ReadRequests` for its request object (a single get, a batch get, a scan; the
index routes: ``service.index_requests``), which finds the store (checking access), parses the
query (each parameter once), the path and the body within ``limits``, and refuses anything wrong
with its problem. The read then takes the object and nothing else of the request: keys, cursors,
page sizes, the read options (positions, timeout) and the answer's budget are all in it.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import quote

import anyio
import numpy as np
import orjson
import pyarrow as pa
from starlette.requests import Request

from service.answers import AnswerBudget
from service.arrow_body import ArrowStream, open_stream
from service.auth import Auth
from service.bodies import (
    JSON,
    batch_media_type,
    check_batch,
    check_key_length,
    malformed,
    read_body,
    too_large,
)
from service.codec import KeyEncoding, decode_key_text, decode_path_key, key_encoding
from service.limit_settings import LimitSettings
from service.natural_keys import is_number_column, stored_key_column
from service.projection import Projection
from service.queries import Query, ReadOptions, invalid_parameter, read_options
from service.reads import find_store
from service.registry import ServedStore, StoreRegistry
from service.settings import Settings
from service.sharding import KeyCheck
from service.time_requests import TIME_COLUMN, arrow_times, json_times, per_key_times
from wire.problems import PAGE_TOO_LARGE, ProblemError


@dataclasses.dataclass(frozen=True, slots=True)
class StoreRead:
    """What every read request holds: its store, its read options, its answer's bound in bytes and
    the fields its values are answered with (``fields=``; ``None``: whole values)."""

    served: ServedStore
    options: ReadOptions
    max_answer_bytes: int
    projection: Projection | None

    def budget(self) -> AnswerBudget:
        """A fresh budget for the answer's values (one per answer), counted as projected."""
        shape = None if self.projection is None else self.projection.values
        return AnswerBudget(self.max_answer_bytes, shape)


@dataclasses.dataclass(slots=True)
class KeyRead:
    """``GET .../keys/{key}``: one key of one store, its read options and the fields its value is
    answered with (``fields=``; ``None``: the whole value). Not frozen: it is built for every key
    GET, the most frequent request, and a frozen one costs a call per field; nothing changes it."""

    served: ServedStore
    options: ReadOptions
    projection: Projection | None
    key: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class BatchRead(StoreRead):
    """``POST .../keys:batchGet``: keys in request order, as JSON (``key_column`` ``None``) or Arrow
    (``key_column``: the keys as answered, numbers staying numbers)."""

    media_type: str
    encoding: KeyEncoding
    keys: list[bytes]
    key_column: pa.Array | None
    # ``values=stored``: an Arrow answer of a store decoding at ingest carries the stored documents.
    stored_values: bool = False
    times: list[int] | None = None  # one time per key (epoch ms): ``as_of_times`` / ``as_of_time``


@dataclasses.dataclass(frozen=True, slots=True)
class ScanRead(StoreRead):
    """``GET .../scan``: one page of the keys starting with ``prefix``, after ``after``."""

    encoding: KeyEncoding
    prefix: bytes
    after: bytes | None
    limit: int


def page_limit(query: Query, name: str, default: int, limits: LimitSettings) -> int:
    """The page size in ``name``: at least 1, ``413 page-too-large`` above ``limits.max_scan_limit``."""
    return checked_page_limit(query.integer(name, default, 1), limits)


def checked_page_limit(limit: int, limits: LimitSettings) -> int:
    """``limit``, or ``413 page-too-large`` above ``limits.max_scan_limit``."""
    if limit > limits.max_scan_limit:
        raise too_large(PAGE_TOO_LARGE, f"limit {limit} is above the maximum", limits.max_scan_limit)
    return limit


class ReadRequests:
    """Builds the request objects of the key and scan routes, within ``settings.limits``."""

    def __init__(self, settings: Settings, registry: StoreRegistry, auth: Auth) -> None:
        self.limits = settings.limits
        self.sharding = settings.sharding
        self.registry = registry
        self.auth = auth
        self.check_keys = KeyCheck(registry)

    def store(self, request: Request) -> ServedStore:
        """The store named in the path, once the caller may read it."""
        return find_store(self.registry, self.auth, request)

    def options(self, query: Query, request: Request, served: ServedStore) -> ReadOptions:
        # A store of natural keys reads every partition: a position's entries are all its own.
        every_partition = served.natural_keys is not None
        return read_options(query, request.scope, self.limits, self.sharding, every_partition)

    def common(
        self, served: ServedStore, query: Query, request: Request
    ) -> tuple[ServedStore, ReadOptions, int, Projection | None]:
        """What every read request holds (:class:`StoreRead`): its store, read options, answer
        bound and ``fields=``, checked."""
        projection = Projection.parse(query.get("fields"), served.value_format)
        return served, self.options(query, request, served), self.limits.max_answer_bytes, projection

    def key(self, request: Request) -> KeyRead:
        served = self.store(request)
        query = Query.of(request.scope)
        encoding = key_encoding(query.get("key_encoding"), served.keys_as)
        # The raw path keeps bytes that are not UTF-8 and slashes that were percent-encoded.
        raw_path = request.scope.get("raw_path")
        parts = raw_path.split(b"/", 5) if isinstance(raw_path, bytes) else []
        raw_segment = parts[5] if len(parts) == 6 else quote(request.path_params["key"]).encode()
        key = decode_path_key(raw_segment, encoding)
        check_key_length("the key", key, self.limits.max_key_bytes)
        self.check_keys(served, [key])
        projection = Projection.parse(query.get("fields"), served.value_format)
        return KeyRead(served, self.options(query, request, served), projection, key)

    async def batch(self, request: Request) -> BatchRead:
        served = self.store(request)
        query = Query.of(request.scope)
        media_type = batch_media_type(request, "keys")
        common = self.common(served, query, request)
        limits = self.limits
        body = await read_body(request, limits)
        key_format = served.keys_as
        if media_type == JSON:
            encoding, keys, times = _json_keys(
                body, query.get("key_encoding"), limits.max_batch_keys, key_format
            )
            longest = max(map(len, keys), default=0)
            check_batch(len(keys), longest, limits.max_batch_keys, limits.max_key_bytes)
            self.check_keys(served, keys)
            column = None
        else:
            encoding = key_encoding(query.get("key_encoding"), key_format)
            asked, times = await _arrow_keys(body, limits)
            stored = stored_key_column(asked, key_format)
            self.check_keys(served, stored)
            keys = stored.to_pylist()
            # Keys are answered as they were asked: numbers stay numbers.
            column = asked if is_number_column(asked.type) else stored
        if not times:  # an empty batch's empty times ask for no time view
            times = None
        else:
            served, options, max_answer_bytes, projection = common
            common = served, per_key_times(options, times), max_answer_bytes, projection
        return BatchRead(*common, media_type, encoding, keys, column, stored_values(query), times)

    def scan(self, request: Request) -> ScanRead:
        served = self.store(request)
        query = Query.of(request.scope)
        encoding = key_encoding(query.get("key_encoding"), served.keys_as)
        limit = page_limit(query, "limit", 100, self.limits)
        prefix_text = query.get("prefix")
        # The empty prefix scans every key, whatever the key format.
        prefix = decode_key_text(prefix_text, encoding) if prefix_text else b""
        after_text = query.get("after")
        after = None if after_text is None else decode_key_text(after_text, encoding)
        check_key_length("prefix", prefix, self.limits.max_key_bytes)
        check_key_length("after", after or b"", self.limits.max_key_bytes)
        return ScanRead(*self.common(served, query, request), encoding, prefix, after, limit)


def _json_keys(
    body: bytes, query_encoding: str | None, max_keys: int, key_format: str
) -> tuple[KeyEncoding, list[bytes], list[int] | None]:
    """The key encoding, the keys and the per-key times (if any) of a JSON batch body."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise malformed(f"the body is not valid JSON: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise malformed(
            'the body must be a JSON object {"keys": [...]}',
            [{"loc": ["body", "keys"], "msg": "required list"}],
        )
    encoding = key_encoding(document.get("key_encoding", query_encoding), key_format)
    texts = document["keys"]
    # Refuse an oversized batch before doing any work per key.
    check_batch(len(texts), 0, max_keys, 1)
    return encoding, _json_key_list(texts, encoding), json_times(document, len(texts))


def _not_strings() -> ProblemError:
    return malformed("every key must be a string", [{"loc": ["body", "keys"], "msg": "list of strings"}])


def _json_key_list(texts: list[Any], encoding: KeyEncoding) -> list[bytes]:
    if encoding == "utf8":
        try:
            return list(map(str.encode, texts))
        except TypeError as exc:  # a JSON value that is no string
            raise _not_strings() from exc
        except UnicodeEncodeError as exc:
            raise malformed(
                "a key is not valid Unicode text; send raw bytes with key_encoding=base64"
            ) from exc
    if not all(isinstance(t, str) for t in texts):
        raise _not_strings()
    return [decode_key_text(t, encoding) for t in texts]


def _is_key_type(data_type: pa.DataType) -> bool:
    return bool(
        is_number_column(data_type)
        or pa.types.is_binary(data_type)
        or pa.types.is_large_binary(data_type)
        or pa.types.is_string(data_type)
        or pa.types.is_large_string(data_type)
    )


async def _arrow_keys(body: bytes, limits: LimitSettings) -> tuple[pa.Array, list[int] | None]:
    """The ``key`` column of an Arrow batch body as sent, checked before decompressing
    (``service.natural_keys.stored_key_column`` reads them by the store's key format), and the
    per-key times of its ``as_of_time`` column if it has one.

    The usual body (a few kilobytes, one record batch) is checked and decoded on the event loop,
    where it takes tens of microseconds: a hop to a worker thread and back costs more than that.
    One of many record batches, or of many bytes once decompressed, is decoded on a worker thread.
    """
    stream = open_stream(body, [("key", _is_key_type), TIME_COLUMN], 1)  # no copy, no decompression
    if len(stream.messages) > INLINE_BATCHES:
        return await anyio.to_thread.run_sync(_checked_keys, stream, limits)
    if stream.decompressed_size(limits.max_batch_keys, limits.max_body_bytes) > INLINE_BYTES:
        return await anyio.to_thread.run_sync(_decoded_keys, stream, limits)
    return _decoded_keys(stream, limits)


INLINE_BATCHES = 8
"""Record batches an Arrow batch body decoded on the event loop may hold (each costs a parse)."""
INLINE_BYTES = 1 << 20
"""Bytes an Arrow batch body decoded on the event loop may take once decompressed."""


def _checked_keys(stream: ArrowStream, limits: LimitSettings) -> tuple[pa.Array, list[int] | None]:
    stream.decompressed_size(limits.max_batch_keys, limits.max_body_bytes)
    return _decoded_keys(stream, limits)


def _decoded_keys(stream: ArrowStream, limits: LimitSettings) -> tuple[pa.Array, list[int] | None]:
    columns = stream.columns()
    keys = columns[0]
    if keys.null_count:
        raise malformed("the 'key' column holds nulls; every row needs a key")
    times = arrow_times(columns[1]) if len(columns) == 2 else None
    longest = 8 if is_number_column(keys.type) else _longest(keys)
    check_batch(len(keys), longest, limits.max_batch_keys, limits.max_key_bytes)
    return keys, times


def _longest(keys: pa.Array) -> int:
    """The bytes of the longest value of a binary or string array without nulls, from its offsets."""
    if len(keys) == 0:
        return 0
    wide = pa.types.is_large_binary(keys.type) or pa.types.is_large_string(keys.type)
    width = np.dtype(np.int64 if wide else np.int32)
    ends = np.frombuffer(keys.buffers()[1], width, len(keys) + 1, keys.offset * width.itemsize)
    return int(np.diff(ends).max())


def stored_values(query: Query) -> bool:
    """``values=typed`` (the default: a struct for the formats decoded at ingest) or ``stored``."""
    asked = query.get("values")
    if asked not in (None, "typed", "stored"):
        raise invalid_parameter("values", "is typed (the default) or stored")
    return asked == "stored"
