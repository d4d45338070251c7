"""Hot keys' versions, kept decoded for reads as of a time at the copy's position: no seek at all.

A read as of a time seeks once a key (``store.table.timed_reader``); a key asked again and again
(a batch asked at many times, a hot dimension row) is answered from its *timeline* instead: its
versions' time and offset fields (``store.table.history``: newest time first, the base version
last) beside the stored versions, where a binary search for the time asked finds the version
the seek would have landed on. A timeline holds every version of its key, so it answers only
views that count every version (at the copy's position, no older ``as_of``); it is dropped when
its key is written, as the hot-key cache's values are (``store.table.replica``), and cleared when
the copy is. Pruning does not drop it: pruning changes no answer at or above the time floor,
and a time below the floor is refused before any key is read.
"""

from __future__ import annotations

import itertools
import struct
import threading
from bisect import bisect_left
from collections.abc import Sequence
from typing import Any, cast

from store.table.corruption import check_status
from store.table.history import PUT
from store.table.hot_keys import MISS, HotKeyCache

Timeline = tuple[list[bytes], list[bytes]]
"""Of one key's versions in history order: each one's ``~timestamp | ~(offset + 1)`` (16 bytes),
and each stored version."""

MISS_WINDOW_SHARE = 8
BASE_FIELDS = b"\xff" * 16  # the time and offset fields of a base version
_TIME_FIELD = struct.Struct(">Q")  # ``~at``: ``_TIME_TOP - at``
_TIME_TOP = 2**63 - 1


def read_timeline(iterator: Any, escaped: bytes) -> Timeline:
    """Every version of the escaped key, read through a ``history`` iterator (re-seeked)."""
    fields: list[bytes] = []
    stored: list[bytes] = []
    valid, key_of, value_of, step = iterator.valid, iterator.key, iterator.value, iterator.next
    iterator.seek(escaped)
    while valid():
        history_key = key_of()
        if not history_key.startswith(escaped):
            return fields, stored
        fields.append(history_key[-20:-4])
        stored.append(value_of())
        step()
    check_status(iterator)  # the walk ended at the end of the family or on a failed read
    return fields, stored


def answer(
    cached: Sequence[object],
    times: Sequence[int],
    settled: bytes,
    values: list[bytes | None],
    unsettled: list[int],
) -> list[int]:
    """Fill in ``values`` from the timelines in ``cached`` (a :meth:`Timelines.lookup` answer) as
    of each key's time: the version a seek would have landed on, when it settles the answer (as
    ``store.table.timed_reader`` decides, ``settled`` being its inverted time field). The places
    whose timeline does not settle their answer go to ``unsettled``; returns those without one."""
    pack, top = _TIME_FIELD.pack, _TIME_TOP
    rest = []
    for i, timeline in enumerate(cached):
        if timeline is MISS:
            rest.append(i)
            continue
        fields, stored = cast(Timeline, timeline)
        at = bisect_left(fields, pack(top - times[i]))  # the first version at or below the time
        if at < len(fields) and (fields[at][:8] <= settled or fields[at] == BASE_FIELDS):
            version = stored[at]
            values[i] = version[9:] if version[:1] == PUT else None
        else:
            unsettled.append(i)
    return rest


class Timelines:
    """The timelines of hot keys, at most ``capacity``, oldest evicted first. Reading a missed
    key's timeline costs a walk over its versions, so a key is admitted on its second miss among
    the last ``capacity // MISS_WINDOW_SHARE`` keys missed: a batch asked again is; few keys of a
    join sweeping a table larger than the cache are (it would pay the walks, and evict what it
    admitted before asking it again).

    Every call takes the owner's ``lock`` or is made with it held; ``generation`` counts the
    writes (a timeline read before one is not kept).
    """

    def __init__(self, capacity: int, lock: threading.Condition) -> None:
        self._cache: HotKeyCache[Timeline] = HotKeyCache(capacity)
        self._missed: dict[bytes, None] = {}  # the keys missed lately, oldest first
        self._lock = lock
        self.generation = 0

    @property
    def enabled(self) -> bool:
        return self._cache.capacity > 0

    def written(self, keys: Sequence[bytes]) -> None:
        """``keys`` were written (called with the lock held)."""
        self.generation += 1
        self._cache.drop(keys)

    def clear(self) -> None:
        """Every key may have changed (called with the lock held)."""
        self.generation += 1
        self._cache.clear()

    def lookup(self, generation: int, keys: Sequence[bytes]) -> list[object] | None:
        """Each key's timeline (``MISS`` where none is kept); ``None`` once written since
        ``generation``."""
        with self._lock:
            return self._cache.lookup(keys) if generation == self.generation else None

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
        """Keep timelines read at ``generation`` (ignored if written since)."""
        with self._lock:
            if generation == self.generation:
                self._cache.put(keys, timelines)
