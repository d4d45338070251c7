"""The HTTP API on the wire (docs/reference/http-api.md): requests to build and answers to check and decode.

Pure functions shared by the sync and async clients; nothing here does I/O.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import json
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import httpx
import pyarrow as pa
import pyarrow.compute as pc

from clients.exceptions import (
    ProblemError,
    StatestoreClientError,
    UnexpectedResponseError,
    ValueDecodeError,
    problem_error,
)
from clients.retry import parse_retry_after
from clients.sharding import Sharding
from wire.position import Position, PositionLike

ARROW_STREAM = "application/vnd.apache.arrow.stream"
POSITION_HEADER = "Statestore-Position"
ValueFormat = Literal["json", "string", "bytes"]
VALUE_FORMATS: tuple[str, ...] = ("json", "string", "bytes")
# Formats the service decodes at ingest and answers as JSON documents.
DECODED_FORMATS: tuple[str, ...] = ("avro", "protobuf", "json_schema")
Key = str | bytes


@dataclasses.dataclass(frozen=True, slots=True)
class StoreInfo:
    """What the service says about one store (``GET /v1/stores/{store}``); ``raw`` has every member."""

    name: str
    topic: str
    value_format: ValueFormat
    state: str
    position: Position
    total_lag: int
    raw: Mapping[str, Any]
    sharding: Sharding = dataclasses.field(default_factory=Sharding)
    key_format: str = "bytes"  # how the producers wrote keys (clients.natural_keys)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StoreInfo:
        try:
            value_format = str(data["value_format"])
            if value_format in DECODED_FORMATS:
                value_format = "json"  # decoded at ingest: answered as JSON documents
            if value_format not in VALUE_FORMATS:
                raise ValueError(f"unknown value_format {value_format!r}")
            return cls(
                name=str(data["name"]),
                topic=str(data.get("topic", data["name"])),
                value_format=value_format,  # type: ignore[arg-type]  # checked just above
                state=str(data["state"]),
                position=Position.parse(str(data.get("position") or "")),
                total_lag=int(data.get("total_lag") or 0),
                raw=dict(data),
                sharding=Sharding.from_info(data),
                key_format=str(data.get("key_format") or "bytes"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UnexpectedResponseError(
                f"the service sent a StoreInfo the client cannot read: {exc}"
            ) from exc

    @classmethod
    def merged(cls, infos: Sequence[StoreInfo]) -> StoreInfo:
        """One store across its shards: the table's position (every shard's), the lag summed, and the
        state READY only when every shard is; ``raw["shards"]`` holds each shard's own document."""
        first = infos[0]
        if len(infos) == 1:
            return first
        state = next((info.state for info in infos if info.state != "READY"), "READY")
        position = Position()
        for info in infos:
            position = position.merged(info.position)
        total_lag = sum(info.total_lag for info in infos)
        raw = {
            **first.raw,
            "state": state,
            "position": str(position),
            "total_lag": total_lag,
            "shards": [dict(info.raw) for info in infos],
        }
        return dataclasses.replace(first, state=state, position=position, total_lag=total_lag, raw=raw)


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    """One HTTP request, ready to send: to ``shard`` of a sharded deployment (``None``: the URL as given)."""

    method: str
    path: str
    params: Mapping[str, str] = dataclasses.field(default_factory=dict)
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    content: bytes | None = None
    shard: int | None = None

    def to(self, shard: int | None) -> Call:
        """This request, sent to ``shard``."""
        return self if shard == self.shard else dataclasses.replace(self, shard=shard)


def position_text(position: PositionLike) -> str:
    """A position as the query parameter carries it; text goes verbatim (the service judges its syntax)."""
    return position.strip() if isinstance(position, str) else str(Position.of(position))


def read_params(
    min_position: PositionLike | None, timeout_ms: int | None = None, as_of: PositionLike | None = None
) -> dict[str, str]:
    """The query parameters every read accepts: ``min_position`` or ``as_of`` (not both)."""
    if min_position is not None and as_of is not None:
        raise ValueError(
            "pass min_position= or as_of=, not both: an as_of read answers exactly that position"
        )
    params: dict[str, str] = {}
    if min_position is not None:
        position = position_text(min_position)
        if position:
            params["min_position"] = position
    if as_of is not None:
        # An empty as_of is a position too (the empty table), unlike an empty floor.
        params["as_of"] = position_text(as_of)
    if timeout_ms is not None:
        params["timeout_ms"] = str(timeout_ms)
    return params


def with_wait_budget(params: Mapping[str, str], remaining_seconds: float) -> dict[str, str]:
    """``params`` plus a ``timeout_ms`` for a position wait (``min_position``, ``as_of``) that ends before
    the caller's deadline.

    The service then answers 503 ``position-not-reached`` in time for the client to retry or report
    it, instead of the client's own timeout cutting the request off.
    """
    if ("min_position" not in params and "as_of" not in params) or "timeout_ms" in params:
        return dict(params)
    return {**params, "timeout_ms": str(max(1, int(remaining_seconds * 1000 * 0.8)))}


