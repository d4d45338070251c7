"""statestore's storage engine: a compacted Kafka topic materialized into RocksDB, read-only to readers.

Three subpackages, by subsystem: ``store.kafka`` (the Kafka side: the consumer process, the restore
workers, polls and catch-up; imports nothing of the table), ``store.table`` (the RocksDB table:
engine, replica, indexes, history, hot keys, verifier; imports nothing of Kafka) and
``store.lifecycle`` (the :class:`Store` on top of both: copies, materializer, apply loop). The
modules at this level are the vocabulary all three share (errors, positions, states, tuning, the
readers' protocols, the table format) and import none of them.

The lifecycle and table names below are loaded on first use: a child process that imports
``store.kafka`` (the consumer process, the restore workers) loads neither RocksDB nor the store.

Embed it without HTTP::

    from store import Store, StoreConfig

    with Store(StoreConfig(name="products", topic="products",
                           kafka={"bootstrap.servers": "127.0.0.1:9092"}, state_dir="./state")) as products:
        products.wait_until_ready(timeout=60)
        with products.view() as view:
            print(view.get(b"p1"), view.position())
"""

import importlib
from typing import TYPE_CHECKING, Any

from store.exceptions import (
    HistoryExpiredError,
    HistoryNotKeptError,
    IndexNotReadyError,
    InvalidTransitionError,
    KafkaSourceError,
    PositionNotReachedError,
    ScanLimitError,
    StoreClosedError,
    StoreCorruptError,
    StoreCorruptWriteError,
    StoreError,
    StoreFullError,
    StoreIOError,
    StoreLockedError,
    StoreReadError,
    StoreWriteError,
    StoreWriterClosedError,
    TimeExpiredError,
    UnknownIndexError,
)
from store.protocol import (
    EVERY_TIME,
    MAX_SCAN_LIMIT,
    CorruptionReport,
    HistoryRows,
    IndexStatus,
    MemoryUsage,
    ReadOnlyKeyValueStore,
    RestoreProgress,
    ScanPage,
    ServableStore,
    ShardingStatus,
    StoreStatus,
    TimedKeyValueStore,
)
from store.state import RestoreMode, StoreState
from store.tuning import (
    ConsumerTuning,
    MaintenanceTuning,
    RestoreTuning,
    RetryTuning,
    RocksDBOptions,
    StoreTuning,
)
from wire.exceptions import InvalidPositionError
from wire.position import Position

if TYPE_CHECKING:
    from store.lifecycle.config import StoreConfig
    from store.lifecycle.memory import InMemoryStore
    from store.lifecycle.restore_slots import RestoreSlots
    from store.lifecycle.sharding import StoreSharding
    from store.lifecycle.store import Store
    from store.table.history import HistorySpec
    from store.table.indexes import IndexSpec

_LAZY = {
    "StoreConfig": "store.lifecycle.config",
    "InMemoryStore": "store.lifecycle.memory",
    "RestoreSlots": "store.lifecycle.restore_slots",
    "StoreSharding": "store.lifecycle.sharding",
    "Store": "store.lifecycle.store",
    "HistorySpec": "store.table.history",
    "IndexSpec": "store.table.indexes",
}


def __getattr__(name: str) -> Any:
    """The lifecycle's and the table's public names, imported when first asked for."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'store' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "EVERY_TIME",
    "MAX_SCAN_LIMIT",
    "ConsumerTuning",
    "CorruptionReport",
    "HistoryExpiredError",
    "HistoryNotKeptError",
    "HistoryRows",
    "HistorySpec",
    "InMemoryStore",
    "IndexNotReadyError",
    "IndexSpec",
    "IndexStatus",
    "InvalidPositionError",
    "InvalidTransitionError",
    "KafkaSourceError",
    "MaintenanceTuning",
    "MemoryUsage",
    "Position",
    "PositionNotReachedError",
    "ReadOnlyKeyValueStore",
    "RestoreMode",
    "RestoreProgress",
    "RestoreSlots",
    "RestoreTuning",
    "RetryTuning",
    "RocksDBOptions",
    "ScanLimitError",
    "ScanPage",
    "ServableStore",
    "ShardingStatus",
    "Store",
    "StoreClosedError",
    "StoreConfig",
    "StoreCorruptError",
    "StoreCorruptWriteError",
    "StoreError",
    "StoreFullError",
    "StoreIOError",
    "StoreLockedError",
    "StoreReadError",
    "StoreSharding",
    "StoreState",
    "StoreStatus",
    "StoreTuning",
    "StoreWriteError",
    "StoreWriterClosedError",
    "TimeExpiredError",
    "TimedKeyValueStore",
    "UnknownIndexError",
]
