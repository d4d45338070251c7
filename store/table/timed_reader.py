"""A view answering as of a time (``store.table.timed``), on the snapshots an ``as_of`` view takes."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from store.exceptions import TimeExpiredError
from store.table import timed
from store.table.asof import AsOfReader, historic_keys
from store.table.corruption import check_status
from store.table.history import PUT, escape
from store.table.indexes import IndexSpec
from store.table.snapshot_reader import SnapshotReader
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
        if times:  # the floor holds for every time once it holds for the earliest
            timed.check_time(self._store, min(times), self._bounds)
        # The hot path of a point-in-time join: one seek per key, then its versions walked
        # straight off the iterator, with no tuple or generator per version.
        iterator, bounds = self._history, self._bounds
        # At the view's own position, every version its iterator sees counts: no offset to compare.
        as_of = None if self._as_of == self._latest.position() else dict(self._as_of)
        values: list[bytes | None] = []
        unversioned: list[int] = []
        for i, (key, at) in enumerate(zip(keys, times, strict=True)):
            found, value = _version_at(iterator, escape(key), at, as_of, bounds)
            if found is None:
                raise TimeExpiredError(self._store, at, bounds.floor, key)
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


def _version_at(
    iterator: Any, prefix: bytes, at: int, as_of: Mapping[int, int] | None, bounds: timed.TimeBounds
) -> tuple[bool | None, bytes | None]:
    """The value as of time ``at`` from the versions under ``prefix`` (one escaped key), read
    through ``iterator``: of the versions below ``as_of`` (``None``: every version the iterator
    sees), the one with the greatest ``(timestamp, offset)`` at or below ``at``, or else the base
    version (``store.table.timed``).

    ``(False, None)``: the key has no version below ``as_of`` (the table's value is the answer).
    ``(None, None)``: the versions do not settle the time, a base version competing with a record
    stamped below the pre-history bound (``store.table.timed``). ``at`` must be at or above
    ``bounds.floor``.
    """
    best_time, best_key, best = timed.NO_TIME, b"", None
    base_key, base = b"", None
    seen = False
    valid, key_of, value_of, step = iterator.valid, iterator.key, iterator.value, iterator.next
    iterator.seek(prefix)
    while valid():
        history_key = key_of()
        if not history_key.startswith(prefix):  # escaped keys are self-delimiting
            break
        if as_of is None or _offset(history_key) < as_of.get(_partition(history_key), 0):
            seen = True
            stored = value_of()
            if history_key.endswith(_BASE):
                base_key, base = history_key, stored
            else:
                stamp = _from_bytes(stored[1:9], "big", signed=True)
                if stamp <= at and (
                    best is None
                    or stamp > best_time
                    or (stamp == best_time and _offset(history_key) > _offset(best_key))
                ):
                    best_time, best_key, best = stamp, history_key, stored
        step()
    else:
        check_status(iterator)  # the walk ended at the end of the family or on a failed read
    if not seen:
        return False, None
    if base_key:
        return _with_base(best, best_time, base, bounds.base_times.get(_partition(base_key), timed.NO_TIME))
    return True, _put_value(best)


def _with_base(
    best: bytes | None, best_time: int, base: bytes | None, bound: int
) -> tuple[bool | None, bytes | None]:
    """The answer of a key with a base version, whose record is at most the partition's
    pre-history ``bound``, itself at most the time asked: the base unless a version at or below
    the time is newer; ``(None, None)`` when one is stamped below the bound (unsettled)."""
    if best is None:
        return True, _put_value(base)
    if best_time < bound:
        return None, None
    return True, _put_value(best)


def _offset(history_key: bytes) -> int:
    """The record offset a version key ends with (``store.table.history``; -1: the base)."""
    return _from_bytes(history_key[-8:], "big", signed=True) - 1


def _partition(history_key: bytes) -> int:
    return _from_bytes(history_key[-12:-8], "big", signed=True)


def _put_value(stored: bytes | None) -> bytes | None:
    """The value of a stored version (``store.table.history``), ``None`` for a tombstone."""
    return stored[9:] if stored is not None and stored[:1] == PUT else None


_from_bytes = int.from_bytes
_BASE = bytes(8)  # the offset field of a base version (``store.table.history.version_key``)
