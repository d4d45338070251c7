"""How a store is tuned, one frozen dataclass per concern; the defaults suit most tables.

- :class:`RocksDBOptions`: the database's own settings (``store.table.engine``).
- :class:`ConsumerTuning`: how the topic is polled and watched (``store.kafka.source``,
  ``store.lifecycle.apply_loop``).
- :class:`RetryTuning`: the backoff between retries after a broker or disk problem
  (``store.lifecycle.materializer``).
- :class:`RestoreTuning`: bulk restores and the pacing of any restore (``store.lifecycle.bulkload``).
- :class:`MaintenanceTuning`: the periodic work of a READY store (``store.lifecycle.apply_loop``,
  ``store.table.verifier``).

:class:`StoreTuning` groups them, with the hot-key read cache (``store.table.replica``). The service's
``engine`` settings (``service.settings``) set some of them by the same field names.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True, slots=True)
class RocksDBOptions:
    """RocksDB settings of one store's database."""

    block_cache_bytes: int = 256 * 1024 * 1024  # cache of uncompressed data blocks
    write_buffer_bytes: int = 64 * 1024 * 1024  # one memtable; a full one is flushed to an SST file
    # One block cache of ``block_cache_bytes`` for every store of the process that shares it (and
    # their copies), instead of one per database: the stores read most get most of it.
    share_block_cache: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerTuning:
    """How the topic is read."""

    # Consumer batches: how many records one poll may return, and how long it may wait.
    poll_max_records: int = 10_000
    poll_timeout_seconds: float = 0.2
    # How often the topic's metadata is checked for deletion, recreation or new partitions.
    metadata_check_interval_seconds: float = 5.0
    # The Kafka client runs in a child process, so that a crash inside it ends that process, not
    # the reads (``store.kafka.child_source``); off, it runs in the store's own process.
    consumer_in_child_process: bool = True
    # How long past a request's own timeout that child may stay silent before the store reports it
    # (stopped, overloaded), and how long before it is killed and replaced.
    child_silence_seconds: float = 10.0
    child_answer_margin_seconds: float = 30.0


@dataclasses.dataclass(frozen=True, slots=True)
class RetryTuning:
    """Backoff between retries after a transient problem, growing up to the maximum."""

    backoff_initial_seconds: float = 0.2
    backoff_max_seconds: float = 10.0
    # Failed attempts to write after an I/O error (or a refusal of no known kind) before the store
    # is FAILED; a full volume is waited for without limit.
    write_error_attempts: int = 8


@dataclasses.dataclass(frozen=True, slots=True)
class RestoreTuning:
    """How a store restores: in bulk (worker processes writing SST files) or record by record."""

    # The bulk path is taken while at least this many records remain (0: never).
    bulk_load_min_records: int = 200_000
    # Records per SST file written by a bulk restore worker.
    bulk_load_chunk_records: int = 250_000
    # Worker processes of a bulk restore (each consumes its share of the partitions and writes its
    # own SST files); never more than the partitions with records left.
    bulk_load_workers: int = 3
    # While restoring, the cyclic garbage collector's first threshold is at least this (process
    # wide; see store.lifecycle.gc_pacing); 0 leaves it alone.
    gc_threshold: int = 30_000
    # How often restore progress is logged.
    progress_log_interval_seconds: float = 5.0


@dataclasses.dataclass(frozen=True, slots=True)
class MaintenanceTuning:
    """The periodic work of a READY store."""

    # How often it flushes its memtables, bounding what a crash makes it read again.
    checkpoint_interval_seconds: float = 30.0
    # How often a store that keeps history moves its floor and prunes old versions.
    history_prune_interval_seconds: float = 5.0
    # A store of natural keys drops the entries of a key deleted under every key schema id once
    # their newest time is this far behind every partition's newest record time
    # (``store.table.winners``; Kafka's ``delete.retention.ms`` default). Checked as often as history.
    natural_tombstone_grace_ms: int = 86_400_000
    # Background verification (``store.table.verifier``): the pause between passes that read the whole
    # served copy back with checksums verified (0 turns it off), and the most a pass reads a second.
    verify_interval_seconds: float = 3600.0
    verify_bytes_per_second: int = 16 * 1024 * 1024


_GROUPS = ("rocksdb", "consumer", "retry", "restore", "maintenance")


@dataclasses.dataclass(frozen=True, slots=True)
class StoreTuning:
    """Every tuning of one store, by concern."""

    rocksdb: RocksDBOptions = dataclasses.field(default_factory=RocksDBOptions)
    consumer: ConsumerTuning = dataclasses.field(default_factory=ConsumerTuning)
    retry: RetryTuning = dataclasses.field(default_factory=RetryTuning)
    restore: RestoreTuning = dataclasses.field(default_factory=RestoreTuning)
    maintenance: MaintenanceTuning = dataclasses.field(default_factory=MaintenanceTuning)
    # Entries of the hot-key read cache in front of RocksDB (0 disables it).
    read_cache_entries: int = 200_000

    def replace(self, **values: Any) -> StoreTuning:
        """A copy with the settings named changed; each is named by its field, whatever its group
        (``tuning.replace(block_cache_bytes=2**30, bulk_load_workers=6)``)."""
        changes: dict[str, Any] = {}
        for group in _GROUPS:
            current = getattr(self, group)
            mine = {name: values.pop(name) for name in _field_names(current) if name in values}
            if mine:
                changes[group] = dataclasses.replace(current, **mine)
        if "read_cache_entries" in values:
            changes["read_cache_entries"] = values.pop("read_cache_entries")
        if values:
            raise TypeError(f"no such tuning: {', '.join(sorted(values))}")
        return dataclasses.replace(self, **changes)


def _field_names(group: Any) -> list[str]:
    return [field.name for field in dataclasses.fields(group)]
