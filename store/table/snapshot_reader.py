"""Reads from one RocksDB snapshot of a store's table: point reads and bounded, byte-ordered scans."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import rocksdict

from store.exceptions import ScanLimitError, StoreClosedError, UnknownIndexError
from store.protocol import MAX_SCAN_LIMIT, ScanPage
from store.table.corruption import check_status, is_absent, read_error
from store.table.indexes import IndexSpec
from wire.position import Position


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (``None``: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class _ReleasedSnapshot:
    def __getitem__(self, key: bytes) -> bytes:
        raise StoreClosedError("this view has ended; take a new one with store.view()")

    def iter(self, read_options: object = None) -> Any:
        raise StoreClosedError("this view has ended; take a new one with store.view()")

    def seek(self, key: bytes) -> None:
        raise StoreClosedError("this view has ended; take a new one with store.view()")


class SnapshotReader:
    """Reads from one RocksDB snapshot; implements ``ReadOnlyKeyValueStore``."""

    __slots__ = ("_index_iterator", "_index_snapshot", "_indexes", "_iterator", "_position", "_snapshot")

    def __init__(
        self,
        snapshot: rocksdict.Snapshot | _ReleasedSnapshot,
        position: Position,
        index_snapshot: rocksdict.Snapshot | _ReleasedSnapshot | None = None,
        indexes: Mapping[str, IndexSpec] | None = None,
    ) -> None:
        self._snapshot = snapshot
        self._position = position
        self._index_snapshot = index_snapshot
        self._indexes = indexes or {}
        # rocksdict's Snapshot.iter() drops the snapshot and iterates the live database; an
        # iterator reads the version current when it is created, so scans use iterators made now,
        # while the store lock holds writes back.
        self._iterator: Any = snapshot.iter()
        self._index_iterator: Any = index_snapshot.iter() if index_snapshot is not None else None

    @property
    def iterator(self) -> Any:
        """The table iterator pinned when this view was taken (re-seek it; never share threads)."""
        return self._iterator

    def release(self) -> None:
        """Drop the snapshot so the database can close; later reads raise ``StoreClosedError``."""
        self._snapshot = _ReleasedSnapshot()
        self._index_snapshot = _ReleasedSnapshot()
        self._iterator = self._index_iterator = _ReleasedSnapshot()

    def get(self, key: bytes) -> bytes | None:
        return self.get_many((key,))[0]

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values in request order, ``None`` only for absent keys; ``StoreReadError`` if a read failed."""
        snapshot = self._snapshot
        values: list[bytes | None] = []
        append = values.append
        for key in keys:
            try:
                append(snapshot[key])
            except StoreClosedError:
                raise
            except Exception as exc:  # rocksdict raises a bare Exception for absence and failure alike
                if not is_absent(exc):
                    raise read_error(exc) from exc
                append(None)
        return values

    def prefix_scan(self, prefix: bytes, *, after: bytes | None = None, limit: int = 1000) -> ScanPage:
        return ScanPage(*_scan(self._iterator, prefix, after, limit, lambda key: key))

    def index_scan(
        self, index: str, value: bytes, *, after: bytes | None = None, limit: int = 1000
    ) -> ScanPage:
        spec = self._indexes.get(index)
        if spec is None or self._index_iterator is None:
            raise UnknownIndexError(index, sorted(self._indexes))
        value_prefix = spec.value_prefix(value)
        start_after = None if after is None else value_prefix + after
        entries, next_after = _scan(
            self._index_iterator, value_prefix, start_after, limit, lambda key: key[len(value_prefix) :]
        )
        row_keys = [row_key for row_key, _ in entries]
        rows = self.get_many(row_keys)
        # Index and rows come from snapshots taken together, so every entry has its row.
        items = [(k, v) for k, v in zip(row_keys, rows, strict=True) if v is not None]
        return ScanPage(items, next_after)

    def position(self) -> Position:
        return self._position


def _scan(
    iterator: Any, prefix: bytes, after: bytes | None, limit: int, key_of: Callable[[bytes], bytes]
) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
    """One bounded, byte-ordered page of keys starting with ``prefix``, strictly after ``after``."""
    if limit < 1:
        raise ScanLimitError(f"scan limit must be at least 1, got {limit}")
    limit = min(limit, MAX_SCAN_LIMIT)
    iterator.seek(prefix if after is None or after < prefix else after + b"\x00")
    items: list[tuple[bytes, bytes]] = []
    while iterator.valid():
        key = iterator.key()
        if not key.startswith(prefix):
            break
        if len(items) == limit:
            return items, items[-1][0]
        items.append((key_of(key), iterator.value()))
        iterator.next()
    # An iterator also stops on a failed read: without this check a corrupt block ends the page early.
    check_status(iterator)
    return items, None
