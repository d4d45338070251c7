"""Stored values as the Arrow type a lookup or read answers: JSON documents parsed in one vectorized
pass (misfits isolated by halves and made null), structs the service typed conformed by field name,
text and bytes as they are. Written against pyarrow only: the service imports it too, so it must
never import pandas.
"""

from __future__ import annotations

import json
import struct

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from clients.wire import ValueFormat


def decode(
    stored: pa.Array, value_format: ValueFormat, value_type: pa.StructType | None
) -> tuple[pa.Array, pa.Array]:
    """Stored values as the output type, and a mask of the values that did not fit (now null)."""
    if pa.types.is_struct(stored.type):  # typed by the service (a store decoding at ingest)
        return conform_struct(stored, value_type)
    if value_type is not None:
        return decode_json(stored, value_type)
    if value_format == "bytes":
        return stored, _no_misfits(len(stored))
    try:
        return stored.cast(pa.string()), _no_misfits(len(stored))
    except pa.ArrowInvalid:
        raw: list[bytes | None] = stored.to_pylist()
        texts = [_utf8_or_none(v) for v in raw]
        bad = pa.array([t is None and v is not None for t, v in zip(texts, raw, strict=True)], pa.bool_())
        return pa.array(texts, pa.string()), bad


def _no_misfits(length: int) -> pa.Array:
    return pa.repeat(pa.scalar(False), length)


def _utf8_or_none(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


# Built from buffers: ``pa.array`` of a Python list imports pandas the first time, and the service
# imports this module (a process that must never import pandas).
_EMPTY_OBJECT = pa.Array.from_buffers(
    pa.binary(), 1, [None, pa.py_buffer(struct.pack("<2i", 0, 2)), pa.py_buffer(b"{}")]
)


def _read_json_lines(values: pa.Array, schema: pa.Schema) -> pa.StructArray:
    """Parse newline-free JSON documents (one per value) into a struct array; raises on any misfit."""
    # pyarrow's JSON reader crashes the process (pyarrow 26) on a block whose first document is
    # ``null``: an empty object goes first, and its row is dropped.
    documents = pa.concat_arrays([_EMPTY_OBJECT, values.cast(pa.binary())])
    joined = pc.binary_join(
        pa.ListArray.from_arrays(pa.array([0, len(documents)], pa.int32()), documents), pa.scalar(b"\n")
    )[0].as_buffer()
    table = pa_json.read_json(
        pa.BufferReader(joined),
        read_options=pa_json.ReadOptions(use_threads=False, block_size=max(1 << 20, joined.size + 1)),
        parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
    )
    if table.num_rows != len(documents):
        raise pa.ArrowInvalid(f"{len(values)} documents parsed into {table.num_rows - 1} rows")
    table = table.slice(1)
    return pa.StructArray.from_arrays(
        [table.column(i).combine_chunks() for i in range(table.num_columns)], fields=list(schema)
    )


def _parse_each(values: pa.Array, schema: pa.Schema) -> tuple[list[pa.StructArray | None], int]:
    """Parse ``values`` by halves, isolating the documents that do not fit (``None``)."""
    try:
        return [_read_json_lines(values, schema)], 0
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        if len(values) == 1:
            return [None], 1
    middle = len(values) // 2
    left, left_bad = _parse_each(values.slice(0, middle), schema)
    right, right_bad = _parse_each(values.slice(middle), schema)
    return left + right, left_bad + right_bad


_SEARCHED = 1 << 20
"""Bytes of a data buffer copied at once to look for newlines in it."""


def may_hold_newline(values: pa.Array) -> bool:
    """Whether a binary or string array may hold a newline: its data buffer is searched whole, a
    MiB at a time (about 0.1 ms for 5,000 documents of 350 bytes, where a match per value took 2.8);
    bytes outside the values only ever answer yes when the answer is no, which costs the replacing
    only."""
    data = values.buffers()[2]
    if data is None:
        return False
    return any(
        data.slice(start, min(_SEARCHED, data.size - start)).to_pybytes().find(b"\n") >= 0
        for start in range(0, data.size, _SEARCHED)
    )


def decode_json(stored: pa.Array, value_type: pa.StructType) -> tuple[pa.Array, pa.Array]:
    """JSON documents as a struct array per ``value_type``; misfits (bad JSON, wrong types) become null.

    The fast path parses all documents in one vectorized pass; only when that fails are the
    documents split in halves to find the ones that do not fit.
    """
    schema = pa.schema(list(value_type))
    present_mask = pc.is_valid(stored)
    present = stored.filter(present_mask)
    empty = pa.array([], type=value_type)
    if len(present) == 0:
        return pa.nulls(len(stored), value_type), _no_misfits(len(stored))
    if may_hold_newline(present):
        # Newlines may only be JSON whitespace here; they would split documents, so blank them.
        present = pc.replace_substring(present, "\n", " ")
    parts, _ = _parse_each(present, schema)
    pieces: list[pa.Array] = []
    bad_flags: list[bool] = []
    for part in parts:
        if part is None:
            pieces.append(pa.nulls(1, value_type))
            bad_flags.append(True)
        else:
            pieces.append(part)
            bad_flags.extend([False] * len(part))
    parsed = pa.concat_arrays(pieces) if pieces else empty
    # Scatter the parsed documents back to their places among the absent values.
    rank = pc.subtract(pc.cumulative_sum(pc.cast(present_mask, pa.int64())), 1)
    index = pc.if_else(present_mask, rank, pa.scalar(None, pa.int64()))
    values = parsed.take(index)
    bad = pc.fill_null(pa.array(bad_flags, pa.bool_()).take(index), False)
    return values, bad


def conform_struct(stored: pa.Array, value_type: pa.StructType | None) -> tuple[pa.Array, pa.Array]:
    """A struct the service typed, as ``value_type``: fields taken by name (one the answer lacks is
    null), each cast to its type; values whose fields do not cast are null and flagged. With no
    ``value_type`` the values are answered as JSON text, like a JSON store's."""
    if value_type is None:
        texts = [None if v is None else json.dumps(v) for v in stored.to_pylist()]
        return pa.array(texts, pa.string()), _no_misfits(len(stored))
    try:
        return _by_name(stored, value_type), _no_misfits(len(stored))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # Some value does not fit: type each one through its JSON form, to flag exactly those.
        documents = [None if v is None else json.dumps(v).encode() for v in stored.to_pylist()]
        return decode_json(pa.array(documents, pa.binary()), value_type)


def _by_name(stored: pa.Array, value_type: pa.DataType) -> pa.Array:
    if not (pa.types.is_struct(value_type) and pa.types.is_struct(stored.type)):
        return stored.cast(value_type)
    children = []
    for field in value_type:
        index = stored.type.get_field_index(field.name)
        child = stored.field(index) if index >= 0 else pa.nulls(len(stored), field.type)
        children.append(_by_name(child, field.type))
    mask = pc.is_null(stored) if stored.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(value_type), mask=mask)
