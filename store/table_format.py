"""The format of a store's table on disk: its block-based table options and its compression.

Both sides use it: the database (``store.table.engine``, which gives its block cache) and the SST
files the restore workers write (``store.kafka.restore_worker``), so ingested files are read like
the database's own and need no rewrite. A leaf: it imports nothing of ours, only ``rocksdict``.
"""

from __future__ import annotations

import rocksdict

BLOOM_BITS_PER_KEY = 10
"""Bits per key of the tables' bloom filters (about 1% false positives)."""

DATA_BLOCK_BYTES = 2048
"""Uncompressed size of a data block. A point read whose block is not cached reads, checksums and
decompresses a whole block: at half RocksDB's 4 KiB, a cold read of a 10M-record table costs 13%
less (5% less with the table cached) for 9% more disk (docs/benchmarks.md, issue 19)."""


def table_options(block_cache: rocksdict.Cache | None = None) -> rocksdict.BlockBasedOptions:
    """The block-based table format of a store's table (``block_cache``: the database's cache).

    Whole-key bloom filters let a point read skip a file without searching its index: after a
    bulk restore, level 0 holds one overlapping file per chunk until it is compacted.
    """
    table = rocksdict.BlockBasedOptions()
    if block_cache is not None:
        table.set_block_cache(block_cache)
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
    table.set_block_size(DATA_BLOCK_BYTES)
    return table


def compression() -> rocksdict.DBCompressionType:
    """The compression of the table's files (LZ4: cheap to decompress on a cold read)."""
    return rocksdict.DBCompressionType.lz4()