def store_path(store: str) -> str:
    if not store:
        raise ValueError("a store name must not be empty")
    return "/v1/stores/" + quote(store, safe="")


def key_bytes(key: Key) -> bytes:
    """A key as the raw bytes the store holds (text keys are UTF-8)."""
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key)
    if isinstance(key, str):
        return key.encode("utf-8")
    raise TypeError(f"a key must be str or bytes, got {type(key).__name__}")


def path_key(key: Key) -> tuple[str, dict[str, str]]:
    """The path segment for ``key`` and the query parameters it needs.

    Text keys go as percent-encoded UTF-8 unless a path would mangle them ('/', '.', '..'); those and
    all bytes keys go as URL-safe base64 with ``key_encoding=base64``.
    """
    if isinstance(key, str) and key not in ("", ".", "..") and "/" not in key and "\\" not in key:
        return quote(key, safe=""), {}
    raw = key_bytes(key)
    return base64.urlsafe_b64encode(raw).decode("ascii"), {"key_encoding": "base64"}


def fields_params(fields: Sequence[str] | None) -> dict[str, str]:
    """The ``fields`` query parameter of a projected read (none without ``fields``)."""
    if fields is None:
        return {}
    if isinstance(fields, str):
        raise TypeError('fields must be a sequence of dotted paths, e.g. ["name", "address.city"]')
    return {"fields": ",".join(fields)}


def get_call(
    store: str,
    key: Key,
    min_position: PositionLike | None,
    as_of: PositionLike | None = None,
    fields: Sequence[str] | None = None,
) -> Call:
    segment, params = path_key(key)
    return Call(
        "GET",
        f"{store_path(store)}/keys/{segment}",
        {**params, **read_params(min_position, as_of=as_of), **fields_params(fields)},
    )


HashableT = TypeVar("HashableT", bound=Hashable)


def dedupe(keys: Sequence[HashableT]) -> tuple[list[HashableT], list[int]]:
    """Unique keys in first-seen order, and for every input key the index of its unique key."""
    index_of: dict[HashableT, int] = {}
    positions = [index_of.setdefault(k, len(index_of)) for k in keys]
    return list(index_of), positions


def encode_keys(keys: Sequence[bytes] | pa.Array, times: pa.Array | None = None) -> bytes:
    """An Arrow IPC stream with a ``key: binary`` column, and ``as_of_time: timestamp[ms]`` (one time
    per key) when ``times`` are given."""
    array = keys if isinstance(keys, pa.Array) else pa.array(keys, type=pa.binary())
    if times is None:
        batch = pa.record_batch([array], names=["key"])
    else:
        batch = pa.record_batch([array, times.cast(pa.timestamp("ms"))], names=["key", "as_of_time"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def batch_get_call(
    store: str,
    keys: Sequence[bytes] | pa.Array,
    min_position: PositionLike | None,
    as_of: PositionLike | None = None,
    fields: Sequence[str] | None = None,
    times: pa.Array | None = None,
    stored: bool = False,
) -> Call:
    """A batch get of ``keys``, each as of its own time when ``times`` (parallel) are given;
    ``stored`` asks the stored JSON documents of a store decoding its values at ingest instead of
    its typed struct (whole values, bad ones as they are stored)."""
    params = {**read_params(min_position, as_of=as_of), **fields_params(fields)}
    if stored:
        params["values"] = "stored"
    return Call(
        "POST",
        f"{store_path(store)}/keys:batchGet",
        params,
        {"Content-Type": ARROW_STREAM, "Accept": ARROW_STREAM},
        encode_keys(keys, times),
    )


def at_time(call: Call, time: int | None) -> Call:
    """``call`` answered as of ``time`` (epoch ms), when one is given."""
    if time is None:
        return call
    return dataclasses.replace(call, params={**call.params, "as_of_time": str(time)})


def decode_values(body: bytes, expected_rows: int) -> pa.Array:
    """The ``value`` column of a batch-get Arrow answer, checked to have one row per key sent:
    ``binary``, or a struct for a store decoding its values at ingest (avro, protobuf, json_schema)."""
    try:
        table = pa.ipc.open_stream(body).read_all()
        values = table.column("value").combine_chunks()
        typed = pa.types.is_struct(values.type)  # a store decoding its values at ingest: typed
        if not (typed or pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type)):
            values = values.cast(pa.binary())
    except (pa.ArrowException, KeyError, OSError) as exc:
        raise UnexpectedResponseError(
            f"the batch-get answer is not the Arrow stream expected: {exc}"
        ) from exc
    if len(values) != expected_rows:
        raise UnexpectedResponseError(
            f"the batch-get answer has {len(values)} rows for {expected_rows} keys; it must have one per key"
        )
    if "error" in table.column_names:
        raise_value_errors(table)
    return values


def raise_value_errors(table: pa.Table) -> None:
    """Raise the problem of the first value the service could not answer (its ``error`` column: a
    value a store decoding at ingest could not decode); reading it as absent would be wrong."""
    errors = table.column("error").combine_chunks()
    if errors.null_count == len(errors):
        return
    index = pc.index(pc.is_valid(errors), True).as_py()
    key = table.column("key")[index].as_py() if "key" in table.column_names else index
    problem_type = errors[index].as_py()
    raise problem_error(
        {
            "type": problem_type,
            "title": "a stored value could not be answered",
            "detail": f"the value of key {key!r} ({problem_type.rsplit(':', 1)[-1]}): the store could not "
            "decode its record at ingest; the producer must write a record the registry's schema "
            "decodes (the next record for the key replaces it)",
        },
        502,
    )


def scan_call(
    store: str,
    prefix: Key,
    after: str | None,
    limit: int,
    min_position: PositionLike | None,
    as_of: PositionLike | None = None,
) -> Call:
    """One page of a prefix scan; ``after`` is the service's ``next_after`` cursor, passed back verbatim.

    A text prefix scans with UTF-8 keys (answers carry text keys); a bytes prefix uses base64.
    """
    params = read_params(min_position, as_of=as_of)
    params["limit"] = str(limit)
    if isinstance(prefix, str):
        params["prefix"] = prefix
    else:
        params["key_encoding"] = "base64"
        params["prefix"] = base64.b64encode(key_bytes(prefix)).decode("ascii")
    if after is not None:
        params["after"] = after
    return Call("GET", f"{store_path(store)}/scan", params)


def decode_value(raw: bytes, value_format: ValueFormat) -> Any:
    """A stored value as Python: JSON → objects, string → ``str``, bytes → ``bytes``."""
    try:
        if value_format == "json":
            return json.loads(raw)
        if value_format == "string":
            return raw.decode("utf-8")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueDecodeError(f"a stored value is not valid {value_format}: {exc}") from exc
    return raw


def decode_json_member(value: Any, value_format: ValueFormat) -> Any:
    """A value as it appears inside a JSON answer (scan items), decoded like :func:`decode_value`."""
    if value is None or value_format != "bytes":
        return value
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, TypeError) as exc:
        raise UnexpectedResponseError(f"a bytes value in a JSON answer is not base64: {exc}") from exc


