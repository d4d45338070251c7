"""A view of the table's current state that answers from the copy's hot-key cache when that is exact.

The cache is exact under the owning store's lock and the copy's generation (``store.table.hot_keys``):
a view taken at one generation asks the cache only while no write came since, else its snapshot.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

from store.exceptions import IndexNotReadyError
from store.protocol import ScanPage
from store.table.hot_keys import read_misses
from store.table.snapshot_reader import SnapshotReader
from wire.position import Position


class HotKeyCopy(Protocol):
    """What a cached view asks of its copy (``store.table.replica.Replica``)."""

    @property
    def indexes(self) -> Collection[str]:
        """The configured indexes, by name."""
        ...

    @property
    def ready_indexes(self) -> Collection[str]:
        """The indexes ready to answer, by name."""
        ...

    @property
    def caches_hot_keys(self) -> bool:
        """Whether the copy keeps a hot-key cache at all."""
        ...

    def cache_lookup(self, generation: int, keys: Sequence[bytes]) -> tuple[list[object], bool] | None:
        """The cache's values and whether it had every key; ``None`` once past ``generation``."""
        ...

    def cache_fill(
        self, generation: int, keys: Sequence[bytes], values: Sequence[bytes | None], asked: int
    ) -> None:
        """Offer values read at ``generation`` to the cache."""
        ...


class CachedReader:
    """A snapshot reader that answers from the replica's hot-key cache when that is exact."""

    __slots__ = ("_generation", "_reader", "_ready_indexes", "_replica")

    def __init__(self, replica: HotKeyCopy, reader: SnapshotReader, generation: int) -> None:
        self._replica = replica
        self._reader = reader
        self._generation = generation
        # The indexes ready when the view was taken: the ones its index snapshot can answer.
        self._ready_indexes = frozenset(replica.ready_indexes)

    def release(self) -> None:
        self._reader.release()

    def get(self, key: bytes) -> bytes | None:
        return self.get_many((key,))[0]

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        replica = self._replica
        if not replica.caches_hot_keys:
            return self._reader.get_many(keys)
        found = replica.cache_lookup(self._generation, keys)
        if found is None:
            return self._reader.get_many(keys)
        cached, complete = found
        if complete:
            return cached  # type: ignore[return-value]  # no MISS among them: values only
        values, missing_keys, fetched = read_misses(keys, cached, self._reader.get_many)
        if missing_keys:
            replica.cache_fill(self._generation, missing_keys, fetched, len(keys))
        return values

    def prefix_scan(self, prefix: bytes, *, after: bytes | None = None, limit: int = 1000) -> ScanPage:
        return self._reader.prefix_scan(prefix, after=after, limit=limit)

    def index_scan(
        self, index: str, value: bytes, *, after: bytes | None = None, limit: int = 1000
    ) -> ScanPage:
        """Rows whose indexed field equals ``value``, byte-ordered by row key, bounded like scans."""
        if index in self._replica.indexes and index not in self._ready_indexes:
            raise IndexNotReadyError(index)
        return self._reader.index_scan(index, value, after=after, limit=limit)

    def position(self) -> Position:
        return self._reader.position()
