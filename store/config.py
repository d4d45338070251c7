"""Configuration of one store: what to materialize, where, and how to tune the engine."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from store.history import HistorySpec
from store.indexes import IndexSpec


@dataclasses.dataclass(frozen=True, slots=True)
class EngineTuning:
    """Knobs of the RocksDB engine and the materializer; the defaults suit most tables."""

    block_cache_bytes: int = 256 * 1024 * 1024
    write_buffer_bytes: int = 64 * 1024 * 1024
    # Consumer batches: how many records one poll may return, and how long it may wait.
    poll_max_records: int = 10_000
    poll_timeout_seconds: float = 0.2
    # Bootstrap uses the bulk-load (SST ingestion) path while at least this many records remain.
    bulk_load_min_records: int = 200_000
    # Records per SST file written by the bulk loader.
    bulk_load_chunk_records: int = 250_000
    # Worker processes of a bulk restore (each consumes its share of the partitions and writes its
    # own SST files); never more than the partitions with records left.
    bulk_load_workers: int = 3
    # While restoring, the cyclic garbage collector's first threshold is at least this (process
    # wide; see store.gc_pacing); 0 leaves it alone.
    restore_gc_threshold: int = 30_000
    # Transient broker errors: backoff between retries, growing up to the maximum.
    retry_backoff_initial_seconds: float = 0.2
    retry_backoff_max_seconds: float = 10.0
    # How often the topic's metadata is checked for deletion, recreation or new partitions.
    metadata_check_interval_seconds: float = 5.0
    # How often restore progress is logged.
    progress_log_interval_seconds: float = 5.0
    # How often a READY store flushes its memtables, bounding what a crash makes it re-read.
    checkpoint_interval_seconds: float = 30.0
    # Entries of the hot-key read cache in front of RocksDB (0 disables it).
    read_cache_entries: int = 200_000
    # How often a store that keeps history moves its floor and prunes old versions.
    history_prune_interval_seconds: float = 5.0
    # Background verification (store.verifier): the pause between passes that read the whole served
    # copy back with checksums verified (0 turns it off), and the most a pass reads per second.
    verify_interval_seconds: float = 3600.0
    verify_bytes_per_second: int = 16 * 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class StoreConfig:
    """One store: a compacted topic materialized into ``state_dir / name``.

    ``kafka`` holds librdkafka settings (``bootstrap.servers``, security settings, ...); they pass
    through as they are, except the few the materializer must own (no consumer group commits,
    no auto topic creation).
    """

    name: str
    topic: str
    kafka: Mapping[str, str] = dataclasses.field(repr=False)  # may hold credentials
    state_dir: Path
    tuning: EngineTuning = dataclasses.field(default_factory=EngineTuning)
    indexes: tuple[IndexSpec, ...] = ()
    history: HistorySpec | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kafka", MappingProxyType(dict(self.kafka)))
        object.__setattr__(self, "state_dir", Path(self.state_dir))
        object.__setattr__(self, "indexes", tuple(self.indexes))
        names = [index.name for index in self.indexes]
        if len(set(names)) != len(names):
            raise ValueError(f'store "{self.name}": index names must be unique, got {names}')

    @property
    def path(self) -> Path:
        """The store's own directory."""
        return self.state_dir / self.name
