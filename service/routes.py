"""The ``/v1/stores`` routes (contract: docs/http-api.md)."""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import quote

import anyio
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from service import openapi_docs as docs
from service.arrow_arrays import binary_array
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
from service.catalogue import KEY_NOT_FOUND, PAGE_TOO_LARGE
from service.codec import (
    KeyEncoding,
    decode_key_text,
    decode_path_key,
    encode_key,
    key_encoding,
    strict_query,
)
from service.index_routes import add_index_routes
from service.natural_keys import is_number_column, stored_key_column
from service.projection import Projection, projected_values
from service.reads import Reader, find_store, int_param
from service.registry import ServedStore, StoreRegistry
from service.settings import LimitSettings, Settings
from service.sharding import KeyCheck, sharding_info
from service.value_schemas import stored_value_schema
from service.values import BadValues, JsonAnswer, bad_value_problem
from store import ReadOnlyKeyValueStore, ScanPage

POSITION = docs.POSITION_HEADER
KEY_ROUTE = "/v1/stores/{store}/keys/{key:path}"


def store_info(registry: StoreRegistry, served: ServedStore) -> dict[str, Any]:
    """The ``StoreInfo`` document of one store."""
    status = registry.status_of(served)
    state = registry.state_of(served)
    info: dict[str, Any] = {
        "name": served.name,
        "topic": served.topic,
        "value_format": served.format_name or served.value_format,
        "key_format": served.key_format,
        "state": state.value,
    }
    info["sharding"] = sharding_info(registry, served, status)
    if served.schemas_dir is not None:
        info["value_schema"] = stored_value_schema(served.schemas_dir)
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


def add_store_routes(
    app: FastAPI,
    settings: Settings,
    registry: StoreRegistry,
    auth: Auth,
    reader: Reader,
    bad_values: BadValues,
) -> None:
    """Add the store routes, reading from ``registry`` with ``reader`` within ``settings.limits``;
    ``bad_values`` finds the values of JSON stores that are not JSON.

    They go on the app itself, not an included router: every router level costs a matching pass
    on each request. The key lookup comes first because it is the most frequent request.
    """
    limits = settings.limits
    check_keys = KeyCheck(registry)

    async def get_key(request: Request) -> Response:
        served = find_store(registry, auth, request)
        query = request.query_params
        encoding = key_encoding(query.get("key_encoding"), served.key_format)
        # The raw path keeps bytes that are not UTF-8 and slashes that were percent-encoded.
        raw_path = request.scope.get("raw_path")
        parts = raw_path.split(b"/", 5) if isinstance(raw_path, bytes) else []
        raw_segment = parts[5] if len(parts) == 6 else quote(request.path_params["key"]).encode()
        key = decode_path_key(raw_segment, encoding)
        check_key_length("the key", key, limits.max_key_bytes)
        projection = Projection.parse(query.get("fields"), served.value_format)
        check_keys(served, [key])
        value, position = await reader.read(served, request, lambda view: view.get(key))
        if value is None:
            raise KEY_NOT_FOUND(
                f'store "{served.name}" has no such key',
                extras={"store": served.name},
                headers={POSITION: str(position)},
            )
        if served.value_format == "json" and not bad_values.is_json(served.name, key, value):
            problem, detail = bad_value_problem(served.name, value)
            raise problem(detail, extras={"store": served.name}, headers={POSITION: str(position)})
        if projection is not None:
            value = projection.stored(value)
        return Response(value, media_type=served.media_type, headers={POSITION: str(position)})

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
        served = find_store(registry, auth, request)
        info = store_info(registry, served)
        return Response(orjson.dumps(info), media_type=JSON, headers={POSITION: info["position"]})

    @app.post(
        "/v1/stores/{store}/keys:batchGet",
        response_class=Response,
        responses=docs.BATCH_RESPONSES,
        openapi_extra={
            "parameters": [docs.STORE_PARAM, docs.KEY_ENCODING_PARAM, *docs.READ_PARAMS],
            "requestBody": docs.BATCH_REQUEST_BODY,
        },
        summary="The values of many keys, in request order (JSON or Arrow)",
    )
    async def batch_get(request: Request) -> Response:
        served = find_store(registry, auth, request)
        media_type = batch_media_type(request, "keys")
        projection = Projection.parse(request.query_params.get("fields"), served.value_format)
        body = await read_body(request, limits)
        if media_type == JSON:
            encoding, keys = _json_keys(
                body, request.query_params.get("key_encoding"), limits.max_batch_keys, served.key_format
            )
            check_batch(
                len(keys), max(map(len, keys), default=0), limits.max_batch_keys, limits.max_key_bytes
            )
            check_keys(served, keys)
            values, position = await reader.read(served, request, lambda view: view.get_many(keys))
            answer = JsonAnswer(served.name, served.value_format, encoding, bad_values)
            answer.project = None if projection is None else projection.stored
            document = {"values": answer.values(keys, values), "position": str(position)}
            return Response(answer.document(document), media_type=JSON, headers={POSITION: str(position)})
        # Decoding a large Arrow body takes a while: off the event loop.
        asked = await anyio.to_thread.run_sync(_arrow_keys, body, limits)
        key_column = stored_key_column(asked, served.key_format)
        check_keys(served, key_column)
        keys = key_column.to_pylist()
        values, position = await reader.read(served, request, lambda view: view.get_many(keys))
        # Keys are answered as they were asked: numbers stay numbers.
        if projection is not None:
            values = projected_values(projection, values)
        answered_keys = asked if is_number_column(asked.type) else key_column
        table = pa.table({"key": answered_keys, "value": binary_array(values)})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return Response(
            sink.getvalue().to_pybytes(), media_type=docs.ARROW_MEDIA_TYPE, headers={POSITION: str(position)}
        )

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
        served = find_store(registry, auth, request)
        query = request.query_params
        encoding = key_encoding(query.get("key_encoding"), served.key_format)
        projection = Projection.parse(query.get("fields"), served.value_format)
        limit = int_param(query, "limit", 100, 1) or 100
        if limit > limits.max_scan_limit:
            raise too_large(PAGE_TOO_LARGE, f"limit {limit} is above the maximum", limits.max_scan_limit)
        # Read from the raw query string: the parsed one replaces bytes that are not UTF-8.
        strict = strict_query(request)
        prefix_text = strict.get("prefix", "")
        # The empty prefix scans every key, whatever the key format.
        prefix = decode_key_text(prefix_text, encoding) if prefix_text else b""
        after_text = strict.get("after")
        after = None if after_text is None else decode_key_text(after_text, encoding)
        check_key_length("prefix", prefix, limits.max_key_bytes)
        check_key_length("after", after or b"", limits.max_key_bytes)

        def read(view: ReadOnlyKeyValueStore) -> ScanPage:
            return view.prefix_scan(prefix, after=after, limit=limit)

        page, position = await reader.read(served, request, read)
        answer = JsonAnswer(served.name, served.value_format, encoding, bad_values)
        answer.project = None if projection is None else projection.stored
        document = {
            "items": answer.items(page.items),
            "next_after": None if page.next_after is None else encode_key(page.next_after, encoding),
            "position": str(position),
        }
        return Response(answer.document(document), media_type=JSON, headers={POSITION: str(position)})

    add_index_routes(app, settings, registry, auth, reader, bad_values)


