"""An in-memory store implementing the same read protocols as the RocksDB store.

It backs unit tests of the layers above the engine and the store contract suite; it is not
materialized from Kafka: tests and embedders write to it with :meth:`InMemoryStore.apply`.
"""

from __future__ import annotations

import bisect
import contextlib
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from store.exceptions import (
    HistoryExpiredError,
    HistoryNotKeptError,
    PositionNotReachedError,
    ScanLimitError,
    StoreClosedError,
    TimeExpiredError,
    UnknownIndexError,
)
from store.json_values import checked_json
from store.lifecycle.listeners import ListenedCondition
from store.protocol import (
    MAX_SCAN_LIMIT,
    CorruptionReport,
    HistoryRows,
    IndexStatus,
    ReadOnlyKeyValueStore,
    ScanPage,
    ShardingStatus,
    StoreStatus,
)
from store.state import StoreState
from store.table.history import HistorySpec
from store.table.indexes import IndexSpec
from wire.position import Position


def _scan_sorted(
    keys: Sequence[bytes], values: Mapping[bytes, bytes], prefix: bytes, after: bytes | None, limit: int
) -> ScanPage:
    if limit < 1:
        raise ScanLimitError(f"scan limit must be at least 1, got {limit}")
    limit = min(limit, MAX_SCAN_LIMIT)
    start = prefix if after is None or after < prefix else after
    index = (
        bisect.bisect_right(keys, start)
        if after is not None and after >= prefix
        else bisect.bisect_left(keys, start)
    )
    items: list[tuple[bytes, bytes]] = []
    while index < len(keys) and keys[index].startswith(prefix):
        if len(items) == limit:
            return ScanPage(items, items[-1][0])
        items.append((keys[index], values[keys[index]]))
        index += 1
    return ScanPage(items, None)


class _FrozenView:
    def __init__(
        self, data: dict[bytes, bytes], position: Position, indexes: Mapping[str, IndexSpec]
    ) -> None:
        self._data = data
        self._keys = sorted(data)
        self._position = position
        self._indexes = indexes

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return [self._data.get(k) for k in keys]

    def prefix_scan(self, prefix: bytes, *, after: bytes | None = None, limit: int = 1000) -> ScanPage:
        return _scan_sorted(self._keys, self._data, prefix, after, limit)

    def index_scan(
        self, index: str, value: bytes, *, after: bytes | None = None, limit: int = 1000
    ) -> ScanPage:
        spec = self._indexes.get(index)
        if spec is None:
            raise UnknownIndexError(index, sorted(self._indexes))
        matches = {k: v for k, v in self._data.items() if spec.extract(v) == value}
        return _scan_sorted(sorted(matches), matches, b"", after, limit)

    def position(self) -> Position:
        return self._position


_Version = tuple[int, int, bytes, bytes | None, int]  # partition, offset, key, value, timestamp


def _values_at(versions: Sequence[_Version], at: int) -> dict[bytes, bytes]:
    """Each key's value as of time ``at``: its record with the greatest (timestamp, offset) at or
    below it, absent when that is a tombstone."""
    best: dict[bytes, tuple[int, int, bytes | None]] = {}
    for _partition, offset, key, value, timestamp in versions:
        if timestamp <= at:
            current = best.get(key)
            if current is None or (timestamp, offset) > current[:2]:
                best[key] = (timestamp, offset, value)
    return {key: value for key, (_t, _o, value) in best.items() if value is not None}


class _TimedView(_FrozenView):
    """The table as of time ``at``; ``get_many_at`` reads each key as of its own time."""

    def __init__(
        self,
        versions: list[_Version],
        position: Position,
        indexes: Mapping[str, IndexSpec],
        at: int,
        check_time: Callable[[int], None],
        time_floor: int | None = None,
    ) -> None:
        super().__init__(_values_at(versions, at), position, indexes)
        self._versions = versions
        self._check_time = check_time
        self._at = at
        self._time_floor = time_floor

    def get_many_at(self, keys: Sequence[bytes], times: Sequence[int]) -> list[bytes | None]:
        tables = {self._at: self._data}
        for at in set(times) - tables.keys():
            self._check_time(at)
            tables[at] = _values_at(self._versions, at)
        return [tables[at].get(key) for key, at in zip(keys, times, strict=True)]

    def history_page(self, after: bytes | None, limit: int, max_bytes: int) -> HistoryRows | None:
        """Every key's versions, newest first, whole keys of about ``limit`` rows a page (this
        store keeps every record since offset 0: no base versions, nothing unsettled)."""
        by_key: dict[bytes, list[_Version]] = {}
        for version in self._versions:
            by_key.setdefault(version[2], []).append(version)
        keys, rows = _whole_keys(by_key, after, limit)
        values = [value for _p, _o, _k, value, _t in rows]
        if sum(len(value) for value in values if value is not None) > max_bytes:
            return None
        more = any(k > keys[-1] for k in by_key) if keys else False
        return HistoryRows(
            keys,
            np.asarray([len(by_key[key]) for key in keys], np.int64),
            np.asarray([timestamp for *_, timestamp in rows], np.int64),
            values,
            np.zeros(len(rows), np.bool_),
            keys[-1] if more else None,
            self._time_floor,
        )