def scan_cursor(key: Key, binary: bool) -> str:
    """The scan cursor that starts a scan after ``key`` (what ``decode_scan_key`` reads back)."""
    if binary:
        return base64.b64encode(key_bytes(key)).decode("ascii")
    return key if isinstance(key, str) else key.decode("utf-8")


def decode_scan_key(key: str, binary: bool) -> Key:
    if not binary:
        return key
    try:
        return base64.b64decode(key, validate=True)
    except binascii.Error:
        return base64.urlsafe_b64decode(key)


def response_error(response: httpx.Response) -> StatestoreClientError | None:
    """The typed error for a non-2xx answer, ``None`` for a success."""
    if response.is_success:
        return None
    retry_after = parse_retry_after(response.headers.get("Retry-After"))
    problem: Any = None
    if "json" in response.headers.get("Content-Type", ""):
        try:
            problem = response.json()
        except ValueError:
            problem = None
    if not isinstance(problem, dict):
        problem = {"title": response.reason_phrase, "detail": response.text[:200]}
    error = problem_error(problem, response.status_code, retry_after)
    if isinstance(error, ProblemError):
        with contextlib.suppress(UnexpectedResponseError):  # a bad header must not hide the problem
            error.position = position_of(response)
    return error


def position_of(response: httpx.Response) -> Position | None:
    header = response.headers.get(POSITION_HEADER)
    if header is None:
        return None
    try:
        return Position.parse(header)
    except ValueError as exc:
        raise UnexpectedResponseError(f"the {POSITION_HEADER} header {header!r} is malformed") from exc


def json_body(response: httpx.Response) -> Any:
    """A JSON answer's body; raises the error of its first ``errors`` entry when it has any.

    A page or batch holding a value the service could not answer (a JSON store's value that is not
    JSON) lists it in ``errors``: reading the answer as if the value were absent would be wrong.
    """
    try:
        body = response.json()
    except ValueError as exc:
        raise UnexpectedResponseError(
            f"{response.request.method} {response.request.url.path} answered non-JSON content"
        ) from exc
    errors = body.get("errors") if isinstance(body, dict) else None
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        first = errors[0]
        status = first.get("status")
        raise problem_error({**first, "errors": errors}, status if isinstance(status, int) else 502)
    return body


def decode_get(response: httpx.Response, raw: bool) -> Any:
    """The value of a ``GET .../keys/{key}`` answer, decoded by its content type unless ``raw``."""
    content_type = response.headers.get("Content-Type", "")
    if raw or "octet-stream" in content_type:
        return response.content
    if "json" in content_type:
        return decode_value(response.content, "json")
    if content_type.startswith("text/"):
        return decode_value(response.content, "string")
    return response.content
