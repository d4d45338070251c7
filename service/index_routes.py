"""The index lookup routes: the rows whose indexed field equals a value (contract: docs/http-api.md)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote_to_bytes

import anyio
import orjson
import pyarrow as pa
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from service import openapi_docs as docs
from service.arrow_arrays import binary_array, string_array
from service.arrow_body import read_column
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
from service.catalogue import ANSWER_TOO_LARGE, PAGE_TOO_LARGE
from service.codec import (
    KeyEncoding,
    bad_key_encoding,
    decode_key_text,
    encode_key,
    key_encoding,
    strict_query,
)
from service.projection import Projection
from service.reads import Reader, find_store, int_param
from service.registry import StoreRegistry
from service.settings import LimitSettings, Settings
from service.values import BadValues, JsonAnswer
from store import Position, ReadOnlyKeyValueStore, ScanPage

POSITION = docs.POSITION_HEADER
INDEX_ROUTE = "/v1/stores/{store}/indexes/{index}/{value:path}"
INDEX_BATCH_ROUTE = "/v1/stores/{store}/indexes/{index}:batchGet"
DEFAULT_PAGE = 100
DEFAULT_LIMIT_PER_VALUE = 1000

_ARROW_ANSWER = pa.schema(
    [("value", pa.string()), ("key", pa.binary()), ("row", pa.binary()), ("next_after", pa.binary())]
)


def add_index_routes(
    app: FastAPI,
    settings: Settings,
    registry: StoreRegistry,
    auth: Auth,
    reader: Reader,
    bad_values: BadValues,
) -> None:
    """Add ``GET .../indexes/{index}/{value}`` and ``POST .../indexes/{index}:batchGet``."""
    limits = settings.limits

    @app.get(
        INDEX_ROUTE,
        response_class=Response,
        responses=docs.INDEX_RESPONSES,
        openapi_extra={
            "parameters": [
                docs.STORE_PARAM,
                docs.INDEX_PARAM,
                docs.INDEXED_VALUE_PARAM,
                *docs.INDEX_PAGE_PARAMS,
                docs.KEY_ENCODING_PARAM,
                *docs.READ_PARAMS,
            ]
        },
        summary="One page of the rows whose indexed field equals a value, ordered by row key",
    )
    async def index_lookup(request: Request) -> Response:
        served = find_store(registry, auth, request)
        index = request.path_params["index"]
        query = request.query_params
        encoding = key_encoding(query.get("key_encoding"), served.key_format)
        projection = Projection.parse(query.get("fields"), served.value_format)
        limit = _page_limit(int_param(query, "limit", DEFAULT_PAGE, 1) or DEFAULT_PAGE, limits)
        value = _path_value(request)
        # Read from the raw query string: the parsed one replaces bytes that are not UTF-8.
        after_text = strict_query(request).get("after")
        after = None if after_text is None else decode_key_text(after_text, encoding)
        check_key_length("the indexed value", value, limits.max_key_bytes)
        check_key_length("after", after or b"", limits.max_key_bytes)

        def read(view: ReadOnlyKeyValueStore) -> ScanPage:
            return view.index_scan(index, value, after=after, limit=limit)

        page, position = await reader.read(served, request, read)
        answer = JsonAnswer(served.name, served.value_format, encoding, bad_values)
        answer.project = None if projection is None else projection.stored
        document = {
            "items": answer.items(page.items),
            "next_after": _cursor(page, encoding),
            "position": str(position),
        }
        return Response(answer.document(document), media_type=JSON, headers={POSITION: str(position)})

    @app.post(
        INDEX_BATCH_ROUTE,
        response_class=Response,
        responses=docs.INDEX_BATCH_RESPONSES,
        openapi_extra={
            "parameters": [
                docs.STORE_PARAM,
                docs.INDEX_PARAM,
                docs.LIMIT_PER_VALUE_PARAM,
                docs.KEY_ENCODING_PARAM,
                *docs.READ_PARAMS,
            ],
            "requestBody": docs.INDEX_BATCH_REQUEST_BODY,
        },
        summary="The rows of many indexed values at once (JSON or Arrow)",
    )
    async def index_batch(request: Request) -> Response:
        served = find_store(registry, auth, request)
        index = request.path_params["index"]
        media_type = batch_media_type(request, "values")
        query = request.query_params
        limit = int_param(query, "limit_per_value", DEFAULT_LIMIT_PER_VALUE, 1) or DEFAULT_LIMIT_PER_VALUE
        projection = Projection.parse(query.get("fields"), served.value_format)
        body = await read_body(request, limits)
        if media_type == JSON:
            document = _json_document(body)
            encoding = key_encoding(
                document.get("key_encoding", query.get("key_encoding")), served.key_format
            )
            limit = _body_limit(document, limit)
            texts = _json_values(document, limits.max_batch_keys)
        else:
            encoding = "base64"
            texts = await anyio.to_thread.run_sync(_arrow_values, body, limits)
        try:
            values = [text.encode() for text in texts]
        except UnicodeEncodeError as exc:
            raise malformed("a value is not valid Unicode text") from exc
        check_batch(
            len(values),
            max(map(len, values), default=0),
            limits.max_batch_keys,
            limits.max_key_bytes,
            "values",
        )
        limit = _page_limit(limit, limits)
        # Each value is answered once, however often it was asked.
        texts = list(dict.fromkeys(texts))
        values = list(dict.fromkeys(values))

        def answer(view: ReadOnlyKeyValueStore) -> bytes:
            pages = _pages(view, index, values, limit, limits.max_answer_rows)
            if media_type == JSON:
                json_answer = JsonAnswer(served.name, served.value_format, encoding, bad_values)
                json_answer.project = None if projection is None else projection.stored
                return _json_answer(texts, pages, json_answer, view.position())
            return _arrow_answer(texts, pages)

        # Many values take a while to look up and to encode: off the event loop, so others go on.
        content, position = await reader.read(served, request, answer, in_thread=True)
        media = JSON if media_type == JSON else docs.ARROW_MEDIA_TYPE
        return Response(content, media_type=media, headers={POSITION: str(position)})


def _pages(
    view: ReadOnlyKeyValueStore, index: str, values: list[bytes], limit: int, max_rows: int
) -> list[ScanPage]:
    """One page per value; ``413 answer-too-large`` as soon as the answer would pass ``max_rows``."""
    pages: list[ScanPage] = []
    rows = 0
    for value in values:
        page = view.index_scan(index, value, limit=limit)
        rows += max(1, len(page.items))  # a value without matches still takes a row (Arrow)
        if rows > max_rows:
            raise too_large(
                ANSWER_TOO_LARGE,
                f"the answer would hold more than {max_rows} rows (limits.max_answer_rows);"
                " ask for fewer values at once or a lower limit_per_value, and page on with GET",
                max_rows,
            )
        pages.append(page)
    return pages


def _json_answer(texts: list[str], pages: list[ScanPage], answer: JsonAnswer, position: Position) -> bytes:
    results = [
        {"value": text, "items": answer.items(page.items), "next_after": _cursor(page, answer.encoding)}
        for text, page in zip(texts, pages, strict=True)
    ]
    return answer.document({"results": results, "position": str(position)})


def _page_limit(limit: int, limits: LimitSettings) -> int:
    if limit > limits.max_scan_limit:
        raise too_large(PAGE_TOO_LARGE, f"limit {limit} is above the maximum", limits.max_scan_limit)
    return limit


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


def _cursor(page: ScanPage, encoding: KeyEncoding) -> str | None:
    return None if page.next_after is None else encode_key(page.next_after, encoding)


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


def _arrow_answer(texts: list[str], pages: list[ScanPage]) -> bytes:
    """One row per matching row of each value asked (one null row when none match), in request order."""
    answer_values: list[str] = []
    keys: list[bytes | None] = []
    rows: list[bytes | None] = []
    cursors: list[bytes | None] = []
    for text, page in zip(texts, pages, strict=True):
        if not page.items:
            answer_values.append(text)
            keys.append(None)
            rows.append(None)
            cursors.append(None)
            continue
        answer_values += [text] * len(page.items)
        keys += [key for key, _ in page.items]
        rows += [row for _, row in page.items]
        cursors += [None] * (len(page.items) - 1)
        cursors.append(page.next_after)
    table = pa.table(
        [
            string_array(answer_values),
            binary_array(keys),
            binary_array(rows),
            binary_array(cursors),
        ],
        schema=_ARROW_ANSWER,
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())