def _json_keys(
    body: bytes, query_encoding: str | None, max_keys: int, key_format: str
) -> tuple[KeyEncoding, list[bytes]]:
    """The key encoding and the keys of a JSON batch body."""
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
    not_strings = malformed(
        "every key must be a string", [{"loc": ["body", "keys"], "msg": "list of strings"}]
    )
    if encoding == "utf8":
        try:
            return encoding, [t.encode() for t in texts]
        except AttributeError as exc:  # only str has .encode() among JSON values
            raise not_strings from exc
        except UnicodeEncodeError as exc:
            raise malformed(
                "a key is not valid Unicode text; send raw bytes with key_encoding=base64"
            ) from exc
    if not all(isinstance(t, str) for t in texts):
        raise not_strings
    return encoding, [decode_key_text(t, encoding) for t in texts]


def _is_key_type(data_type: pa.DataType) -> bool:
    return bool(
        is_number_column(data_type)
        or pa.types.is_binary(data_type)
        or pa.types.is_large_binary(data_type)
        or pa.types.is_string(data_type)
        or pa.types.is_large_string(data_type)
    )


def _arrow_keys(body: bytes, limits: LimitSettings) -> pa.Array:
    """The ``key`` column of an Arrow batch body, as ``binary``, checked before decompressing."""
    column = read_column(body, "key", _is_key_type, limits.max_batch_keys, limits.max_body_bytes)
    if column.null_count:
        raise malformed("the 'key' column holds nulls; every row needs a key")
    keys = column.combine_chunks()
    if is_number_column(keys.type):
        check_batch(len(keys), 8, limits.max_batch_keys, limits.max_key_bytes)
        return keys
    longest = pc.max(pc.binary_length(keys)).as_py() or 0
    check_batch(len(keys), longest, limits.max_batch_keys, limits.max_key_bytes)
    return keys  # as sent: service.natural_keys.stored_key_column reads them by the key format
