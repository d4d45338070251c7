"""Arrow answers of batch gets: the IPC stream written from the stored values' own bytes.

pyarrow's writer takes whole arrays: the values are joined into the column's data buffer, copied
into the stream, then copied out of it into the answer's bytes. A batch get's answer (a ``key``
column as it was asked, a ``binary`` ``value`` column of the stored values) is instead one join:
the schema message, the record batch's metadata, the key column's buffers as the request carried
them and the stored values themselves, each copied once. The metadata is a template pyarrow writes
once per key type, for a one-row batch of the same schema; an answer writes its numbers (rows,
nulls, where each buffer lies, the body's length) into a copy. Those are fixed-size fields of a
flatbuffer, present whenever they are not zero, so they keep their places whatever their values.
Answers of another shape (no rows, a key column with nulls or of another type) are written by
pyarrow, as are the typed answers of ``service.struct_answers``.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from service.arrow_arrays import MAX_BYTES, ends_of, validity_bitmap, value_array
from service.arrow_body import (
    BATCH_BUFFERS,
    BATCH_LENGTH,
    BATCH_NODES,
    MESSAGE_BODY_LENGTH,
    MESSAGE_HEADER,
    STRUCT_BYTES,
    FlatTable,
)
from store.json_values import as_produced

END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"
"""The end-of-stream marker of the Arrow IPC stream format."""

_ALIGNMENT = 8  # every buffer of a record batch's body starts at a multiple of 8 bytes
_PADDING = bytes(_ALIGNMENT)
_PREFIX = 8  # a message starts with the continuation marker and its metadata's length (int32 each)


def ipc_stream(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream, written by pyarrow."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


@dataclasses.dataclass(frozen=True, slots=True)
class _Template:
    """The schema message of ``key`` and ``value`` columns, and a record batch message's metadata
    with where its numbers lie."""

    schema_message: bytes
    head: bytes  # the record batch message up to its body: continuation, length, metadata
    length_at: int
    nodes_at: int
    buffers_at: int
    body_length_at: int


_TEMPLATES: dict[int, _Template] = {}  # by the key type's id: binary and integer types have no parameters


def _template(key_type: pa.DataType) -> _Template:
    template = _TEMPLATES.get(key_type.id)
    if template is None:
        template = _TEMPLATES[key_type.id] = _written_template(key_type)
    return template


def _written_template(key_type: pa.DataType) -> _Template:
    schema = pa.schema([("key", key_type), ("value", pa.binary())])
    # One row of nulls: a non-zero row count and body length, so both are present in the metadata.
    one = pa.record_batch([pa.nulls(1, key_type), pa.nulls(1, pa.binary())], schema=schema)
    message = one.serialize().to_pybytes()
    metadata_bytes = struct.unpack_from("<i", message, 4)[0]
    metadata = message[_PREFIX : _PREFIX + metadata_bytes]
    root = FlatTable.root(metadata)
    batch = root.table(MESSAGE_HEADER)
    assert batch is not None, "pyarrow wrote a record batch message without its header"
    nodes_at, nodes = batch.vector(BATCH_NODES, STRUCT_BYTES)
    buffers_at, buffers = batch.vector(BATCH_BUFFERS, STRUCT_BYTES)
    length_at, body_length_at = batch.field(BATCH_LENGTH), root.field(MESSAGE_BODY_LENGTH)
    assert length_at is not None, "pyarrow wrote a record batch without its row count"
    assert body_length_at is not None, "pyarrow wrote a record batch message without its body length"
    # Two columns: the key's buffers (validity, then offsets and bytes, or numbers), the value's three.
    assert nodes == 2, "pyarrow wrote a record batch of two columns with another count of nodes"
    assert buffers == (2 if pa.types.is_integer(key_type) else 3) + 3, "a key type of unknown buffers"
    return _Template(
        schema.serialize().to_pybytes(),
        message[: _PREFIX + metadata_bytes],
        _PREFIX + length_at,
        _PREFIX + nodes_at,
        _PREFIX + buffers_at,
        _PREFIX + body_length_at,
    )


def _key_buffers(keys: pa.Array, rows: int) -> list[Any]:
    """The body buffers of a key column without nulls: an empty validity bitmap, then its offsets
    (rebased to start at 0) and bytes, or its numbers."""
    buffers = keys.buffers()
    if pa.types.is_integer(keys.type):
        width = keys.type.bit_width // 8
        return [b"", memoryview(buffers[1])[keys.offset * width : (keys.offset + rows) * width]]
    ends = np.frombuffer(buffers[1], np.int32, rows + 1, keys.offset * 4)
    first, last = int(ends[0]), int(ends[-1])
    offsets = (ends - first if first else ends).data.cast("B")
    return [b"", offsets, memoryview(buffers[2])[first:last] if buffers[2] is not None else b""]


def batch_answer(keys: pa.Array, values: Sequence[bytes | None], value_format: str) -> bytes:
    """The Arrow IPC stream of a batch get's answer: ``key`` (``keys``, as asked) and ``value``
    (``binary``: ``values``, ``None`` a null), as ``service.arrow_arrays.value_array`` answers
    the values (a ``json`` store's values marked as no JSON document as their producer wrote them)."""
    rows = len(values)
    writable = pa.types.is_integer(keys.type) or pa.types.is_binary(keys.type)
    if rows == 0 or len(keys) != rows or keys.null_count or not writable:
        return ipc_stream(pa.table({"key": keys, "value": value_array(values, value_format)}))
    ends, present, null_count = ends_of(values)
    if ends[-1] > MAX_BYTES:  # beyond int32 offsets: the general writer splits the column
        return ipc_stream(pa.table({"key": keys, "value": value_array(values, value_format)}))
    validity = memoryview(validity_bitmap(values))[: (rows + 7) // 8] if null_count else b""
    template = _template(keys.type)
    parts: list[Any] = [template.schema_message, template.head]
    places: list[int] = []
    at = 0
    for buffer in [*_key_buffers(keys, rows), validity, ends.astype(np.int32).data.cast("B")]:
        places += (at, len(buffer))
        padding = -len(buffer) % _ALIGNMENT
        parts += (buffer, _PADDING[:padding])
        at += len(buffer) + padding
    data_at, data_bytes = at, int(ends[-1])
    places += (data_at, data_bytes)
    parts += present
    padding = -data_bytes % _ALIGNMENT
    parts += (_PADDING[:padding], END_OF_STREAM)
    head = bytearray(template.head)
    struct.pack_into("<q", head, template.length_at, rows)
    struct.pack_into("<4q", head, template.nodes_at, rows, 0, rows, null_count)
    struct.pack_into(f"<{len(places)}q", head, template.buffers_at, *places)
    struct.pack_into("<q", head, template.body_length_at, data_at + data_bytes + padding)
    parts[1] = head
    answer = b"".join(parts)
    # A marked value starts with a NUL byte, which no JSON document holds: one search finds them.
    start = len(template.schema_message) + len(head) + data_at
    if value_format == "json" and answer.find(b"\x00", start, start + data_bytes) >= 0:
        return batch_answer(keys, [None if v is None else as_produced(v) for v in values], "")
    return answer
