"""Arrow IPC request bodies, checked before anything in them is decompressed.

A compressed IPC stream of a few kilobytes can decompress to gigabytes. Reading it with
``pa.ipc.open_stream`` decompresses every buffer of every column first, so the size and schema
checks must come before: the schema message names the columns, and each record batch's metadata
(a flatbuffer, read here without decompressing its body) gives its row count and, per buffer, the
bytes it takes (a compressed buffer starts with its uncompressed length). A body whose columns
are not exactly the one expected, or whose rows or decompressed bytes pass the limits, is refused
before any buffer is decompressed; the rest is then decoded by pyarrow.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Sequence

import pyarrow as pa

from service.bodies import malformed, too_large
from wire.problems import BATCH_TOO_LARGE, BODY_TOO_LARGE

MAX_RECORD_BATCHES = 1024
"""Record batches one body may hold (each is parsed by Python: a bound on the work of one body)."""

# Arrow's Message flatbuffer (format/Message.fbs): the vtable slots read here.
_MESSAGE_HEADER_TYPE, MESSAGE_HEADER, MESSAGE_BODY_LENGTH = 1, 2, 3
_RECORD_BATCH = 3  # MessageHeader union: Schema = 1, DictionaryBatch = 2, RecordBatch = 3
BATCH_LENGTH, BATCH_NODES, BATCH_BUFFERS, _BATCH_COMPRESSION = 0, 1, 2, 3
STRUCT_BYTES = 16  # FieldNode {length, null_count} and Buffer {offset, length}: two int64 each
_NOT_COMPRESSED = -1  # the uncompressed-length prefix of a buffer stored as it is


class FlatTable:
    """One flatbuffer table: its fields by vtable slot (``struct.error`` on a truncated buffer)."""

    def __init__(self, data: bytes, position: int) -> None:
        self._data = data
        self._position = position
        self._vtable = position - struct.unpack_from("<i", data, position)[0]
        self._vtable_bytes = struct.unpack_from("<H", data, self._vtable)[0]

    @classmethod
    def root(cls, data: bytes) -> FlatTable:
        """The root table of the flatbuffer ``data``."""
        return cls(data, struct.unpack_from("<I", data, 0)[0])

    def field(self, slot: int) -> int | None:
        """Where the field of vtable slot ``slot`` lies in the buffer; ``None`` when it is absent
        (a scalar at its default value)."""
        entry = 4 + 2 * slot
        if entry + 2 > self._vtable_bytes:
            return None
        offset: int = struct.unpack_from("<H", self._data, self._vtable + entry)[0]
        return self._position + offset if offset else None

    def scalar(self, slot: int, fmt: str, default: int) -> int:
        """The scalar field of ``slot`` (a ``struct`` format), or ``default`` when it is absent."""
        field = self.field(slot)
        return default if field is None else int(struct.unpack_from(fmt, self._data, field)[0])

    def table(self, slot: int) -> FlatTable | None:
        """The table the field of ``slot`` refers to, if it is present."""
        field = self.field(slot)
        if field is None:
            return None
        return FlatTable(self._data, field + struct.unpack_from("<I", self._data, field)[0])

    def vector(self, slot: int, item_bytes: int) -> tuple[int, int]:
        """Where the first item of the vector of ``slot`` lies, and how many items it holds (items of
        ``item_bytes`` each, all within the buffer; an absent vector holds none)."""
        field = self.field(slot)
        if field is None:
            return 0, 0
        vector = field + struct.unpack_from("<I", self._data, field)[0]
        count: int = struct.unpack_from("<I", self._data, vector)[0]
        if vector + 4 + count * item_bytes > len(self._data):
            raise struct.error("vector past the end of the metadata")
        return vector + 4, count

    def pairs(self, slot: int) -> list[tuple[int, int]]:
        """A vector of structs of two int64 (``FieldNode``, ``Buffer``)."""
        start, count = self.vector(slot, STRUCT_BYTES)
        return [struct.unpack_from("<qq", self._data, start + i * STRUCT_BYTES) for i in range(count)]


def _batch_sizes(message: pa.ipc.Message) -> tuple[int, int]:
    """A record batch message's rows and the bytes its buffers take once decompressed."""
    body_size = 0 if message.body is None else message.body.size
    try:
        root = FlatTable.root(message.metadata.to_pybytes())
        batch = root.table(MESSAGE_HEADER)
        if root.scalar(_MESSAGE_HEADER_TYPE, "<B", 0) != _RECORD_BATCH or batch is None:
            raise malformed("the Arrow stream holds a message other than a record batch")
        rows = batch.scalar(BATCH_LENGTH, "<q", 0)
        nodes = batch.pairs(BATCH_NODES)
        compressed = batch.table(_BATCH_COMPRESSION) is not None
        decompressed = 0
        for offset, length in batch.pairs(BATCH_BUFFERS):
            if offset < 0 or length < 0 or offset + length > body_size:
                raise malformed("an Arrow buffer lies outside its message's body")
            decompressed += _buffer_size(message.body, offset, length) if compressed else length
    except struct.error as exc:
        raise malformed(f"the Arrow stream's metadata is malformed: {exc}") from exc
    if rows < 0 or any(length < 0 or length > rows for length, _ in nodes):
        raise malformed("the Arrow stream declares a negative or inconsistent row count")
    return rows, decompressed


