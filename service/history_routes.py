"""``GET /v1/stores/{store}/history``: a store's history read whole, page by page, as Arrow.

A point-in-time join that needs most of a store's keys reads this instead of asking each row's
key and time (``clients.history``): the service walks its history in key order (a sequential read,
no seek a row), and the caller answers every row locally. Each page holds whole keys (about
``limit`` rows; more to finish a key's versions), one row a version below the read's position
(``store.table.history_scan``), as an Arrow stream of four columns:

``key``
    the stored key (binary), repeated on each of its rows; a key's rows come together, keys in
    byte order.
``time``
    the record timestamp (``timestamp[ms]``); null: the row counts for every time (the key's
    value from before history began, or the table's value of a key never written since).
``value``
    the value, as an Arrow batch get answers it (``values=stored``); null: absent (a tombstone).
``unsettled``
    true: a read as of a time answered by this row is refused (``410 history-expired``), as
    a per-key read refuses it.

As of time ``T`` a key's value is its first row whose time is at or below ``T`` (rows run newest
first, ties newest offset first); no such row: absent. The schema metadata carry ``time_floor``
(the oldest time the rows answer: a time below it is ``410 history-expired``, as for any read as of
a time) and ``next_after`` (the next page's cursor, absent after the last page). ``as_of_time`` is
required: the earliest time the caller means to answer, refused below the floor; read every page
``as_of`` the first page's position to read one version of the history.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from service import openapi_docs as docs
from service.arrow_arrays import binary_array, value_array
from service.bodies import check_key_length, too_large
from service.codec import KeyEncoding, decode_key_text, encode_key, key_encoding
from service.queries import Query, invalid_parameter
from service.read_requests import ReadRequests, StoreRead, page_limit
from service.reads import Reader
from store import EVERY_TIME, HistoryRows, ReadOnlyKeyValueStore, TimedKeyValueStore
from wire.problems import ANSWER_TOO_LARGE

HISTORY_ROUTE = "/v1/stores/{store}/history"

HISTORY_PARAMS = [
    docs.STORE_PARAM,
    docs.SCAN_PARAMS[1],  # after
    {**docs.SCAN_PARAMS[2], "schema": {"type": "integer", "minimum": 1, "default": 1000}},  # limit
    docs.KEY_ENCODING_PARAM,
    docs.MIN_POSITION_PARAM,
    docs.AS_OF_PARAM,
    {
        **docs.AS_OF_TIME_PARAM,
        "required": True,
        "description": "the earliest time the rows are read to answer (epoch milliseconds or RFC 3339):"
        " below the store's time floor, 410 history-expired",
    },
    docs.TIMEOUT_PARAM,
]

HISTORY_RESPONSES: dict[int | str, Any] = {
    200: {
        "description": "one page of whole keys' rows (an Arrow stream: key, time, value, unsettled;"
        " schema metadata time_floor and next_after): as of time T a key's value is its first row"
        " whose time is at or below T (null time: every time)",
        "headers": {docs.POSITION_HEADER: {"schema": {"type": "string"}}},
        "content": {docs.ARROW_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}},
    },
    **docs.problems(400, 401, 403, 404, 410, 413, 422, 429, 503),
}


@dataclasses.dataclass(frozen=True, slots=True)
class HistoryRead(StoreRead):
    """``GET .../history``: one page of the store's history after ``after``."""

    encoding: KeyEncoding
    after: bytes | None
    limit: int


def history_read(requests: ReadRequests, request: Request) -> HistoryRead:
    """The request, checked whole (``service.read_requests``)."""
    served = requests.store(request)
    query = Query.of(request.scope)
    encoding = key_encoding(query.get("key_encoding"), served.keys_as)
    limit = page_limit(query, "limit", 1000, requests.limits)
    after_text = query.get("after")
    after = None if after_text is None else decode_key_text(after_text, encoding)
    check_key_length("after", after or b"", requests.limits.max_key_bytes)
    options = requests.options(query, request, served)
    if options.as_of_time is None:
        raise invalid_parameter(
            "as_of_time", "is required: the earliest time the rows are read to answer (epoch ms or RFC 3339)"
        )
    return HistoryRead(served, options, requests.limits.max_answer_bytes, None, encoding, after, limit)


def history_stream(rows: HistoryRows, value_format: str, encoding: KeyEncoding) -> bytes:
    """The Arrow answer of one page (module doc)."""
    places = pa.array(np.repeat(np.arange(len(rows.keys)), rows.counts))
    times = pa.array(rows.times, pa.int64(), mask=rows.times == EVERY_TIME).cast(pa.timestamp("ms"))
    metadata = {} if rows.time_floor is None else {"time_floor": str(rows.time_floor)}
    if rows.next_after is not None:
        metadata["next_after"] = encode_key(rows.next_after, encoding)
    table = pa.table(
        {
            "key": binary_array(rows.keys).take(places),
            "time": times,
            "value": value_array(rows.values, value_format),
            "unsettled": pa.array(rows.unsettled, pa.bool_()),
        }
    ).replace_schema_metadata(metadata)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def add_history_routes(app: FastAPI, requests: ReadRequests, reader: Reader) -> None:
    """Add ``GET /v1/stores/{store}/history``."""

    @app.get(
        HISTORY_ROUTE,
        response_class=Response,
        responses=HISTORY_RESPONSES,
        openapi_extra={"parameters": HISTORY_PARAMS},
        summary="One page of every key's versions, to answer each as of any time (Arrow)",
    )
    async def history(request: Request) -> Response:
        asked = history_read(requests, request)

        def read(view: ReadOnlyKeyValueStore) -> HistoryRows:
            assert isinstance(view, TimedKeyValueStore), "a read as of a time takes a time view"
            rows = view.history_page(asked.after, asked.limit, asked.max_answer_bytes)
            if rows is None:
                raise too_large(
                    ANSWER_TOO_LARGE,
                    f"the page would carry more than {asked.max_answer_bytes} bytes of values"
                    " (limits.max_answer_bytes); ask for a smaller page",
                    asked.max_answer_bytes,
                )
            return rows

        rows, position = await reader.read(asked.served, asked.options, read)
        body = history_stream(rows, asked.served.value_format, asked.encoding)
        return Response(body, media_type=docs.ARROW_MEDIA_TYPE, headers={docs.POSITION_HEADER: str(position)})