def _whole_keys(
    by_key: dict[bytes, list[_Version]], after: bytes | None, limit: int
) -> tuple[list[bytes], list[_Version]]:
    """The keys after ``after`` whose versions make about ``limit`` rows, and those rows, each
    key's newest first (ties: newest offset, then lowest partition)."""
    keys: list[bytes] = []
    rows: list[_Version] = []
    for key in sorted(k for k in by_key if after is None or k > after):
        if keys and len(rows) + len(by_key[key]) > limit:
            break
        keys.append(key)
        rows += sorted(by_key[key], key=lambda v: (-v[4], -v[1], v[0]))
    return keys, rows


class InMemoryStore:
    """A dict-backed ``ServableStore``; every view is a copy-on-write snapshot.

    ``sharding`` is what its status reports about shards (a test sets it; by default one shard of
    a topic whose partition count is not known); the store itself holds
    whatever is applied to it. History is kept from the start with ``keeps_history`` or ``history``;
    of a ``history`` spec only ``retention_offsets`` applies. Views ``at_time`` are answered while
    every record was applied with its timestamp (``apply(records, timestamps)``); the time floor is
    the greatest timestamp of a record below the history floor, as pruning leaves it in the real store.
    """

    def __init__(
        self,
        name: str,
        topic: str | None = None,
        state: StoreState = StoreState.READY,
        indexes: Sequence[IndexSpec] = (),
        keeps_history: bool = False,
        sharding: ShardingStatus | None = None,
        history: HistorySpec | None = None,
        json_values: bool = False,
    ) -> None:
        self._name = name
        # Values checked as JSON when applied, as a ``json`` store's are (``store.json_values``).
        self._json_values = json_values
        # As the real store: unsharded is one shard holding every partition.
        self.sharding = sharding or ShardingStatus(
            shards=1, shard=0, partitioner="murmur2", topic_partitions=None
        )
        self._indexes = {spec.name: spec for spec in indexes}
        self._topic = topic or name
        self._state = state
        self._data: dict[bytes, bytes] = {}
        self._position = Position()
        self._frozen: _FrozenView | None = None
        self._changed = ListenedCondition()
        self._applied = 0
        self._copy = secrets.token_hex(8)
        self._applies = 0  # calls of ``apply``: records may be applied at any offsets here
        self._log: list[tuple[int, int, bytes, bytes | None]] = []
        self._times: list[int | None] = []  # parallel to ``_log``
        self.keeps_history = keeps_history or history is not None
        self._retention_offsets = history.retention_offsets if history is not None else None

    @property
    def name(self) -> str:
        return self._name

    @property
    def state(self) -> StoreState:
        return self._state

    @property
    def readable(self) -> bool:
        return self._state is StoreState.READY

    @property
    def corruption(self) -> CorruptionReport | None:
        return None  # nothing on disk to go bad

    def set_state(self, state: StoreState) -> None:
        with self._changed:
            self._state = state
            self._changed.notify_all()

    def apply(
        self, records: Sequence[tuple[int, int, bytes, bytes | None]], timestamps: Sequence[int] | None = None
    ) -> None:
        """Apply ``(partition, offset, key, value)`` records atomically; ``None`` values delete
        (checked as JSON first when the store was made with ``json_values``).

        ``timestamps``: each record's timestamp (epoch ms), parallel to ``records``."""
        if self._json_values:
            values = checked_json([value for _, _, _, value in records])
            records = [(p, o, k, v) for (p, o, k, _), v in zip(records, values, strict=True)]
        with self._changed:
            data = dict(self._data)
            offsets = dict(self._position)
            for partition, offset, key, value in records:
                if value is None:
                    data.pop(key, None)
                else:
                    data[key] = value
                offsets[partition] = max(offsets.get(partition, 0), offset + 1)
            self._data, self._position, self._frozen = data, Position(offsets), None
            if self.keeps_history:
                self._log.extend(records)
                self._times.extend([None] * len(records) if timestamps is None else timestamps)
            self._applied += len(records)
            self._applies += 1
            self._changed.notify_all()

    @contextlib.contextmanager
    def view(
        self, as_of: Position | None = None, at_time: int | None = None
    ) -> Iterator[ReadOnlyKeyValueStore]:
        with self._changed:
            if self._state is StoreState.STOPPED:
                raise StoreClosedError(f'store "{self._name}" is stopped')
            frozen: _FrozenView
            if at_time is not None:
                frozen = self._view_at_time(as_of, at_time)
            elif as_of is not None:
                frozen = self._view_as_of(as_of)
            else:
                if self._frozen is None:
                    self._frozen = _FrozenView(self._data, self._position, self._indexes)
                frozen = self._frozen
        yield frozen

    def latest(self, key: bytes) -> tuple[bytes | None, Position]:
        # Through ``view``, which stores made for tests override.
        with self.view() as view:
            return view.get(key), view.position()

    def _view_as_of(self, as_of: Position) -> _FrozenView:
        if not self.keeps_history:
            raise HistoryNotKeptError(f'store "{self._name}" keeps no history')
        if not self._position.reaches(as_of):
            raise PositionNotReachedError(f'store "{self._name}" is at {self._position}, not yet at {as_of}')
        floor = self.history_floor()
        if floor is not None and not Position({p: as_of.get(p, 0) for p in self._position}).reaches(floor):
            raise HistoryExpiredError(self._name, as_of, floor)
        data: dict[bytes, bytes] = {}
        for partition, offset, key, value in self._log:
            if offset < as_of.get(partition, 0):
                if value is None:
                    data.pop(key, None)
                else:
                    data[key] = value
        return _FrozenView(data, Position({p: as_of.get(p, 0) for p in self._position}), self._indexes)

    def _view_at_time(self, as_of: Position | None, at: int) -> _TimedView:
        position = self._view_as_of(self._position if as_of is None else as_of).position()
        floor = self._time_floor()

        def check_time(time: int) -> None:
            if floor is None or time < floor:
                raise TimeExpiredError(self._name, time, floor)

        check_time(at)
        versions = [
            (partition, offset, key, value, timestamp)
            for (partition, offset, key, value), timestamp in zip(self._log, self._times, strict=True)
            if offset < position.get(partition, 0) and timestamp is not None
        ]
        return _TimedView(versions, position, self._indexes, at, check_time, floor)

    def _time_floor(self) -> int | None:
        """The oldest time answered exactly; ``None`` when a record came without its timestamp."""
        if None in self._times:
            return None
        floor = self.history_floor() or Position()
        below = [
            t
            for (partition, offset, _k, _v), t in zip(self._log, self._times, strict=True)
            if offset < floor.get(partition, 0) and t is not None
        ]
        return max(below, default=-(2**63))

    def history_floor(self) -> Position | None:
        if not self.keeps_history:
            return None
        kept = self._retention_offsets
        return Position({p: 0 if kept is None else max(0, n - kept) for p, n in self._position.items()})

    def status(self) -> StoreStatus:
        with self._changed:
            return StoreStatus(
                name=self._name,
                topic=self._topic,
                state=self._state,
                position=self._position,
                end_offsets=self._position,
                lag=dict.fromkeys(self._position, 0),
                restore=None,
                records_applied_total=self._applied,
                null_key_records=0,
                approximate_num_keys=len(self._data),
                counted_keys=len(self._data),
                counted_keys_position=self._position,
                size_on_disk_bytes=0,
                last_error=None,
                seconds_since_last_contact=None,
                indexes={
                    name: IndexStatus(field=spec.field, state="ready", rows_indexed=None)
                    for name, spec in self._indexes.items()
                },
                sharding=self.sharding,
                # Records may be applied here at any offsets, so every apply names a new copy.
                copy_id=f"{self._copy}.{self._applies}",
            )

    def position(self) -> Position:
        return self._position

    def wait_for_position(self, minimum: Position, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self._position.reaches(minimum), timeout)

    def add_listener(self, listener: Callable[[], None]) -> Callable[[], None]:
        return self._changed.add_listener(listener)

    def stop(self) -> None:
        self.set_state(StoreState.STOPPED)
