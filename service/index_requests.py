"""The request objects of the index routes, checked once before any read (see ``service.read_requests``)."""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import quote, unquote_to_bytes

import anyio
import orjson
import pyarrow as pa
from starlette.requests import Request

from service.arrow_body import read_column
from service.bodies import JSON, batch_media_type, check_batch, check_key_length, malformed, read_body
from service.codec import KeyEncoding, bad_key_encoding, decode_key_text, key_encoding
from service.limit_settings import LimitSettings
from service.queries import Query
from service.read_requests import ReadRequests, StoreRead, checked_page_limit, page_limit, stored_values

DEFAULT_PAGE = 100
DEFAULT_LIMIT_PER_VALUE = 1000


@dataclasses.dataclass(frozen=True, slots=True)
class IndexRead(StoreRead):
    """``GET .../indexes/{index}/{value}``: one page of the rows whose indexed field is ``value``."""

    index: str
    value: bytes
    encoding: KeyEncoding
    after: bytes | None
    limit: int


@dataclasses.dataclass(frozen=True, slots=True)
class IndexBatchRead(StoreRead):
    """``POST .../indexes/{index}:batchGet``: the first page of each distinct value, in request order."""

    index: str
    media_type: str
    encoding: KeyEncoding
    texts: list[str]  # the values asked, each once
    values: list[bytes]  # the same, as bytes
    limit_per_value: int
    max_answer_rows: int
    stored_values: bool = False  # ``values=stored``: an Arrow answer's rows as stored, never a struct


def index_read(requests: ReadRequests, request: Request) -> IndexRead:
    """The checked request of ``GET .../indexes/{index}/{value}``."""
    served = requests.store(request)
    limits = requests.limits
    query = Query.of(request.scope)
    encoding = key_encoding(query.get("key_encoding"), served.keys_as)
    limit = page_limit(query, "limit", DEFAULT_PAGE, limits)
    value = _path_value(request)
    after_text = query.get("after")
    after = None if after_text is None else decode_key_text(after_text, encoding)
    check_key_length("the indexed value", value, limits.max_key_bytes)
    check_key_length("after", after or b"", limits.max_key_bytes)
    index = request.path_params["index"]
    return IndexRead(*requests.common(served, query, request), index, value, encoding, after, limit)


async def index_batch_read(requests: ReadRequests, request: Request) -> IndexBatchRead:
    """The checked request of ``POST .../indexes/{index}:batchGet``."""
    served = requests.store(request)
    limits = requests.limits
    media_type = batch_media_type(request, "values")
    query = Query.of(request.scope)
    limit = query.integer("limit_per_value", DEFAULT_LIMIT_PER_VALUE, 1)
    common = requests.common(served, query, request)
    body = await read_body(request, limits)
    encoding: KeyEncoding
    if media_type == JSON:
        document = _json_document(body)
        encoding = key_encoding(document.get("key_encoding", query.get("key_encoding")), served.keys_as)
        limit = _body_limit(document, limit)
        texts = _json_values(document, limits.max_batch_keys)
    else:
        encoding = "base64"
        texts = await anyio.to_thread.run_sync(_arrow_values, body, limits)
    try:
        values = [text.encode() for text in texts]
    except UnicodeEncodeError as exc:
        raise malformed("a value is not valid Unicode text") from exc
    longest = max(map(len, values), default=0)
    check_batch(len(values), longest, limits.max_batch_keys, limits.max_key_bytes, "values")
    limit = checked_page_limit(limit, limits)
    return IndexBatchRead(
        *common,
        index=request.path_params["index"],
        media_type=media_type,
        encoding=encoding,
        # Each value is answered once, however often it was asked.
        texts=list(dict.fromkeys(texts)),
        values=list(dict.fromkeys(values)),
        limit_per_value=limit,
        max_answer_rows=limits.max_answer_rows,
        stored_values=stored_values(query),
    )


def _path_value(request: Request) -> bytes:
    """The indexed value from the raw path segment (percent-decoded), which must be UTF-8."""
    raw_path = request.scope.get("raw_path")
    parts = raw_path.split(b"/", 6) if isinstance(raw_path, bytes) else []
    raw_segment = parts[6] if len(parts) == 7 else quote(request.path_params["value"]).encode()
    value = unquote_to_bytes(raw_segment)
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad_key_encoding(
            "the indexed value in the path is not valid UTF-8 once percent-decoded; indexed values are text"
        ) from exc
    return value


def _json_document(body: bytes) -> dict[str, Any]:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise malformed(f"the body is not valid JSON: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("values"), list):
        raise malformed(
            'the body must be a JSON object {"values": [...]}',
            [{"loc": ["body", "values"], "msg": "required list"}],
        )
    return document


def _body_limit(document: dict[str, Any], default: int) -> int:
    limit = document.get("limit_per_value", default)
    if isinstance(limit, float) and limit.is_integer():
        limit = int(limit)  # JSON Schema's integer (the OpenAPI document's) includes 5.0
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise malformed(
            "limit_per_value must be an integer of at least 1",
            [{"loc": ["body", "limit_per_value"], "msg": "integer >= 1"}],
        )
    return limit


def _json_values(document: dict[str, Any], max_values: int) -> list[str]:
    texts = document["values"]
    # Refuse an oversized batch before doing any work per value.
    check_batch(len(texts), 0, max_values, 1, "values")
    if not all(isinstance(text, str) for text in texts):
        raise malformed(
            'every value must be a string (the indexed field\'s text: a number as its JSON text, e.g. "42")',
            [{"loc": ["body", "values"], "msg": "list of strings"}],
        )
    return list(texts)


def _is_text_type(data_type: pa.DataType) -> bool:
    return bool(pa.types.is_string(data_type) or pa.types.is_large_string(data_type))


def _arrow_values(body: bytes, limits: LimitSettings) -> list[str]:
    """The ``value`` column of an Arrow batch body, checked before decompressing."""
    column = read_column(body, "value", _is_text_type, limits.max_batch_keys, limits.max_body_bytes)
    if column.null_count:
        raise malformed("the 'value' column holds nulls; every row needs a value")
    texts: list[str] = column.to_pylist()
    return texts
