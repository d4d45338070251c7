"""Bootstrap bulk loading: records sorted in bulk and written as SST files that RocksDB ingests.

A WriteBatch loop is bound by per-call overhead in the binding; an SST file is written in key
order with no memtable, compaction or lock work, and ingested in one call. Within a chunk the
last record per key wins; across chunks, later ingested files win. Tombstones become deletes
in the file, so they also remove keys written by earlier chunks.

Re-ingesting a chunk after a crash (its offsets had not been persisted) is harmless: replaying
the same records from the same offsets ends in the same table.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import rocksdict


def sorted_last_per_key(
    keys: Sequence[bytes], values: Sequence[bytes | None]
) -> tuple[list[bytes], list[bytes | None]]:
    """Keys in byte order, each once, with the value of its last occurrence (None: tombstone)."""
    count = len(keys)
    if count == 0:
        return [], []
    key_array = pa.array(keys, pa.binary())
    value_array = pa.array(values, pa.binary())
    order = pa.array(range(count), pa.int64())
    indices = pc.sort_indices(
        pa.table({"k": key_array, "o": order}), sort_keys=[("k", "ascending"), ("o", "descending")]
    )
    sorted_keys = key_array.take(indices)
    sorted_values = value_array.take(indices)
    if count > 1:
        first_of_run = pc.not_equal(sorted_keys.slice(1), sorted_keys.slice(0, count - 1))
        keep = pa.concat_arrays([pa.array([True]), first_of_run])
        sorted_keys = sorted_keys.filter(keep)
        sorted_values = sorted_values.filter(keep)
    return sorted_keys.to_pylist(), sorted_values.to_pylist()


_file_numbers = itertools.count()


def write_sst(
    writer: rocksdict.SstFileWriter, directory: Path, keys: Sequence[bytes], values: Sequence[bytes | None]
) -> Path | None:
    """Write one chunk to a new SST file in ``directory``; ``None`` if the chunk is empty."""
    sorted_keys, sorted_values = sorted_last_per_key(keys, values)
    if not sorted_keys:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"chunk-{next(_file_numbers):08d}.sst"
    writer.open(str(path))
    for key, value in zip(sorted_keys, sorted_values, strict=True):
        if value is None:
            del writer[key]
        else:
            writer[key] = value
    writer.finish()
    return path
