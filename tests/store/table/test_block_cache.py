"""A store's block cache: its own, or one cache shared by every store of the process that shares it
(``RocksDBOptions.share_block_cache``, the service's ``engine.block_cache_bytes: auto``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import Position
from store.table.engine import Engine
from store.table.snapshot_reader import SnapshotReader
from store.tuning import RocksDBOptions

# A capacity no other test asks for, so the shared cache holds this test's blocks only.
CAPACITY = 37 * 1024 * 1024
KEYS = [b"key-%06d" % i for i in range(20_000)]


def filled(path: Path, options: RocksDBOptions) -> Engine:
    engine = Engine(path, options)
    batch = engine.new_batch()
    for key in KEYS:
        batch.put(key, b"v" * 100)
    engine.write(batch)
    engine.flush()
    return engine


@pytest.mark.parametrize("shared", [True, False])
def test_a_shared_cache_holds_what_every_sharing_store_read(tmp_path: Path, shared: bool) -> None:
    options = RocksDBOptions(block_cache_bytes=CAPACITY, share_block_cache=shared)
    read, idle = filled(tmp_path / "read", options), filled(tmp_path / "idle", options)
    try:
        before = idle.memory(0).block_cache_usage_bytes
        assert SnapshotReader(read.snapshot(), Position()).get_many(KEYS) == [b"v" * 100] * len(KEYS)
        read_usage = read.memory(0).block_cache_usage_bytes
        idle_usage = idle.memory(0).block_cache_usage_bytes
        assert read_usage > 1024 * 1024  # the table's data blocks, cached
        assert (
            read.memory(0).block_cache_capacity_bytes == idle.memory(0).block_cache_capacity_bytes == CAPACITY
        )
        if shared:
            # One cache: the reads of one are in the other's too (the two figures are taken a moment
            # apart, and the engines' background threads may touch the cache in between).
            assert idle_usage > 1024 * 1024
            assert abs(idle_usage - read_usage) < 64 * 1024
        else:
            assert idle_usage == before < 1024 * 1024  # its own cache: nobody read it
    finally:
        read.close()
        idle.close()
