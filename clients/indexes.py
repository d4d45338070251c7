"""Index lookups on the wire (docs/reference/http-api.md, "Index lookups"): requests to build and
answers to decode.

Pure functions shared by the sync and async clients; nothing here does I/O. Row keys travel as
base64 (``key_encoding=base64``) so that any key, and any ``after`` cursor, round-trips exactly.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc

from clients.exceptions import UnexpectedResponseError, ValueDecodeError
from clients.natural_keys import NUMBER_FORMATS
from clients.wire import ARROW_STREAM, Call, Key, decode_value, read_params, store_path
from wire.position import PositionLike

IndexValue = str | int | float | bool
"""What an indexed field is compared with: its text (``"AAPL"``), or a number or boolean."""

DEFAULT_LIMIT_PER_VALUE = 1_000
"""Rows per value in one batch answer (the service's default); more are paged on with GET."""

INDEX_ANSWER = pa.schema(
    [("value", pa.string()), ("key", pa.binary()), ("row", pa.binary()), ("next_after", pa.binary())]
)


def index_text(value: IndexValue) -> str:
    """The text an index compares: a string as itself, a number or boolean as its JSON text.

    The index holds each number as its producer wrote it: an ``int`` matches exactly, a ``float``
    only where it was written as Python writes it (``1.5``, ``100.0``); give the text itself for
    other spellings (``"1e2"``, ``"1.50"``).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    raise TypeError(f"an indexed value must be str, int, float or bool, got {type(value).__name__}")


def index_path(store: str, index: str) -> str:
    if not index:
        raise ValueError("an index name must not be empty")
    return f"{store_path(store)}/indexes/{quote(index, safe='')}"


def index_call(
    store: str,
    index: str,
    value: str,
    after: bytes | None,
    limit: int,
    min_position: PositionLike | None,
    as_of: PositionLike | None,
) -> Call:
    """One page of the rows whose indexed field equals ``value``; ``after`` is a raw row key cursor."""
    params = read_params(min_position, as_of=as_of)
    params["limit"] = str(limit)
    params["key_encoding"] = "base64"
    if after is not None:
        params["after"] = base64.urlsafe_b64encode(after).decode("ascii")
    return Call("GET", f"{index_path(store, index)}/{quote(value, safe='')}", params)


def index_batch_call(
    store: str,
    index: str,
    values: pa.Array,
    limit_per_value: int,
    min_position: PositionLike | None,
    as_of: PositionLike | None,
) -> Call:
    """The Arrow batch lookup of many values (a stream with one ``value: string`` column)."""
    batch = pa.record_batch([values.cast(pa.string())], names=["value"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    params = read_params(min_position, as_of=as_of)
    params["limit_per_value"] = str(limit_per_value)
    # Rows as stored (JSON documents): the client decodes them itself, as it does pages paged on.
    params["values"] = "stored"
    return Call(
        "POST",
        f"{index_path(store, index)}:batchGet",
        params,
        {"Content-Type": ARROW_STREAM, "Accept": ARROW_STREAM},
        bytes(sink.getvalue().to_pybytes()),
    )


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        return base64.urlsafe_b64decode(text)


def decode_index_page(page: Mapping[str, Any]) -> tuple[list[tuple[bytes, Any]], bytes | None]:
    """The ``(row key, value)`` items of one GET page (keys base64-decoded) and its ``next_after``."""
    try:
        items = [(_b64(item["key"]), item["value"]) for item in page.get("items", [])]
        cursor = page.get("next_after")
        return items, None if cursor is None else _b64(cursor)
    except (KeyError, TypeError, binascii.Error, ValueError) as exc:
        raise UnexpectedResponseError(f"an index page is not what the HTTP API describes: {exc}") from exc


def decode_index_batch(body: bytes, values: pa.Array) -> pa.Table:
    """A batch answer as a table of ``INDEX_ANSWER``, checked against the ``values`` asked.

    Every distinct value asked must come back as one contiguous run of rows, in request order
    (the service answers a value asked twice once).
    """
    try:
        table = pa.ipc.open_stream(body).read_all()
        table = pa.table([table.column(f.name).cast(f.type) for f in INDEX_ANSWER], schema=INDEX_ANSWER)
        table = table.combine_chunks()
    except (pa.ArrowException, KeyError, OSError) as exc:
        raise UnexpectedResponseError(
            f"the index batch answer is not the Arrow stream expected: {exc}"
        ) from exc
    runs = _runs(table.column("value").combine_chunks())
    if runs != list(dict.fromkeys(values.cast(pa.string()).to_pylist())):
        raise UnexpectedResponseError(
            f"the index batch answer holds values {runs[:5]}... for {len(values)} values asked; it must"
            " answer every value once, in request order"
        )
    return table


def _runs(column: pa.Array) -> list[str | None]:
    """The values of consecutive runs in ``column`` (``a a b a`` → ``a b a``)."""
    if len(column) == 0:
        return []
    encoded = pc.run_end_encode(column)
    return list(encoded.values.to_pylist())


def json_row(value: Any) -> bytes:
    """A JSON answer's value back as the bytes of a JSON document (what the Arrow answer holds)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def with_more_pages(table: pa.Table, more: Mapping[str, Sequence[tuple[bytes, Any]]]) -> pa.Table:
    """``table`` with the rows paged on by GET for some values, each value's rows kept together.

    ``more`` maps a value to its further ``(row key, JSON value)`` items, which sort after the
    rows the batch answer already holds for it.
    """
    if not more:
        return table.drop_columns(["next_after"])
    values = table.column("value").combine_chunks()
    extra_values = [v for v, items in more.items() for _ in items]
    extra = pa.table(
        {
            "value": pa.array(extra_values, pa.string()),
            "key": pa.array([k for items in more.values() for k, _ in items], pa.binary()),
            "row": pa.array([json_row(v) for items in more.values() for _, v in items], pa.binary()),
        }
    )
    order_of = pa.array(_runs(values), pa.string())
    combined = pa.concat_tables([table.drop_columns(["next_after"]), extra])
    ordinal = pc.index_in(combined.column("value"), value_set=order_of)
    # Batch rows come first and are row-key ordered already; a stable sort keeps that order.
    position = pa.array(range(combined.num_rows), pa.int64())
    keyed = combined.append_column("ordinal", ordinal).append_column("position", position)
    return keyed.sort_by([("ordinal", "ascending"), ("position", "ascending")]).drop_columns(
        ["ordinal", "position"]
    )


def continued_values(table: pa.Table) -> list[tuple[str, bytes]]:
    """The values whose rows go on beyond the batch answer, with the cursor to page on from."""
    cursors = table.column("next_after").combine_chunks()
    has_more = pc.is_valid(cursors)
    if not pc.any(has_more).as_py():
        return []
    values = table.column("value").combine_chunks().filter(has_more).to_pylist()
    return list(zip(values, cursors.filter(has_more).to_pylist(), strict=True))


def row_key(key: bytes, binary_keys: bool, key_format: str = "bytes") -> Key:
    """A row key as the caller asked for it: ``bytes``, or as text: the decimal text of a ``long``
    or ``int`` key (as scans answer it), else UTF-8."""
    if binary_keys:
        return key
    packer = NUMBER_FORMATS.get(key_format)
    if packer is not None and len(key) == packer.size:
        return str(packer.unpack(key)[0])
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueDecodeError(
            f"row key {key!r} is not UTF-8 text; pass binary_keys=True to get keys as bytes"
        ) from exc


def grouped_rows(
    table: pa.Table,
    values: Sequence[IndexValue],
    texts: Sequence[str],
    binary_keys: bool,
    key_format: str = "bytes",
) -> dict[IndexValue, list[tuple[Key, Any]]]:
    """An ``index_arrow`` answer as ``{value: [(row key, decoded JSON value), ...]}``.

    ``texts`` are the index texts of ``values``, in the same order; row keys are read as
    :func:`row_key` reads them under the store's ``key_format``.
    """
    rows: dict[str, list[tuple[Key, Any]]] = {text: [] for text in texts}
    columns = (table.column(name).to_pylist() for name in ("value", "key", "row"))
    for value, key, row in zip(*columns, strict=True):
        if key is not None:
            rows[value].append((row_key(key, binary_keys, key_format), decode_value(row, "json")))
    return {value: rows[text] for value, text in zip(values, texts, strict=True)}


def merged_answers(tables: Sequence[pa.Table], values: pa.Array) -> pa.Table:
    """The answers of every shard to the same ``values``, as one answer: each value's rows from all
    shards together, in request order and row-key order; one null row for a value no shard matched."""
    combined = pa.concat_tables(tables)
    matched = combined.filter(pc.is_valid(combined.column("key")))
    asked = values.cast(pa.string())
    unmatched = asked.filter(pc.invert(pc.is_in(asked, value_set=matched.column("value").combine_chunks())))
    nulls = pa.table(
        {
            "value": unmatched,
            "key": pa.nulls(len(unmatched), pa.binary()),
            "row": pa.nulls(len(unmatched), pa.binary()),
        }
    )
    answer = pa.concat_tables([matched, nulls])
    ordinal = pc.index_in(answer.column("value"), value_set=asked)
    ordered = answer.append_column("ordinal", ordinal).sort_by(
        [("ordinal", "ascending"), ("key", "ascending")]
    )
    return ordered.drop_columns(["ordinal"]).combine_chunks()
