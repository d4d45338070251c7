"""Hot keys' versions, kept decoded for reads as of a time at the copy's position: no seek at all.

A read as of a time seeks once a key (``store.table.timed_reader``); a key asked again and again
(a batch asked at many times, a hot dimension row) is answered from its *timeline* instead: its
versions' time and offset fields (``store.table.history_keys``: newest time first, the base version
last) beside the versions' answers, where counting the versions newer than the time asked finds
the version the seek would have landed on (for a whole batch at once, in array operations). A
timeline holds every version of its key, so it answers only views that count every version (at
the copy's position, no older ``as_of``); it is dropped when its key is written, as the hot-key
cache's values are (``store.table.replica``), and cleared when the copy is. Pruning does not
drop it: pruning changes no answer at or above the time floor, and a time below the floor is
refused before any key is read.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from operator import getitem, itemgetter
from typing import Any, cast

import numpy as np

from store.table.corruption import check_status
from store.table.history_keys import KEYED_PUT, PUT
from store.table.hot_keys import MISS, HotKeyCache

MISS_WINDOW_SHARE = 8
_TIME_TOP = 2**63 - 1
_ALL_ONES = np.uint64(2**64 - 1)  # the time and offset fields of a base version
_FIELDS = np.dtype(">u8")  # a version key's ``~timestamp`` and ``~(offset + 1)`` fields


Timeline = tuple[bytes | None, ...]
"""Of one key's versions in history order (``store.table.history_keys``): first their ``~timestamp |
~(offset + 1)`` fields, 16 bytes each, joined; then each one's answer (its value, ``None`` for a
tombstone). One tuple, so that a batch touches as few objects as it can."""


def read_timeline(iterator: Any, escaped: bytes) -> Timeline:
    """Every version of the escaped key, read through a ``history`` iterator (re-seeked)."""
    fields: list[bytes] = []
    answers: list[bytes | None] = []
    valid, key_of, value_of, step = iterator.valid, iterator.key, iterator.value, iterator.next
    iterator.seek(escaped)
    while valid():
        history_key = key_of()
        if not history_key.startswith(escaped):
            break
        fields.append(history_key[-20:-4])
        stored = value_of()
        answers.append(
            stored[9:] if stored[:1] == PUT else (stored[13:] if stored[:1] == KEYED_PUT else None)
        )
        step()
    else:
        check_status(iterator)  # the walk ended at the end of the family or on a failed read
    return (b"".join(fields), *answers)


def size_of(timeline: Timeline) -> int:
    """The bytes a timeline holds (its fields and values, not Python's own overhead)."""
    return sum(len(part) for part in timeline if part is not None)


_fields_of = itemgetter(0)


def answer(
    cached: Sequence[object],
    complete: bool,
    times: Sequence[int],
    settled: int,
    values: list[bytes | None],
    unsettled: list[int],
) -> list[int]:
    """Fill in ``values`` from the timelines in ``cached`` (a :meth:`Timelines.lookup` answer;
    ``complete``: no ``MISS`` among them) as of each key's time: the version a seek would have
    landed on, when it settles the answer (as ``store.table.timed_reader`` decides, ``settled``
    being the greatest inverted time field that settles). The places whose timeline does not
    settle their answer go to ``unsettled``; returns those without one.

    A few passes of array operations over the batch's timelines, no Python call per key: a key's
    fields run newest time first, so the versions newer than its time come first, and their count
    is where its seek would land."""
    places: list[int] | None = None
    rest: list[int] = []
    if not complete:
        places = [i for i, timeline in enumerate(cached) if timeline is not MISS]
        rest = [i for i, timeline in enumerate(cached) if timeline is MISS]
        cached, times = [cached[i] for i in places], [times[i] for i in places]
        if not cached:
            return rest
    hits = cast(list[Timeline], cached)  # no MISS left
    fields: list[bytes] = list(map(_fields_of, hits))
    counts = np.fromiter(map(len, fields), np.int64, len(fields)) >> 4
    starts = counts.cumsum() - counts
    versions = np.frombuffer(b"".join(fields), _FIELDS).reshape(-1, 2)
    stamps = versions[:, 0]
    # ``~at`` of each time, in unsigned 64-bit arithmetic: ``_TIME_TOP - at`` for any time at all.
    asked = np.uint64(_TIME_TOP) - np.fromiter(times, np.int64, len(times)).view(np.uint64)
    newer = stamps < asked.repeat(counts)
    within = np.add.reduceat(newer.view(np.uint8), starts, dtype=np.int64)
    inside = within < counts
    within[~inside] = 0  # past a key's versions: no answer here (any version to index)
    landed = starts + within
    at = stamps[landed]
    settles = inside & ((at <= np.uint64(settled)) | ((at == _ALL_ONES) & (versions[landed, 1] == _ALL_ONES)))
    found: list[bytes | None] = list(map(getitem, hits, (within + 1).tolist()))
    if places is None:
        values[:] = found
        for place in (~settles).nonzero()[0].tolist():  # few: a version stamped below a base's bound
            values[place] = None
            unsettled.append(place)
    else:
        for place, value, settling in zip(places, found, settles.tolist(), strict=True):
            if settling:
                values[place] = value
            else:
                unsettled.append(place)
    return rest


class Timelines:
    """The timelines of hot keys, at most ``capacity``, oldest evicted first. Reading a missed
    key's timeline costs a walk over its versions, so a key is admitted on its second miss among
    the last ``capacity // MISS_WINDOW_SHARE`` keys missed: a batch asked again is; few keys of a
    join sweeping a table larger than the cache are (it would pay the walks, and evict what it
    admitted before asking it again).

    Every call takes the owner's ``lock`` or is made with it held; ``generation`` counts the
    writes (a timeline read before one is not kept). ``size`` is the bytes the kept timelines
    hold (fields and values, not Python's own overhead), for the memory report.
    """

    def __init__(self, capacity: int, lock: threading.Condition) -> None:
        self._cache: HotKeyCache[Timeline] = HotKeyCache(capacity)
        self._missed: dict[bytes, None] = {}  # the keys missed lately, oldest first
        self._lock = lock
        self.generation = 0
        self.size = 0

    @property
    def enabled(self) -> bool:
        return self._cache.capacity > 0

    def __len__(self) -> int:
        return len(self._cache)

    def written(self, keys: Sequence[bytes]) -> None:
        """``keys`` were written (called with the lock held)."""
        self.generation += 1
        self._forget(self._cache.remove(keys))

    def clear(self) -> None:
        """Every key may have changed (called with the lock held)."""
        self.generation += 1
        self._cache.clear()
        self.size = 0

    def lookup(self, generation: int, keys: Sequence[bytes]) -> tuple[list[object], bool] | None:
        """Each key's timeline (``MISS`` where none is kept) and whether every key had one;
        ``None`` once written since ``generation``."""
        with self._lock:
            return self._cache.find(keys) if generation == self.generation else None

    def admitted(self, missed: Sequence[bytes]) -> list[bytes]:
        """Of the keys a read just missed, those to read timelines for and offer: each missed
        before, among the last keys missed (class doc)."""
        admitted = []
        with self._lock:
            recent = self._missed
            for key in missed:
                if key in recent:
                    del recent[key]
                    admitted.append(key)
                else:
                    recent[key] = None
            overflow = len(recent) - self._cache.capacity // MISS_WINDOW_SHARE
            if overflow > 0:
                for old in list(itertools.islice(recent, overflow)):
                    del recent[old]
        return admitted

    def offer(self, generation: int, keys: Sequence[bytes], timelines: Sequence[Timeline]) -> None:
        """Keep timelines read at ``generation`` (ignored if written since); each holds at least
        one version."""
        with self._lock:
            if generation == self.generation:
                self._forget(self._cache.remove(keys))  # a key offered again replaces its timeline
                self.size += sum(map(size_of, timelines))
                self._forget(self._cache.put(keys, timelines))

    def _forget(self, timelines: Sequence[Timeline]) -> None:
        self.size -= sum(map(size_of, timelines))
