"""The index lookup routes: the rows whose indexed field equals a value.

Contract: docs/reference/http-api.md.
"""

from __future__ import annotations

import pyarrow as pa
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from service import openapi_docs as docs
from service.answers import AnswerBudget, read_page
from service.arrow_arrays import binary_array, string_array
from service.bodies import JSON, too_large
from service.codec import KeyEncoding, encode_key
from service.index_requests import IndexBatchRead, index_batch_read, index_read
from service.projection import Projection
from service.read_requests import ReadRequests
from service.reads import Reader
from service.struct_answers import latest_struct, struct_values, typed_read
from service.values import BadValues, JsonAnswer
from store import Position, ReadOnlyKeyValueStore, ScanPage
from wire.problems import ANSWER_TOO_LARGE

POSITION = docs.POSITION_HEADER
INDEX_ROUTE = "/v1/stores/{store}/indexes/{index}/{value:path}"
INDEX_BATCH_ROUTE = "/v1/stores/{store}/indexes/{index}:batchGet"

_ARROW_ANSWER = pa.schema(
    [("value", pa.string()), ("key", pa.binary()), ("row", pa.binary()), ("next_after", pa.binary())]
)


def add_index_routes(app: FastAPI, requests: ReadRequests, reader: Reader, bad_values: BadValues) -> None:
    """Add ``GET .../indexes/{index}/{value}`` and ``POST .../indexes/{index}:batchGet``."""

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
        asked = index_read(requests, request)
        served, encoding = asked.served, asked.encoding

        def read(view: ReadOnlyKeyValueStore) -> ScanPage:
            def scan_after(after: bytes | None, limit: int) -> ScanPage:
                return view.index_scan(asked.index, asked.value, after=after, limit=limit)

            return read_page(scan_after, asked.after, asked.limit, asked.budget())

        page, position = await reader.read(served, asked.options, read)
        answer = JsonAnswer(served.name, served.value_format, encoding, bad_values)
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
        asked = await index_batch_read(requests, request)
        served = asked.served

        def answer(view: ReadOnlyKeyValueStore) -> bytes:
            if asked.media_type == JSON:
                pages = _pages(view, asked, asked.budget())
                json_answer = JsonAnswer(served.name, served.value_format, asked.encoding, bad_values)
                return _json_answer(asked.texts, pages, json_answer, view.position())
            if asked.stored_values:
                return _arrow_answer(asked.texts, _pages(view, asked, asked.budget()))
            # Rows as stored when the typed answer parses the fields of ``fields=`` out of them.
            latest = latest_struct(served)
            pages = typed_read(
                latest, asked.projection, lambda budget: _pages(view, asked, budget), asked.budget()
            )
            return _arrow_answer(asked.texts, pages, struct_rows(latest, pages, asked.projection))

        # Many values take a while to look up and to encode: off the event loop, so others go on.
        content, position = await reader.read(served, asked.options, answer, in_thread=True)
        media = JSON if asked.media_type == JSON else docs.ARROW_MEDIA_TYPE
        return Response(content, media_type=media, headers={POSITION: str(position)})


def _pages(view: ReadOnlyKeyValueStore, asked: IndexBatchRead, budget: AnswerBudget) -> list[ScanPage]:
    """One page per value; ``413 answer-too-large`` as soon as the answer would pass
    ``max_answer_rows`` rows or ``budget`` (``max_answer_bytes`` bytes of rows)."""
    pages: list[ScanPage] = []
    rows = 0
    max_rows = asked.max_answer_rows
    for value in asked.values:

        def scan_after(after: bytes | None, limit: int, value: bytes = value) -> ScanPage:
            return view.index_scan(asked.index, value, after=after, limit=limit)

        page = read_page(scan_after, None, asked.limit_per_value, budget)
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


def _cursor(page: ScanPage, encoding: KeyEncoding) -> str | None:
    return None if page.next_after is None else encode_key(page.next_after, encoding)


def struct_rows(
    latest: pa.StructType | None, pages: list[ScanPage], projection: Projection | None
) -> tuple[pa.Array, pa.Array] | None:
    """The rows of every page, in answer order (a null row for a value without matches), as a
    struct typed from ``latest``, the latest schema's, and its ``error`` column; ``None`` for a
    store whose values have no struct (``service.struct_answers``)."""
    rows: list[bytes | None] = []
    for page in pages:
        rows += [row for _, row in page.items] if page.items else [None]
    return struct_values(latest, rows, projection)


def _arrow_answer(
    texts: list[str], pages: list[ScanPage], typed: tuple[pa.Array, pa.Array] | None = None
) -> bytes:
    """One row per matching row of each value asked (one null row when none match), in request
    order; ``typed``: the rows as a struct, with an ``error`` column (else the stored bytes)."""
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
    if typed is None:
        table = pa.table(
            [string_array(answer_values), binary_array(keys), binary_array(rows), binary_array(cursors)],
            schema=_ARROW_ANSWER,
        )
    else:
        struct, errors = typed
        table = pa.table(
            {
                "value": string_array(answer_values),
                "key": binary_array(keys),
                "row": struct,
                "error": errors,
                "next_after": binary_array(cursors),
            }
        )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())
