"""Arrow columns of answers, built from their buffers.

``pa.array`` of a Python list first asks whether the list is a pandas object, and the first time
it asks it imports pandas: more than a second in which the event loop, and so every request,
stands still (and pandas then holds ~60 MiB). The answers' columns are binary or UTF-8 strings,
so they are built here directly from an offsets buffer and the concatenated bytes, with a
validity bitmap when some are null, and pandas is never imported. It costs about twice what
``pa.array`` does: ~50 µs more per 1,000 values, about 1% of answering them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store.json_values import as_produced

# Offsets of ``binary`` and ``string`` are int32: an answer column holds at most this many bytes.
MAX_BYTES = 2**31 - 1

if sys.byteorder != "little":  # Arrow's buffers are little-endian; numpy's are native
    raise ImportError(
        "service.arrow_arrays builds little-endian Arrow buffers on a little-endian machine only"
    )


def binary_array(items: Sequence[bytes | None]) -> pa.Array:
    """A ``binary`` array of ``items`` (``None`` is null)."""
    return _from_items(pa.binary(), items)


def value_array(values: Sequence[bytes | None], value_format: str) -> pa.Array:
    """The ``value`` column of an Arrow answer: the stored values, those of a ``json`` store that
    were marked at ingest as no JSON document (``store.json_values``) as their producer wrote them,
    so a client decoding them finds them bad as it would without the mark. A marked value starts
    with a NUL byte, which no JSON document holds: one search of the column's bytes finds them."""
    joined = _joined(values)
    if value_format == "json" and b"\x00" in joined[1]:
        values = [None if value is None else as_produced(value) for value in values]
        joined = _joined(values)
    return _array(pa.binary(), values, *joined)


def string_array(items: Sequence[str | None]) -> pa.Array:
    """A ``string`` array of ``items`` (``None`` is null), encoded as UTF-8."""
    return _from_items(pa.string(), [None if item is None else item.encode() for item in items])


def _from_items(data_type: pa.DataType, items: Sequence[bytes | None]) -> pa.Array:
    return _array(data_type, items, *_joined(items))


def _joined(items: Sequence[bytes | None]) -> tuple[np.ndarray[Any, Any], bytes, int]:
    """The offsets of ``items`` (int64, a leading 0), their bytes joined, and how many are ``None``."""
    ends, present, null_count = ends_of(items)
    return ends, b"".join(present), null_count


def ends_of(items: Sequence[bytes | None]) -> tuple[np.ndarray[Any, Any], Sequence[bytes], int]:
    """The offsets of ``items`` in their joined bytes (int64, a leading 0: an Arrow column's
    offsets), the items that are not ``None``, and how many are ``None``."""
    ends = np.zeros(len(items) + 1, dtype=np.int64)
    try:  # every item present (the usual answer): len() of each in C, no test for None
        np.cumsum(np.fromiter(map(len, items), np.int64, len(items)), out=ends[1:])  # type: ignore[arg-type]
        return ends, items, 0  # type: ignore[return-value]
    except TypeError:  # len(None)
        np.cumsum([0 if item is None else len(item) for item in items], out=ends[1:])
        present = [item for item in items if item is not None]
        return ends, present, len(items) - len(present)


def _array(
    data_type: pa.DataType,
    items: Sequence[bytes | None],
    ends: np.ndarray[Any, Any],
    data: bytes,
    null_count: int,
) -> pa.Array:
    if ends[-1] > MAX_BYTES:
        # Beyond int32 offsets: pyarrow splits it (rare, and limited by max_answer_rows anyway).
        return pa.array(items, type=data_type)
    validity = validity_bitmap(items) if null_count else None
    buffers = [validity, pa.py_buffer(ends.astype(np.int32)), pa.py_buffer(data)]
    return pa.Array.from_buffers(data_type, len(items), buffers, null_count=null_count)


def validity_bitmap(items: Sequence[bytes | None]) -> pa.Buffer:
    """The validity bitmap of ``items`` (a bit per item, set when it is not ``None``): one byte per
    item, packed to bits by a cast to boolean."""
    flags = bytes([item is not None for item in items])
    as_bytes = pa.Array.from_buffers(pa.uint8(), len(items), [None, pa.py_buffer(flags)])
    packed: pa.Buffer = pc.cast(as_bytes, pa.bool_()).buffers()[1]
    return packed
