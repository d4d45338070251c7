"""Keys by their natural value, on the client side: the bytes a store's producers wrote for a key.

A store's ``key_format`` (``GET /v1/stores/{store}``) says how its producers wrote keys. For
``long`` and ``int`` stores (Kafka's Java ``LongSerializer`` / ``IntegerSerializer``: 8 or 4 bytes,
big-endian, two's complement) the client takes keys as numbers (``42`` or ``"42"``) and sends the
producer's bytes: a sharded store is routed by those bytes, exactly as the producer's partitioner
placed them. ``bytes`` keys always stand for the stored bytes themselves, under every format.
"""

from __future__ import annotations

import array
import re
import struct
import sys
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from clients.exceptions import StatestoreClientError

NUMBER_FORMATS = {"long": struct.Struct(">q"), "int": struct.Struct(">i")}
PENDING_KEY_FORMATS = frozenset({"avro", "protobuf", "json_schema"})
"""What a store reports as ``key_format`` while its keys, written through the Schema Registry, have no
natural format yet (no key decoded: the store holds none): a key is then sent as its text."""
_DECIMAL = re.compile(r"^-?[0-9]+$")


class KeyFormatError(StatestoreClientError, ValueError):
    """A key that cannot be a value of its store's key format (``"abc"`` for a ``long`` store)."""


def stored_key(key: object, key_format: str) -> bytes:
    """The stored bytes of ``key`` in a store whose keys are ``key_format``."""
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key)
    packer = NUMBER_FORMATS.get(key_format)
    if packer is None:
        if isinstance(key, str):
            return key.encode("utf-8")
        if key_format in PENDING_KEY_FORMATS and isinstance(key, int) and not isinstance(key, bool):
            return str(key).encode("ascii")
        raise TypeError(f"a key must be str or bytes, got {type(key).__name__}")
    if isinstance(key, str) and _DECIMAL.match(key):
        number: object = int(key)
    elif isinstance(key, int) and not isinstance(key, bool):
        number = key
    else:
        raise KeyFormatError(f"key {key!r} is not a {key_format} (the store's key_format)")
    try:
        return packer.pack(number)
    except struct.error as exc:
        raise KeyFormatError(f"key {key!r} is out of the range of a {key_format}") from exc


def stored_key_array(keys: pa.Array, key_format: str) -> pa.Array:
    """A key column as the stored bytes (``binary``): binary kept as the stored bytes, integers
    (and, for number formats, decimal text) packed as the producer did, other text as UTF-8."""
    packer = NUMBER_FORMATS.get(key_format)
    if pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type):
        return keys if pa.types.is_binary(keys.type) else keys.cast(pa.binary())
    text = pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type)
    if packer is not None and text:
        return pa.array(
            [None if k is None else stored_key(k, key_format) for k in keys.to_pylist()], pa.binary()
        )
    if packer is not None and pa.types.is_integer(keys.type):
        return _packed(keys, key_format, packer.size)
    if text:
        return keys.cast(pa.binary())
    return keys.cast(pa.string()).cast(pa.binary())


def _packed(keys: pa.Array, key_format: str, size: int) -> pa.Array:
    """Integers as big-endian two's complement of ``size`` bytes (stdlib ``array``: no NumPy here)."""
    try:
        numbers = keys.fill_null(0).cast(pa.int64() if size == 8 else pa.int32())
    except pa.ArrowInvalid as exc:
        raise KeyFormatError(f"a key of the column is out of the range of a {key_format}: {exc}") from exc
    machine = array.array("q" if size == 8 else "i")
    data = numbers.buffers()[1]
    machine.frombytes(memoryview(data)[numbers.offset * size : (numbers.offset + len(numbers)) * size])
    if sys.byteorder == "little":
        machine.byteswap()
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(size), len(numbers), [None, pa.py_buffer(machine.tobytes())]
    )
    packed = fixed.cast(pa.binary())
    if keys.null_count:
        packed = pc.if_else(keys.is_valid(), packed, pa.scalar(None, pa.binary()))
    return packed


def natural_key_texts(keys: Sequence[bytes], key_format: str) -> pa.Array:
    """Stored keys as the text callers use for them: the decimal text of ``long`` and ``int`` keys
    (as scans and index rows answer them), else the keys as UTF-8 (``ArrowInvalid`` if not UTF-8)."""
    packer = NUMBER_FORMATS.get(key_format)
    if packer is None:
        return pa.array(keys, pa.binary()).cast(pa.string())
    if any(len(key) != packer.size for key in keys):
        raise KeyFormatError(f"a stored key of this {key_format} store is not {packer.size} bytes long")
    machine = array.array("q" if packer.size == 8 else "i")
    machine.frombytes(b"".join(keys))
    if sys.byteorder == "little":
        machine.byteswap()
    return pa.array(machine, pa.int64() if packer.size == 8 else pa.int32()).cast(pa.string())
