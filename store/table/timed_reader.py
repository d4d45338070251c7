"""A view answering as of a time (``store.table.timed``), on the snapshots an ``as_of`` view takes."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from store.exceptions import TimeExpiredError
from store.table import timed
from store.table.asof import AsOfReader, historic_keys
from store.table.engine import SnapshotReader
from store.table.history import parse_version, scan_versions
from store.table.indexes import IndexSpec
from wire.position import Position


class TimedReader(AsOfReader):
    """Every read answers as of ``at_time`` (epoch ms), counting only records below ``as_of``.

    ``get_many_at`` takes one time per key. Every time asked must be at or above the time floor
    of ``bounds`` (checked when the view is taken for ``at_time``, and here for the others).
    """

    def __init__(
        self,
        latest: SnapshotReader,
        history: Any,
        history_scan: Any,
        changes: Any,
        index: Any,
        indexes: Mapping[str, IndexSpec],
        as_of: Position,
        *,
        building: Collection[str] = (),
        at_time: int,
        bounds: timed.TimeBounds,
        store: str,
    ) -> None:
        super().__init__(latest, history, history_scan, changes, index, indexes, as_of, building)
        self.at_time = at_time
        self._bounds = bounds
        self._store = store

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return self.get_many_at(keys, [self.at_time] * len(keys))

    def get_many_at(self, keys: Sequence[bytes], times: Sequence[int]) -> list[bytes | None]:
        """The value of each key as of its own time (``times`` parallel to ``keys``)."""
        for at in set(times):
            timed.check_time(self._store, at, self._bounds)
        values: list[bytes | None] = []
        unversioned: list[int] = []
        for i, (key, at) in enumerate(zip(keys, times, strict=True)):
            try:
                versions = (parse_version(k, v) for k, v in scan_versions(self._history, key))
                found, value = timed.choose_at_time(versions, at, self._as_of, self._bounds)
            except timed.AmbiguousTimeError:
                raise TimeExpiredError(self._store, at, self._bounds.floor, key) from None
            values.append(value)
            if not found:
                unversioned.append(i)
        if unversioned:
            # No version since history began: the table's value, older than the time floor.
            current = self._latest.get_many([keys[i] for i in unversioned])
            for i, value in zip(unversioned, current, strict=True):
                values[i] = value
        return values

    def _index_candidates(self, spec: IndexSpec, value: bytes) -> set[bytes]:
        """Also every row with a version: at its own time it may have had the value."""
        candidates = super()._index_candidates(spec, value)
        candidates.update(historic_keys(self._history_scan, b""))
        return candidates
