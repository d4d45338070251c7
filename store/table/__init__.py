"""The RocksDB table of a store: one copy of it, read and written.

Its public face: :class:`Replica` (a copy: its database, position, indexes, history and hot-key
cache), what it takes from the rest of the store (:class:`TableConfig`, :class:`Changes`), the specs
of its indexes and history (:class:`IndexSpec`, :class:`HistorySpec`), the background check of a
copy (:class:`Verifier`), and what the benchmarks measure of it directly: the RocksDB
:class:`Engine` with its snapshot reads and options, and the hot-key cache. Below it: ``engine``,
``snapshot_reader`` (reads of one snapshot), ``options`` (RocksDB's), ``volume`` (space and write
errors), ``indexes``, ``history`` (and ``history_keys``, its entries' layout), ``asof``, ``hot_keys``,
``corruption``, ``families``; the replica's parts ``replica_indexes`` (its indexes' upkeep and
builds), ``replica_history`` (its history state) and ``cached_reader`` (its views of the current
state). Nothing here imports the Kafka side (``store.kafka``) or the lifecycle.
"""

from store.table.engine import Engine
from store.table.history import HistorySpec
from store.table.hot_keys import HotKeyCache, read_misses
from store.table.indexes import IndexSpec
from store.table.options import database_options, new_block_cache
from store.table.replica import Replica
from store.table.seams import Changes, TableConfig
from store.table.snapshot_reader import SnapshotReader
from store.table.verifier import Verifier, VerifyStep
from store.table.volume import directory_size

__all__ = [
    "Changes",
    "Engine",
    "HistorySpec",
    "HotKeyCache",
    "IndexSpec",
    "Replica",
    "SnapshotReader",
    "TableConfig",
    "Verifier",
    "VerifyStep",
    "database_options",
    "directory_size",
    "new_block_cache",
    "read_misses",
]
