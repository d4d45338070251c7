"""Reads as of an exact position, from snapshots of the table, its indexes and its history."""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from store.exceptions import IndexNotReadyError, ScanLimitError, UnknownIndexError
from store.protocol import MAX_SCAN_LIMIT, ScanPage
from store.table.corruption import entries
from store.table.history import choose_version, scan_versions
from store.table.history_keys import change_key, escape_prefix, unescape
from store.table.indexes import IndexSpec
from store.table.snapshot_reader import SnapshotReader, prefix_upper_bound
from wire.position import Position

# A scan page examines at most this many candidate keys per item asked, so a page over keys that
# mostly did not exist at the position still returns promptly (with a cursor to go on).
_CANDIDATES_PER_ITEM = 20


def iterate(iterator: Any, start: bytes, upper: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    """Entries in ``[start, upper)`` through an iterator pinned when the view was taken.

    A failed read raises ``StoreReadError`` rather than ending the entries early.
    """
    return entries(iterator, start, upper)


def historic_keys(history: Any, prefix: bytes, start: bytes | None = None) -> Iterator[bytes]:
    """The row keys starting with ``prefix`` that have versions, from ``start`` on, in byte order
    (repeated once per version)."""
    escaped = escape_prefix(prefix)
    history_start = escape_prefix(start) if start is not None and start > prefix else escaped
    return (unescape(key) for key, _ in iterate(history, history_start, prefix_upper_bound(escaped)))


@dataclasses.dataclass(frozen=True, slots=True)
class ViewParts:
    """What a view as of a position reads, all taken together while the store's lock holds writes
    back, so that every read sees the same version of every column family.

    ``latest``: the table's snapshot at the copy's position. ``history`` (point lookups),
    ``history_scan`` (prefix scans), ``changes`` and ``index`` (``None`` without indexes) are
    iterators of those column families (rocksdict's iterators read the version current when they
    are created). ``indexes`` are the ready indexes; ``building`` names the configured ones still
    being built. ``as_of`` names every partition of the copy.
    """

    latest: SnapshotReader
    history: Any
    history_scan: Any
    changes: Any
    index: Any
    indexes: Mapping[str, IndexSpec]
    as_of: Position
    building: Collection[str] = ()


class AsOfReader:
    """Implements ``ReadOnlyKeyValueStore`` as of ``parts.as_of`` (which must be at or above the
    floor), from the :class:`ViewParts` taken with the view.

    One view's reads must not run on two threads at once: they share the iterators.
    """

    def __init__(self, parts: ViewParts) -> None:
        self._latest = parts.latest
        self._history = parts.history
        self._history_scan = parts.history_scan
        self._changes = parts.changes
        self._index = parts.index
        self._indexes = parts.indexes
        self._as_of = parts.as_of
        self._building = parts.building

    def release(self) -> None:
        self._latest.release()
        self._history = self._history_scan = self._changes = self._index = None

    def get(self, key: bytes) -> bytes | None:
        return self.get_many((key,))[0]

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        values: list[bytes | None] = []
        unversioned: list[int] = []
        for i, key in enumerate(keys):
            found, value = choose_version(scan_versions(self._history, key), self._as_of)
            values.append(value)
            if not found:
                unversioned.append(i)
        if unversioned:
            # Never written since history began: the current value is the value at the position.
            current = self._latest.get_many([keys[i] for i in unversioned])
            for i, value in zip(unversioned, current, strict=True):
                values[i] = value
        return values

    def prefix_scan(self, prefix: bytes, *, after: bytes | None = None, limit: int = 1000) -> ScanPage:
        if limit < 1:
            raise ScanLimitError(f"scan limit must be at least 1, got {limit}")
        limit = min(limit, MAX_SCAN_LIMIT)
        start = prefix if after is None or after < prefix else after + b"\x00"
        current_keys = (key for key, _ in iterate(self._latest.iterator, start, prefix_upper_bound(prefix)))
        items: list[tuple[bytes, bytes]] = []
        examined = 0
        previous: bytes | None = None
        for key in heapq.merge(current_keys, historic_keys(self._history_scan, prefix, start)):
            if key == previous or key < start:
                continue
            previous = key
            value = self.get(key)
            examined += 1
            if value is not None:
                if len(items) == limit:
                    return ScanPage(items, items[-1][0])
                items.append((key, value))
            if examined >= limit * _CANDIDATES_PER_ITEM:
                return ScanPage(items, key)
        return ScanPage(items, None)

    def index_scan(
        self, index: str, value: bytes, *, after: bytes | None = None, limit: int = 1000
    ) -> ScanPage:
        spec = self._indexes.get(index)
        if spec is None:
            if index in self._building:
                raise IndexNotReadyError(index)
            raise UnknownIndexError(index, sorted([*self._indexes, *self._building]))
        if limit < 1:
            raise ScanLimitError(f"scan limit must be at least 1, got {limit}")
        limit = min(limit, MAX_SCAN_LIMIT)
        ordered = sorted(key for key in self._index_candidates(spec, value) if after is None or key > after)
        items: list[tuple[bytes, bytes]] = []
        for start in range(0, len(ordered), 1000):
            keys = ordered[start : start + 1000]
            for key, row in zip(keys, self.get_many(keys), strict=True):
                if row is not None and spec.extract(row) == value:
                    if len(items) == limit:
                        return ScanPage(items, items[-1][0])
                    items.append((key, row))
        return ScanPage(items, None)

    def _index_candidates(self, spec: IndexSpec, value: bytes) -> set[bytes]:
        """Rows that have the value now, and rows changed since the position (they may have had it)."""
        value_prefix = spec.value_prefix(value)
        candidates = {
            key[len(value_prefix) :]
            for key, _ in iterate(self._index, value_prefix, prefix_upper_bound(value_prefix))
        }
        for partition, next_offset in self._as_of.items():
            changed = iterate(self._changes, change_key(partition, next_offset), change_key(partition + 1, 0))
            candidates.update(row_key for _, row_key in changed)
        return candidates

    def position(self) -> Position:
        return self._as_of
