"""statestore's storage engine: a compacted Kafka topic materialized into RocksDB, read-only to readers.

Embed it without HTTP::

    from store import Store, StoreConfig

    with Store(StoreConfig(name="products", topic="products",
                           kafka={"bootstrap.servers": "127.0.0.1:9092"}, state_dir="./state")) as products:
        products.wait_until_ready(timeout=60)
        with products.view() as view:
            print(view.get(b"p1"), view.position())
"""

from store.config import StoreConfig
from store.corruption import CorruptionReport
from store.exceptions import (
    HistoryExpiredError,
    HistoryNotKeptError,
    IndexNotReadyError,
    InvalidPositionError,
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
from store.history import HistorySpec
from store.indexes import IndexSpec
from store.memory import InMemoryStore
from store.position import Position
from store.protocol import (
    MAX_SCAN_LIMIT,
    IndexStatus,
    MemoryUsage,
    ReadOnlyKeyValueStore,
    RestoreProgress,
    ScanPage,
    ServableStore,
    ShardingStatus,
    StoreStatus,
)
from store.restore_slots import RestoreSlots
from store.sharding import StoreSharding
from store.state import RestoreMode, StoreState
from store.store import Store
from store.tuning import (
    ConsumerTuning,
    MaintenanceTuning,
    RestoreTuning,
    RetryTuning,
    RocksDBOptions,
    StoreTuning,
)

__all__ = [
    "MAX_SCAN_LIMIT",
    "ConsumerTuning",
    "CorruptionReport",
    "HistoryExpiredError",
    "HistoryNotKeptError",
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
    "UnknownIndexError",
]
