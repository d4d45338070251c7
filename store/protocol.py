"""The seams between the store and its readers.

Readers (the HTTP service, an embedding application) depend on these protocols, never on RocksDB.
Only the materializer writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from store.freshness import FreshnessSnapshot
from store.state import RestoreMode, StoreState
from wire.position import Position

FoundBy = Literal["read", "verification", "materializer"]
"""What found a copy corrupt: a read, the background verification, or the materializer."""


@dataclasses.dataclass(frozen=True, slots=True)
class CorruptionReport:
    """Corruption (or an I/O error) found in a store's copy; that copy answers no read any more."""

    detail: str  # RocksDB's message
    file: str | None  # the file the message names, if any
    found_by: FoundBy
    found_at: float  # Unix time


MAX_SCAN_LIMIT = 10_000
"""The largest page a prefix scan returns, whatever is asked: scans are always bounded."""


@dataclasses.dataclass(frozen=True, slots=True)
class ScanPage:
    """One page of a prefix scan, in byte order of the keys.

    ``next_after`` is the cursor for the next page (pass it as ``after``), or ``None`` when the
    prefix has no more keys.
    """

    items: list[tuple[bytes, bytes]]
    next_after: bytes | None


@runtime_checkable
class ReadOnlyKeyValueStore(Protocol):
    """Reads over one consistent view of a store: every call sees the same version of the table."""

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or ``None`` when the key is absent."""
        ...

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """The values of ``keys`` in request order, ``None`` for absent keys."""
        ...

    def prefix_scan(self, prefix: bytes, *, after: bytes | None = None, limit: int = 1000) -> ScanPage:
        """Keys starting with ``prefix`` that sort strictly after ``after``, byte-ordered.

        At most ``min(limit, MAX_SCAN_LIMIT)`` items are returned.
        """
        ...

    def index_scan(
        self, index: str, value: bytes, *, after: bytes | None = None, limit: int = 1000
    ) -> ScanPage:
        """Rows whose indexed field equals ``value`` (see ``store.table.indexes``), byte-ordered by row key.

        ``after`` is a row key cursor. Raises ``UnknownIndexError`` or ``IndexNotReadyError``.
        """
        ...

    def position(self) -> Position:
        """The position (next offset per partition) this view reflects."""
        ...


@runtime_checkable
class TimedKeyValueStore(ReadOnlyKeyValueStore, Protocol):
    """A view taken with ``at_time``: it also reads each key as of its own time."""

    def get_many_at(self, keys: Sequence[bytes], times: Sequence[int]) -> list[bytes | None]:
        """The value of each key as of its own time (epoch ms, ``times`` parallel to ``keys``).

        Raises ``TimeExpiredError`` for a time below the store's time floor.
        """
        ...

    def history_page(self, after: bytes | None, limit: int, max_bytes: int) -> HistoryRows | None:
        """The rows of the keys after ``after`` that answer each of them as of any time at or above
        the time floor (``store.table.history_scan``), about ``limit`` of them, whole keys only;
        ``None`` once their values pass ``max_bytes``."""
        ...


EVERY_TIME = -(2**63)
"""The time of a history row that counts for every time (``HistoryRows``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class HistoryRows:
    """One page of a store's history, read to answer its keys as of any time (a point-in-time join
    reading the store whole).

    ``keys`` in byte order; ``counts`` how many rows each has; then one entry a row, each key's rows
    together, newest first: ``times`` (epoch ms, ``EVERY_TIME``: every time),
    ``values`` (``None``: absent) and ``unsettled``. As of time ``T`` a key's answer is its first row
    whose time is at or below ``T`` (none: absent); an unsettled one is refused (``TimeExpiredError``).
    ``next_after``: the cursor of the next page (``None``: the last page). ``time_floor``: the
    oldest time the rows answer (``None``: none).
    """

    keys: list[bytes]
    counts: npt.NDArray[np.int64]
    times: npt.NDArray[np.int64]
    values: list[bytes | None]
    unsettled: npt.NDArray[np.bool_]
    next_after: bytes | None
    time_floor: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class RestoreProgress:
    """How far the store is towards the end offsets sampled when it (re)started restoring."""

    records_applied: int  # records applied since this restore began
    records_remaining: int  # records still below the sampled end offsets
    records_per_second: float  # recent apply rate
    target: Position  # the end offsets being restored to
    mode: RestoreMode = RestoreMode.RECORDS

    @property
    def progress(self) -> float:
        """The share of this restore done, from 0 to 1: records applied over applied plus remaining.

        Remaining records are counted in offsets, which also count the records compaction removed
        from the topic: the share errs low, never high.
        """
        total = self.records_applied + self.records_remaining
        return 1.0 if total <= 0 else self.records_applied / total

    @property
    def eta_seconds(self) -> float | None:
        """Seconds until the target at the recent rate; ``None`` while nothing moves (waiting, no rate)
        or while the restored files are merged or read into the cache (``compacting``, ``warming``:
        no records left, READY not yet)."""
        if self.mode in (RestoreMode.COMPACTING, RestoreMode.WARMING):
            return None
        if self.records_remaining <= 0:
            return 0.0
        if self.mode is RestoreMode.WAITING or self.records_per_second <= 0:
            return None
        return self.records_remaining / self.records_per_second


@dataclasses.dataclass(frozen=True, slots=True)
class MemoryUsage:
    """What a store holds in memory now, against what it was configured with."""

    block_cache_capacity_bytes: int  # RocksDB's block cache, as configured
    block_cache_usage_bytes: int  # of which in use
    memtable_bytes: int  # writes not yet flushed, every column family
    read_cache_entries: int  # hot keys cached in front of RocksDB
    timeline_entries: int = 0  # hot keys whose versions are kept for reads as of a time
    timeline_bytes: int = 0  # the fields and values those versions hold

    def __add__(self, other: MemoryUsage) -> MemoryUsage:
        return MemoryUsage(
            self.block_cache_capacity_bytes + other.block_cache_capacity_bytes,
            self.block_cache_usage_bytes + other.block_cache_usage_bytes,
            self.memtable_bytes + other.memtable_bytes,
            self.read_cache_entries + other.read_cache_entries,
            self.timeline_entries + other.timeline_entries,
            self.timeline_bytes + other.timeline_bytes,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class IndexStatus:
    """One secondary index: the field it covers, and whether it can be read yet."""

    field: str
    state: str  # "building" or "ready"
    rows_indexed: int | None  # progress while building


@dataclasses.dataclass(frozen=True, slots=True)
class ShardingStatus:
    """Which of its topic's partitions a store materializes, and whether its records sit where their
    keys hash to: a sharded store's clients find a key on the shard of the partition it hashes to.

    The store holds the partitions ``p`` with ``p % shards == shard`` (one shard: every partition);
    with ``by_natural_key`` it reads every partition and holds the natural keys whose own bytes hash
    to a partition of its shard (keys written through the Schema Registry). ``records_checked``
    counts the records whose partition was compared with the one their key hashes to under
    ``partitioner``; ``misplaced_records`` those that differ.
    """

    shards: int
    shard: int
    partitioner: str
    topic_partitions: int | None  # the topic's partition count; None until its metadata was read
    records_checked: int = 0
    misplaced_records: int = 0
    # Keys stored by natural value, kept by the shard their natural bytes hash to: every partition read.
    by_natural_key: bool = False

    def holds(self, partition: int) -> bool:
        return self.by_natural_key or partition % self.shards == self.shard

    @property
    def partitions(self) -> tuple[int, ...]:
        """The topic's partitions this store materializes (none while the count is unknown)."""
        return tuple(p for p in range(self.topic_partitions or 0) if self.holds(p))


@dataclasses.dataclass(frozen=True, slots=True)
class StoreStatus:
    """Everything an operator or the service wants to know about one store, at one moment."""

    name: str
    topic: str
    state: StoreState
    position: Position
    end_offsets: Position  # the latest high watermarks known (from fetch responses)
    lag: dict[int, int]  # per partition: end offset minus next offset, never negative
    restore: RestoreProgress | None  # None once READY
    records_applied_total: int  # since this process opened the store
    null_key_records: int  # records skipped because their key was null
    approximate_num_keys: int
    size_on_disk_bytes: int
    last_error: str | None  # the most recent transient problem (broker unreachable, ...), if any
    seconds_since_last_contact: float | None  # since the broker last answered a fetch
    indexes: dict[str, IndexStatus] = dataclasses.field(default_factory=dict)
    stale: bool = False  # reads are answered from the last good copy while a rebuild runs
    memory: MemoryUsage | None = None  # every open copy (two while a rebuild runs)
    corruption: CorruptionReport | None = None  # why the served copy answers no read, until replaced
    corruptions_found: int = 0  # copies found corrupt since this process opened the store
    verification_passes: int = 0  # background verification passes completed without finding any
    sharding: ShardingStatus | None = None  # None: the store does not say (it holds every partition)
    freshness: FreshnessSnapshot | None = None  # record timestamp to visible, per batch (store.freshness)
    # values stored as undecodable since the process opened the store (store.formats)
    undecodable_values: int = 0
    # Keys holding a value, counted exactly at ``counted_keys_position`` (store.table.key_count);
    # None until the first count. Counted again once the records applied since pass a quarter of it.
    counted_keys: int | None = None
    counted_keys_position: Position | None = None
    # Names the served copy of the table as opened by this process: the same ``copy_id`` at the same
    # ``position`` holds the same rows. A rebuild, a reopen or a restart gives a new one ("": none).
    copy_id: str = ""

    @property
    def total_lag(self) -> int:
        return sum(self.lag.values())


@runtime_checkable
class ServableStore(Protocol):
    """A store the service can serve: consistent views, status and position waits."""

    @property
    def name(self) -> str: ...

    @property
    def state(self) -> StoreState: ...

    @property
    def readable(self) -> bool:
        """Whether reads get answers now: READY, or REBUILDING while a last good copy is served."""
        ...

    @property
    def corruption(self) -> CorruptionReport | None:
        """Why the served copy answers no read (a read of it failed), until a rebuilt copy replaces it."""
        ...

    def view(
        self, as_of: Position | None = None, at_time: int | None = None
    ) -> AbstractContextManager[ReadOnlyKeyValueStore]:
        """A consistent read view (a RocksDB snapshot and the position it reflects).

        With ``at_time`` (epoch ms) it answers as of that time (``store.table.timed``; it then also has
        ``get_many_at(keys, times)``). With ``as_of`` the view answers as of exactly that position; raises
        ``HistoryNotKeptError``, ``PositionNotReachedError`` or ``HistoryExpiredError`` when it
        cannot. Raises ``StoreClosedError`` once the store is stopped, ``StoreReadError`` while the
        served copy is corrupt; a read through the view raises ``StoreReadError`` when it fails
        for any reason but "not found".
        """
        ...

    def latest(self, key: bytes) -> tuple[bytes | None, Position]:
        """The value of ``key`` now (``None``: absent) and the position it is the value at: what a
        view's ``get`` and ``position`` answer, without taking a view. Raises as ``view`` and a
        view's read do."""
        ...

    def history_floor(self) -> Position | None:
        """The oldest position an ``as_of`` view answers exactly (None: no history kept)."""
        ...

    def status(self) -> StoreStatus: ...

    def position(self) -> Position:
        """The position reads see now (no view is taken)."""
        ...

    def wait_for_position(self, minimum: Position, timeout: float) -> bool:
        """Block until the store's position reaches ``minimum``; ``False`` if ``timeout`` passes first."""
        ...

    def add_listener(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every change of the store (a write, a state change, ...);
        returns the function that removes it.

        For waiters that cannot block a thread (an event loop): it runs on the thread making the
        change, with the store's lock held, so it must return at once and may read only
        ``position()`` and ``state``. It may also be called when nothing a reader sees changed.
        """
        ...
