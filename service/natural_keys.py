"""Keys by their natural value: the bytes Kafka's serializers write for a key, and back.

A store's ``key_format`` says how its producers wrote keys. ``long`` and ``int`` keys are what
Kafka's Java ``LongSerializer`` and ``IntegerSerializer`` write: the number as 8 or 4 bytes,
big-endian, two's complement. Each number has exactly one such encoding, so the store keeps the
producer's bytes as they are (and a key routes to the shard holding them) while requests and
answers carry the number as decimal text (``/keys/42``). ``string`` keys (``StringSerializer``)
are UTF-8 text, which is what ``key_encoding=utf8`` already reads and answers. ``bytes`` keys are
opaque. Under every format ``key_encoding=base64`` reads and answers the stored bytes themselves.
"""

from __future__ import annotations

import base64
import re
import struct
from typing import Final

import numpy as np
import pyarrow as pa

from service.bodies import malformed
from wire.problems import BAD_KEY_ENCODING, ProblemError

NUMBER_FORMATS: Final = {"long": struct.Struct(">q"), "int": struct.Struct(">i")}
_NUMPY_TYPES: Final = {"long": ">i8", "int": ">i4"}
_RANGES: Final = {"long": "-9223372036854775808 to 9223372036854775807", "int": "-2147483648 to 2147483647"}
_DECIMAL = re.compile(r"^-?[0-9]+$")  # ASCII digits only: int() would take '٤٢', '+4', '4_2'


def not_a_key(text: str, key_format: str) -> ProblemError:
    """The 400 answer for a key that cannot be a value of ``key_format``."""
    return BAD_KEY_ENCODING(
        f"key {text[:64]!r} is not a {key_format} (key_format: {key_format}, a decimal integer from"
        f" {_RANGES[key_format]}); send raw key bytes with key_encoding=base64",
        extras={"key_format": key_format},
    )


def number_key(text: str, key_format: str) -> bytes:
    """The producer's bytes of the decimal ``text`` in ``key_format`` (``long`` or ``int``)."""
    packer = NUMBER_FORMATS[key_format]
    if not _DECIMAL.match(text) or len(text) > 21:
        raise not_a_key(text, key_format)
    try:
        return packer.pack(int(text))
    except struct.error as exc:
        raise not_a_key(text, key_format) from exc


def number_text(stored: bytes, key_format: str) -> str:
    """The decimal text of a stored ``long`` or ``int`` key.

    A stored key of another length is no value of the format (a producer wrote something else):
    an error naming it, never a number it is not.
    """
    packer = NUMBER_FORMATS[key_format]
    if len(stored) != packer.size:
        raise BAD_KEY_ENCODING(
            f"the store holds key {base64.b64encode(stored[:48]).decode()!r} (base64), which is not a"
            f" {key_format} ({packer.size} bytes); ask again with key_encoding=base64",
            extras={"key_format": key_format},
        )
    return str(packer.unpack(stored)[0])


def is_number_column(data_type: pa.DataType) -> bool:
    return bool(pa.types.is_integer(data_type))


def number_column(column: pa.Array, key_format: str) -> pa.Array:
    """A column of integers as the producer's key bytes (``binary``), vectorized."""
    packer = NUMBER_FORMATS[key_format]
    values = column.to_numpy(zero_copy_only=False)
    wide = values.astype(np.int64, copy=False)
    if key_format == "int" and len(wide) and (wide.min() < -(2**31) or wide.max() >= 2**31):
        bad = int(wide[(wide < -(2**31)) | (wide >= 2**31)][0])
        raise not_a_key(str(bad), key_format)
    if pa.types.is_uint64(column.type) and len(values) and int(values.max()) >= 2**63:
        raise not_a_key(str(int(values.max())), key_format)
    raw = np.ascontiguousarray(wide.astype(_NUMPY_TYPES[key_format])).tobytes()
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(packer.size), len(wide), [None, pa.py_buffer(raw)])
    return fixed.cast(pa.binary())


def stored_key_column(column: pa.Array, key_format: str) -> pa.Array:
    """The stored key bytes of an Arrow batch's ``key`` column (``binary``): binary keys are the
    stored bytes themselves; integers, and text under a number format, are keys by value."""
    if is_number_column(column.type):
        if key_format not in NUMBER_FORMATS:
            raise malformed(
                f"the 'key' column cannot be {column.type}: this store's keys are {key_format}"
                " (key_format), so send binary or string keys"
            )
        return number_column(column, key_format)
    text = pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
    if key_format in NUMBER_FORMATS and text:
        return pa.array([number_key(text, key_format) for text in column.to_pylist()], pa.binary())
    return column if pa.types.is_binary(column.type) else column.cast(pa.binary())