def _buffer_size(body: pa.Buffer, offset: int, length: int) -> int:
    """The uncompressed size of a compressed buffer, from the int64 that starts it."""
    if length == 0:
        return 0
    if length < 8:
        raise malformed("a compressed Arrow buffer is shorter than its length prefix")
    declared: int = struct.unpack_from("<q", body, offset)[0]
    if declared == _NOT_COMPRESSED:
        return length - 8
    if declared < 0:
        raise malformed("a compressed Arrow buffer declares a negative size")
    return declared


def read_column(
    body: bytes, column: str, accepts: Callable[[pa.DataType], bool], max_rows: int, max_bytes: int
) -> pa.Array:
    """The only column of the Arrow IPC stream ``body``, which must be named ``column``.

    Refused before anything is decompressed: ``400 malformed-request`` for another schema (other
    or more columns, a type ``accepts`` refuses, dictionary batches); ``413 batch-too-large`` for
    more than ``max_rows`` rows; ``413 body-too-large`` when the buffers would take more than
    ``max_bytes`` once decompressed.
    """
    return read_columns(body, [(column, accepts)], 1, max_rows, max_bytes)[0]


def read_columns(
    body: bytes,
    columns: Sequence[tuple[str, Callable[[pa.DataType], bool]]],
    required: int,
    max_rows: int,
    max_bytes: int,
) -> list[pa.Array]:
    """The columns of the Arrow IPC stream ``body``: the first ``required`` of ``columns`` (name,
    accepted types), then optionally the next ones, in that order and no others; refused as
    ``read_column`` refuses."""
    stream = open_stream(body, columns, required)
    stream.decompressed_size(max_rows, max_bytes)
    return stream.columns()


@dataclasses.dataclass(frozen=True, slots=True)
class ArrowStream:
    """An Arrow IPC stream whose schema is checked, its record batches listed but not decoded."""

    schema: pa.Schema
    messages: list[pa.ipc.Message]

    def decompressed_size(self, max_rows: int, max_bytes: int) -> int:
        """The bytes the stream's buffers take once decompressed (what decoding it costs), read
        from each record batch's metadata without decompressing anything: ``413 batch-too-large``
        above ``max_rows`` rows, ``413 body-too-large`` above ``max_bytes``."""
        rows = decompressed = 0
        for message in self.messages:
            batch_rows, batch_bytes = _batch_sizes(message)
            rows += batch_rows
            decompressed += batch_bytes
        if rows > max_rows:
            raise too_large(BATCH_TOO_LARGE, f"the Arrow stream holds {rows} rows; split the batch", max_rows)
        if decompressed > max_bytes:
            raise too_large(
                BODY_TOO_LARGE,
                f"the Arrow stream takes {decompressed} bytes once decompressed, above {max_bytes}",
                max_bytes,
            )
        return decompressed

    def columns(self) -> list[pa.Array]:
        """The stream's columns, decoded (decompressing its buffers) and validated, each as one
        array (those of several record batches joined): only once ``decompressed_size`` passed."""
        schema = self.schema
        try:
            batches = [pa.ipc.read_record_batch(message, schema) for message in self.messages]
            for batch in batches:
                # The reader checks buffer sizes only: offsets past their data (or text that is no
                # UTF-8) would be read as keys that were never sent.
                batch.validate(full=True)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise malformed(f"the body is not a valid Arrow IPC stream: {exc}") from exc
        if len(batches) == 1:  # the usual body: its arrays as they are
            columns: list[pa.Array] = batches[0].columns
            return columns
        chunked = (
            pa.chunked_array([batch.column(i) for batch in batches], type=schema.field(i).type)
            for i in range(len(schema.names))
        )
        return [column.combine_chunks() for column in chunked]


def open_stream(
    body: bytes, columns: Sequence[tuple[str, Callable[[pa.DataType], bool]]], required: int
) -> ArrowStream:
    """The Arrow IPC stream ``body``, its schema checked as ``read_columns`` checks it (``400
    malformed-request``), its messages listed (at most ``MAX_RECORD_BATCHES``, not copied)."""
    try:
        reader = pa.ipc.MessageReader.open_stream(pa.py_buffer(body))
        schema = pa.ipc.read_schema(reader.read_next_message())
        messages = _messages(reader)
    except (pa.ArrowException, OSError, ValueError, StopIteration) as exc:
        raise malformed(f"the body is not an Arrow IPC stream: {exc}") from exc
    _check_schema(schema, columns, required)
    return ArrowStream(schema, messages)


def _check_schema(
    schema: pa.Schema, columns: Sequence[tuple[str, Callable[[pa.DataType], bool]]], required: int
) -> None:
    """``400 malformed-request`` unless ``schema`` holds the columns ``read_columns`` takes."""
    names = [name for name, _ in columns]
    if not (required <= len(schema.names) <= len(names) and schema.names == names[: len(schema.names)]):
        if len(names) == 1:
            detail, what = f"one column named {names[0]!r}", "the only column"
        else:
            detail, what = (
                f"the columns {names[:required]} (then optionally {names[required:]})",
                "the columns",
            )
        raise malformed(
            f"the Arrow stream must hold {detail}, not {schema.names[:8]}",
            [{"loc": ["body", names[0]], "msg": what}],
        )
    for i, name in enumerate(schema.names):
        if not columns[i][1](schema.field(i).type):
            raise malformed(f"the {name!r} column cannot be {schema.field(i).type}")


def _messages(reader: pa.ipc.MessageReader) -> list[pa.ipc.Message]:
    messages: list[pa.ipc.Message] = []
    while True:
        try:
            message = reader.read_next_message()
        except StopIteration:
            return messages
        if len(messages) == MAX_RECORD_BATCHES:
            raise malformed(f"the Arrow stream holds more than {MAX_RECORD_BATCHES} record batches")
        messages.append(message)
