"""Damage a store's files as a failing disk would: a few flipped bytes, the file's size unchanged."""

from __future__ import annotations

from pathlib import Path

import rocksdict

_FLIPPED_AT = 32  # well inside the first data block (blocks hold ~4 KiB of entries before compression)
_FLIPPED = 8


def compact(db: Path) -> None:
    """Compact every column family of the (closed) database at ``db`` into its last level.

    A store reopened on files it flushed itself soon compacts them again (RocksDB rewrites
    bottommost files whose sequence numbers it can drop); a compaction reading a damaged block
    would then find the damage before the read a test means to make. Files compacted here are
    left alone by the store.
    """
    families = rocksdict.Rdict.list_cf(str(db))
    options = rocksdict.Options(raw_mode=True)
    database = rocksdict.Rdict(str(db), options, column_families=dict.fromkeys(families, options))
    try:
        for family in families:
            handle = database if family == "default" else database.get_column_family(family)
            handle.compact_range(None, None)
            del handle
    finally:
        database.close()


def table_file_starting_at(db: Path, smallest_key: bytes) -> Path:
    """The one SST file of ``db`` whose first key is ``smallest_key`` (the table's, not another
    column family's, when ``smallest_key`` is the table's smallest key).

    Read through a read-only instance, so the database may be open in a store meanwhile.
    """
    families = rocksdict.Rdict.list_cf(str(db))
    options = rocksdict.Options(raw_mode=True)
    reader = rocksdict.Rdict(
        str(db),
        options,
        column_families=dict.fromkeys(families, options),
        access_type=rocksdict.AccessType.read_only(False),
    )
    try:
        files = [f for f in reader.live_files() if f["start_key"] == smallest_key]
    finally:
        reader.close()
    assert len(files) == 1, f"expected one table file starting at {smallest_key!r}, got {files}"
    return db / str(files[0]["name"]).lstrip("/")


def flip_first_block(db: Path, smallest_key: bytes) -> Path:
    """Flip bytes inside the first data block of the table file that starts at ``smallest_key``.

    That block holds the file's smallest keys, ``smallest_key`` among them. The file keeps its size
    and its inode, so a database that has it open reads the flipped bytes from its next read of
    that block on (a block already in the block cache is not read again). Returns the file.
    """
    path = table_file_starting_at(db, smallest_key)
    with open(path, "r+b") as file:
        file.seek(_FLIPPED_AT)
        original = file.read(_FLIPPED)
        file.seek(_FLIPPED_AT)
        file.write(bytes(byte ^ 0xFF for byte in original))
    return path
