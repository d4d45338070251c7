"""Arrow columns of answers, built from their buffers.

``pa.array`` of a Python list first asks whether the list is a pandas object, and the first time
it asks it imports pandas: more than a second in which the event loop, and so every request,
stands still. The answers' columns are binary or UTF-8 strings, so they are built here directly
from an offsets buffer and the concatenated bytes, with a validity bitmap when some are null;
pandas is never imported, and nothing is converted item by item by pyarrow.
"""

from __future__ import annotations

import array
import itertools
import sys
from collections.abc import Sequence

import pyarrow as pa

# Offsets of ``binary`` and ``string`` are int32: an answer column holds at most this many bytes.
_MAX_BYTES = 2**31 - 1

if sys.byteorder != "little":  # Arrow's buffers are little-endian; array.array is native
    raise ImportError(
        "service.arrow_arrays builds little-endian Arrow buffers on a little-endian machine only"
    )


def binary_array(items: Sequence[bytes | None]) -> pa.Array:
    """A ``binary`` array of ``items`` (``None`` is null)."""
    return _from_items(pa.binary(), items)


def string_array(items: Sequence[str | None]) -> pa.Array:
    """A ``string`` array of ``items`` (``None`` is null), encoded as UTF-8."""
    return _from_items(pa.string(), [None if item is None else item.encode() for item in items])


def _from_items(data_type: pa.DataType, items: Sequence[bytes | None]) -> pa.Array:
    present = [item for item in items if item is not None]
    data = b"".join(present)
    if len(data) > _MAX_BYTES:
        # Beyond int32 offsets: pyarrow splits it (rare, and limited by max_answer_rows anyway).
        return pa.array(items, type=data_type)
    offsets = array.array("i", [0])
    offsets.extend(itertools.accumulate(0 if item is None else len(item) for item in items))
    null_count = len(items) - len(present)
    validity = pa.py_buffer(_validity(items)) if null_count else None
    return pa.Array.from_buffers(
        data_type, len(items), [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=null_count
    )


def _validity(items: Sequence[bytes | None]) -> bytes:
    bits = bytearray((len(items) + 7) // 8)
    for index, item in enumerate(items):
        if item is not None:
            bits[index >> 3] |= 1 << (index & 7)
    return bytes(bits)
