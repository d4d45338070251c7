"""A view answering as of a time (``store.table.timed``), on the snapshots an ``as_of`` view takes."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from store.exceptions import TimeExpiredError
from store.protocol import HistoryRows
from store.table import timed
from store.table.asof import AsOfReader, ViewParts, historic_keys
from store.table.corruption import check_status
from store.table.history_keys import KEYED_PUT, PUT, answer_of, escape, time_seek_keys
from store.table.history_scan import history_page
from store.table.hot_keys import MISS
from store.table.indexes import IndexSpec
from store.table.timelines import Timelines, answer, read_timeline


class TimedReader(AsOfReader):
    """Every read answers as of ``at_time`` (epoch ms), counting only records below ``as_of``.

    ``get_many_at`` takes one time per key. Every time asked must be at or above the time floor
    of ``bounds`` (checked when the view is taken for ``at_time``, and here for the others).
    ``timelines`` (a view at the copy's position only): the hot keys' timelines and the generation
    they are good for (``store.table.timelines``).
    """

    def __init__(
        self,
        parts: ViewParts,
        *,
        at_time: int,
        bounds: timed.TimeBounds,
        store: str,
        timelines: tuple[Timelines, int] | None = None,
    ) -> None:
        super().__init__(parts)
        self.at_time = at_time
        self._bounds = bounds
        self._store = store
        self._timelines = timelines

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return self.get_many_at(keys, [self.at_time] * len(keys))

    def get_many_at(self, keys: Sequence[bytes], times: Sequence[int]) -> list[bytes | None]:
        """The value of each key as of its own time (``times`` parallel to ``keys``)."""
        if times:  # the floor holds for every time once it holds for the earliest
            timed.check_time(self._store, min(times), self._bounds)
        # At the view's own position, every version its iterator sees counts: no offset to compare.
        pinned, position = self._as_of, self._latest.position()
        as_of = None if pinned is position or pinned == position else dict(pinned)
        # A version stamped at or above every pre-history bound is newer than any base version.
        settled = _TIME_TOP - max(self._bounds.base_times.values(), default=timed.NO_TIME)
        values: list[bytes | None] = [None] * len(keys)
        unsettled: list[int] = []
        rest: Sequence[int] = range(len(keys))
        if as_of is None and self._timelines is not None:
            rest = self._from_timelines(keys, times, settled, values, unsettled)
        if rest:
            self._seek(keys, times, rest, as_of, _TIME_FIELD.pack(settled), values, unsettled)
        if unsettled:
            self._settle(keys, times, values, unsettled, as_of, _TIME_FIELD.pack(settled))
        return values

    def _seek(
        self,
        keys: Sequence[bytes],
        times: Sequence[int],
        rest: Sequence[int],
        as_of: Mapping[int, int] | None,
        settled: bytes,
        values: list[bytes | None],
        unsettled: list[int],
    ) -> None:
        """Fill in ``values`` at the places ``rest`` where one seek lands on the answer; the
        others go to ``unsettled``.

        The hot path of a point-in-time join: one seek a key lands on its answer (the history
        layout, ``store.table.history_keys``), the seeks in key order (each near the one before)."""
        targets = time_seek_keys([keys[i] for i in rest], [times[i] for i in rest])
        iterator = self._history
        seek, valid, key_of, value_of = iterator.seek, iterator.valid, iterator.key, iterator.value
        for j in sorted(range(len(rest)), key=targets.__getitem__):
            target = targets[j]
            seek(target)
            if as_of is None and valid():
                # Inline, what ``_landed`` does at the view's own position: the usual read.
                history_key = key_of()
                if history_key.startswith(target[:-8]) and (
                    history_key[-12:-4] == _BASE_OFFSET or history_key[-20:-12] <= settled
                ):
                    stored = value_of()
                    values[rest[j]] = (
                        stored[9:]
                        if stored[:1] == PUT
                        else (stored[13:] if stored[:1] == KEYED_PUT else None)
                    )
                    continue
            unsettled.append(rest[j])

    def history_page(self, after: bytes | None, limit: int, max_bytes: int) -> HistoryRows | None:
        """Rows answering the keys after ``after`` as of any time (``TimedKeyValueStore``)."""
        as_of = None if self._as_of == self._latest.position() else dict(self._as_of)
        return history_page(
            self._history_scan, self._latest.iterator, as_of, self._bounds, after, limit, max_bytes
        )

    def _from_timelines(
        self,
        keys: Sequence[bytes],
        times: Sequence[int],
        settled: int,
        values: list[bytes | None],
        unsettled: list[int],
    ) -> Sequence[int]:
        """Fill in ``values`` from the hot keys' timelines, reading those of the keys admitted
        now; returns the places of the others. A timeline that does not settle its key's answer
        leaves its place in ``unsettled``."""
        assert self._timelines is not None
        timelines, generation = self._timelines
        found = timelines.lookup(generation, keys)
        if found is None:  # written since the view was taken: its snapshot is older than them
            return range(len(keys))
        cached, complete = found
        if not complete:
            missed = [key for key, timeline in zip(keys, cached, strict=True) if timeline is MISS]
            # Timelines for the keys admitted (each read once), kept if no write came meanwhile.
            admitted = sorted(timelines.admitted(list(dict.fromkeys(missed))))
            read = [read_timeline(self._history, escape(key)) for key in admitted]
            kept = {key: timeline for key, timeline in zip(admitted, read, strict=True) if timeline[0]}
            timelines.offer(generation, list(kept), list(kept.values()))
            cached = [
                kept.get(key, MISS) if timeline is MISS else timeline
                for key, timeline in zip(keys, cached, strict=True)
            ]
            complete = MISS not in cached
        return answer(cached, complete, times, settled, values, unsettled)

    def _settle(
        self,
        keys: Sequence[bytes],
        times: Sequence[int],
        values: list[bytes | None],
        unsettled: Sequence[int],
        as_of: Mapping[int, int] | None,
        settled: bytes,
    ) -> None:
        """Fill in ``values`` at the ``unsettled`` places: keys whose versions are pinned to an
        older position, or whose landing alone does not settle their answer."""
        targets = time_seek_keys([keys[i] for i in unsettled], [times[i] for i in unsettled])
        iterator, unversioned = self._history, []
        for i, target in zip(unsettled, targets, strict=True):
            escaped = target[:-8]
            iterator.seek(target)
            stored = _landed(iterator, escaped, as_of, settled)
            if stored is not None:
                values[i] = _put_value(stored)
                continue
            # Not settled where the seek landed: every version of the key weighed.
            found, values[i] = _version_at(iterator, escaped, times[i], as_of, self._bounds)
            if found is None:
                raise TimeExpiredError(self._store, times[i], self._bounds.floor, keys[i])
            if not found:
                unversioned.append(i)
        if unversioned:
            # No version since history began: the table's value, older than the time floor.
            current = self._latest.get_many([keys[i] for i in unversioned])
            for i, value in zip(unversioned, current, strict=True):
                values[i] = value

    def _index_candidates(self, spec: IndexSpec, value: bytes) -> set[bytes]:
        """Also every row with a version: at its own time it may have had the value."""
        candidates = super()._index_candidates(spec, value)
        candidates.update(historic_keys(self._history_scan, b""))
        return candidates


def _landed(iterator: Any, escaped: bytes, as_of: Mapping[int, int] | None, settled: bytes) -> Any:
    """The stored version a seek to a key's time (``history_keys.time_seek_keys``) landed on, when it
    settles the answer; ``None`` when it does not.

    Versions run newest time first (ties: newest offset first), the base version last, so the
    first version counted (below ``as_of``; ``None``: all) from the landing on is the one with the
    greatest ``(timestamp, offset)`` at or below the time, or else the base. It is the answer when
    it is the base, or stamped at or above every pre-history bound (``settled``, an inverted time
    field): then no base version can be newer (``store.table.timed``).
    """
    valid, key_of, step = iterator.valid, iterator.key, iterator.next
    while valid():
        history_key = key_of()
        if not history_key.startswith(escaped):  # escaped keys are self-delimiting
            return None
        if history_key[-12:-4] == _BASE_OFFSET:
            return iterator.value()
        if as_of is None or _offset(history_key) < as_of.get(_partition(history_key), 0):
            return iterator.value() if history_key[-20:-12] <= settled else None
        step()
    check_status(iterator)  # the walk ended at the end of the family or on a failed read
    return None


def _version_at(
    iterator: Any, prefix: bytes, at: int, as_of: Mapping[int, int] | None, bounds: timed.TimeBounds
) -> tuple[bool | None, bytes | None]:
    """The value as of time ``at`` from the versions under ``prefix`` (one escaped key), read
    through ``iterator``, all of them weighed: of the versions below ``as_of`` (``None``: every
    version the iterator sees), the one with the greatest ``(timestamp, offset)`` at or below
    ``at``, or else the base version (``store.table.timed``).

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
            if history_key[-12:-4] == _BASE_OFFSET:
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
    """The record offset of a version key (``store.table.history_keys``; -1: the base)."""
    return _OFFSET_TOP - _from_bytes(history_key[-12:-4], "big") - 1


def _partition(history_key: bytes) -> int:
    return _from_bytes(history_key[-4:], "big", signed=True)


def _put_value(stored: bytes | None) -> bytes | None:
    """The value of a stored version (``store.table.history_keys``), ``None`` for a tombstone."""
    return None if stored is None else answer_of(stored)


_from_bytes = int.from_bytes
_TIME_FIELD = struct.Struct(">Q")  # ``~timestamp`` of a version key (``store.table.history_keys``)
_TIME_TOP = 2**63 - 1
_OFFSET_TOP = 2**64 - 1
_BASE_OFFSET = b"\xff" * 8  # the ``~(offset + 1)`` field of a base version
