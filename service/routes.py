"""The ``/v1/stores`` routes (contract: docs/reference/http-api.md)."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pyarrow as pa
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from service import openapi_docs as docs
from service.answers import AnswerBudget, read_keys, read_keys_at, read_page
from service.arrow_answers import batch_answer, ipc_stream
from service.arrow_arrays import binary_array, value_array
from service.auth import Auth
from service.bodies import JSON
from service.codec import KeyEncoding, encode_key
from service.history_routes import add_history_routes
from service.index_routes import add_index_routes
from service.key_path import KeyReader
from service.read_requests import BatchRead, ReadRequests
from service.reads import Reader
from service.registry import ServedStore, StoreRegistry
from service.settings import Settings
from service.sharding import sharding_info
from service.struct_answers import latest_struct, stored_table, struct_table, typed_read
from service.typed_values import ddl_of
from service.values import BadValues, JsonAnswer
from store import ReadOnlyKeyValueStore, ScanPage
from wire.position import Position

POSITION = docs.POSITION_HEADER
KEY_ROUTE = "/v1/stores/{store}/keys/{key:path}"
BATCH_ROUTE = "/v1/stores/{store}/keys:batchGet"


def store_info(registry: StoreRegistry, served: ServedStore) -> dict[str, Any]:
    """The ``StoreInfo`` document of one store."""
    status = registry.status_of(served)
    state = registry.state_of(served)
    info: dict[str, Any] = {
        "name": served.name,
        "topic": served.topic,
        "value_format": served.format_name or served.value_format,
        "key_format": served.reported_key_format,
        "state": state.value,
    }
    if served.natural_keys is not None:
        info["key_schema_format"] = served.key_format  # how producers wrote the keys (registry-framed)
    info["sharding"] = sharding_info(registry, served, status)
    if served.value_type is not None:
        info["value_schema"] = ddl_of(served.value_type())
    if status is None:
        info.update(position="", end_offsets="", lag={}, total_lag=0, restore=None)
        info["last_error"] = registry.start_error(served.name)
        return info
    restore = status.restore
    info.update(
        position=str(status.position),
        end_offsets=str(status.end_offsets),
        lag={str(p): lag for p, lag in status.lag.items()},
        total_lag=status.total_lag,
        restore=None
        if restore is None
        else {
            "records_applied": restore.records_applied,
            "records_remaining": restore.records_remaining,
            "records_per_second": restore.records_per_second,
            "progress": restore.progress,
            "eta_seconds": restore.eta_seconds,
            "target": str(restore.target),
            "mode": restore.mode.value,
        },
        records_applied_total=status.records_applied_total,
        null_key_records=status.null_key_records,
        undecodable_values=status.undecodable_values,
        approximate_num_keys=status.approximate_num_keys,
        counted_keys=status.counted_keys,
        counted_keys_position=_text(status.counted_keys_position),
        copy_id=status.copy_id,
        size_on_disk_bytes=status.size_on_disk_bytes,
        last_error=registry.start_error(served.name) or status.last_error,
        seconds_since_last_contact=status.seconds_since_last_contact,
        stale=status.stale,
        corruption=None if status.corruption is None else dataclasses.asdict(status.corruption),
        corruptions_found=status.corruptions_found,
        verification_passes=status.verification_passes,
        memory=None if status.memory is None else dataclasses.asdict(status.memory),
        indexes={
            name: {"field": index.field, "state": index.state, "rows_indexed": index.rows_indexed}
            for name, index in status.indexes.items()
        },
        history=_history_info(served),
    )
    return info


def _text(position: Position | None) -> str | None:
    return None if position is None else str(position)


def _history_info(served: ServedStore) -> dict[str, Any] | None:
    """The store's history: the oldest position answered ``as_of``, and the configured retention."""
    try:
        floor = served.store.history_floor()
    except Exception:  # status must never fail; a store being closed has no floor to show
        floor = None
    if served.history is None and floor is None:
        return None
    return {
        "floor": None if floor is None else str(floor),
        "retention_ms": served.history.retention_ms if served.history else None,
        "retention_offsets": served.history.retention_offsets if served.history else None,
    }


def arrow_page(page: ScanPage, served: ServedStore, encoding: KeyEncoding, position: str) -> Response:
    """A scan page as an Arrow stream: ``key`` (the stored bytes) and ``value`` (as a batch get
    answers them with ``values=stored``, an ``error`` column beside a value a store could not
    decode at ingest), the cursor in the schema's ``next_after`` metadata (absent after the last
    page), encoded like the JSON page's."""
    keys = binary_array([key for key, _ in page.items])
    stored = [value for _, value in page.items]
    table = stored_table(served, keys, stored)
    if table is None:
        table = pa.table({"key": keys, "value": value_array(stored, served.value_format)})
    metadata = None if page.next_after is None else {"next_after": encode_key(page.next_after, encoding)}
    table = table.replace_schema_metadata(metadata)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return Response(
        sink.getvalue().to_pybytes(), media_type=docs.ARROW_MEDIA_TYPE, headers={POSITION: position}
    )


def _batch(view: ReadOnlyKeyValueStore, asked: BatchRead, latest: pa.StructType | None) -> list[bytes | None]:
    """The values of a batch get: as stored though ``fields=`` was asked when a typed Arrow answer
    parses the fields out of them (``service.struct_answers.typed_read``)."""
    keys, times = asked.keys, asked.times

    def read(budget: AnswerBudget) -> list[bytes | None]:
        return read_keys(view, keys, budget) if times is None else read_keys_at(view, keys, times, budget)

    # A budget per read: a read retried after a position wait starts afresh.
    return typed_read(latest, asked.projection, read, asked.budget())


