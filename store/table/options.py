"""The RocksDB options of a store's database, and the block cache it shares (or not)."""

from __future__ import annotations

import threading

import rocksdict

from store.table_format import compression, table_options
from store.tuning import RocksDBOptions

# RocksDB compacts level 0 once it holds this many files (its default, set here because
# Engine.compact_leftover_level0 relies on it).
LEVEL0_COMPACTION_TRIGGER = 4
# From this many level-0 files RocksDB slows writes down, and stops them (its defaults; see
# Engine.defer_compactions).
LEVEL0_SLOWDOWN_WRITES_TRIGGER = 20
LEVEL0_STOP_WRITES_TRIGGER = 36


# Threads of one level-0 compaction: the merge of a bulk restore's files runs before READY
# (``store.lifecycle.settle``), when nothing else of the store runs, so it may take a second core.
SUBCOMPACTIONS = 2

# RocksDB's own default target size of a table file, set here because Engine.defer_compactions
# lowers it while a bulk restore's files are merged and sets it back afterwards.
TARGET_FILE_BYTES = 64 * 2**20
_MERGE_FILE_MIN_BYTES = 2**20


def merge_file_bytes(table_bytes: int) -> int:
    """The target file size under which RocksDB splits a merge of ``table_bytes`` into
    ``SUBCOMPACTIONS`` threads: it never splits a compaction into ranges smaller than one output
    file, so a table below ``SUBCOMPACTIONS`` default-sized files is merged in one thread."""
    return max(_MERGE_FILE_MIN_BYTES, min(TARGET_FILE_BYTES, table_bytes // SUBCOMPACTIONS + 1))


_INFO_LOG_FILES = 2
_INFO_LOG_FILE_BYTES = 512 * 1024


_shared_caches: dict[int, rocksdict.Cache] = {}
_shared_caches_lock = threading.Lock()


def new_block_cache(capacity: int) -> rocksdict.Cache:
    """A block cache of ``capacity`` bytes: RocksDB's HyperClockCache, its table grown as the cache
    fills (an estimated entry charge of 0), rather than its LRU cache.

    A hit in the LRU cache unlinks and relinks the entry in its LRU list, writing to neighbours
    scattered over the cache; a hit in a clock cache sets a bit in its slot. With the whole table
    cached, cold reads ran 6-9% faster at 1M and at 10M records (docs/benchmarks.md, "Cold reads
    10M / 1M in one run"). Sized up front instead (a fixed entry charge) the table would take
    memory for the whole capacity before any block is cached.
    """
    return rocksdict.Cache.new_hyper_clock_cache(capacity, 0)


def block_cache(tuning: RocksDBOptions) -> rocksdict.Cache:
    """The block cache of a database tuned by ``tuning``: its own, or the process's shared cache of
    that capacity (``RocksDBOptions.share_block_cache``), created by the first database to ask."""
    if not tuning.share_block_cache:
        return new_block_cache(tuning.block_cache_bytes)
    with _shared_caches_lock:
        cache = _shared_caches.get(tuning.block_cache_bytes)
        if cache is None:
            cache = _shared_caches[tuning.block_cache_bytes] = new_block_cache(tuning.block_cache_bytes)
        return cache


def database_options(tuning: RocksDBOptions, write_buffer_bytes: int) -> rocksdict.Options:
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_atomic_flush(True)
    options.set_write_buffer_size(write_buffer_bytes)
    options.set_max_background_jobs(2)
    options.set_max_subcompactions(SUBCOMPACTIONS)
    options.set_target_file_size_base(TARGET_FILE_BYTES)
    options.set_level_zero_file_num_compaction_trigger(LEVEL0_COMPACTION_TRIGGER)
    options.set_level_zero_slowdown_writes_trigger(LEVEL0_SLOWDOWN_WRITES_TRIGGER)
    options.set_level_zero_stop_writes_trigger(LEVEL0_STOP_WRITES_TRIGGER)
    options.set_block_based_table_factory(table_options(block_cache(tuning)))
    options.set_compression_type(compression())
    # RocksDB's own info log: every open renames the last one to LOG.old.*; a store reopened after
    # write errors on a full volume must not fill what is left of it with them.
    options.set_keep_log_file_num(_INFO_LOG_FILES)
    options.set_max_log_file_size(_INFO_LOG_FILE_BYTES)
    return options