def add_store_routes(
    app: FastAPI,
    settings: Settings,
    registry: StoreRegistry,
    auth: Auth,
    reader: Reader,
    bad_values: BadValues,
) -> KeyReader:
    """Add the store routes, reading from ``registry`` with ``reader`` within ``settings.limits``;
    ``bad_values`` finds the values of JSON stores that are not JSON.

    They go on the app itself, not an included router: every router level costs a matching pass
    on each request. The key lookup comes first because it is the most frequent request; its
    reader is returned, for the short path of ``service.key_path``.
    """
    requests = ReadRequests(settings, registry, auth)
    keys = KeyReader(requests, reader, bad_values)
    get_key = keys.response

    # The most frequent request skips FastAPI's per-request dependency solving: a plain Starlette
    # route serves it (it parses its own parameters anyway), registered first so it matches first;
    # the FastAPI route below only describes it in the OpenAPI document.
    app.add_route(KEY_ROUTE, get_key, methods=["GET"], include_in_schema=False)
    app.get(
        KEY_ROUTE,
        response_class=Response,
        responses=docs.GET_KEY_RESPONSES,
        openapi_extra={
            "parameters": [docs.STORE_PARAM, docs.KEY_PARAM, docs.KEY_ENCODING_PARAM, *docs.READ_PARAMS]
        },
        summary="The value of one key",
    )(get_key)

    @app.get(
        "/v1/stores",
        response_class=Response,
        responses=docs.STORE_LIST_RESPONSES | docs.problems(401, 429, 503),
        summary="List the stores",
    )
    async def list_stores(request: Request) -> Response:
        allowed = auth.allowed_stores(request)
        stores = [store_info(registry, s) for s in registry.all() if allowed is None or s.name in allowed]
        return Response(orjson.dumps({"stores": stores}), media_type=JSON)

    @app.get(
        "/v1/stores/{store}",
        response_class=Response,
        responses=docs.STORE_INFO_RESPONSES,
        openapi_extra={"parameters": [docs.STORE_PARAM]},
        summary="One store's status",
    )
    async def get_store(request: Request) -> Response:
        served = requests.store(request)
        info = store_info(registry, served)
        return Response(orjson.dumps(info), media_type=JSON, headers={POSITION: info["position"]})

    @app.post(
        BATCH_ROUTE,
        response_class=Response,
        responses=docs.BATCH_RESPONSES,
        openapi_extra={
            "parameters": [docs.STORE_PARAM, docs.KEY_ENCODING_PARAM, *docs.READ_PARAMS],
            "requestBody": docs.BATCH_REQUEST_BODY,
        },
        summary="The values of many keys, in request order (JSON or Arrow)",
    )
    async def batch_get(request: Request) -> Response:
        asked = await requests.batch(request)
        served, keys = asked.served, asked.keys
        typed = asked.key_column is not None and not asked.stored_values
        latest = latest_struct(served) if typed else None
        values, position = await reader.read(served, asked.options, lambda view: _batch(view, asked, latest))
        if asked.key_column is None:
            answer = JsonAnswer(served.name, served.value_format, asked.encoding, bad_values)
            body = answer.batch(keys, values, str(position))
            return Response(body, media_type=JSON, headers={POSITION: str(position)})
        table = (
            stored_table(served, asked.key_column, values)
            if asked.stored_values
            else struct_table(latest, asked.key_column, values, asked.projection)
        )
        if table is None:
            stream = batch_answer(asked.key_column, values, served.value_format)
        else:
            stream = ipc_stream(table)
        return Response(stream, media_type=docs.ARROW_MEDIA_TYPE, headers={POSITION: str(position)})

    @app.get(
        "/v1/stores/{store}/scan",
        response_class=Response,
        responses=docs.SCAN_RESPONSES,
        openapi_extra={
            "parameters": [docs.STORE_PARAM, *docs.SCAN_PARAMS, docs.KEY_ENCODING_PARAM, *docs.READ_PARAMS]
        },
        summary="One page of the keys starting with a prefix, byte-ordered",
    )
    async def scan(request: Request) -> Response:
        asked = requests.scan(request)
        served, encoding = asked.served, asked.encoding

        def read(view: ReadOnlyKeyValueStore) -> ScanPage:
            def scan_after(after: bytes | None, limit: int) -> ScanPage:
                return view.prefix_scan(asked.prefix, after=after, limit=limit)

            return read_page(scan_after, asked.after, asked.limit, asked.budget())

        page, position = await reader.read(served, asked.options, read)
        if docs.ARROW_MEDIA_TYPE in request.headers.get("accept", ""):
            return arrow_page(page, served, encoding, str(position))
        answer = JsonAnswer(served.name, served.value_format, encoding, bad_values)
        document = {
            "items": answer.items(page.items),
            "next_after": None if page.next_after is None else encode_key(page.next_after, encoding),
            "position": str(position),
        }
        return Response(answer.document(document), media_type=JSON, headers={POSITION: str(position)})

    add_index_routes(app, requests, reader, bad_values)
    add_history_routes(app, requests, reader)
    return keys
