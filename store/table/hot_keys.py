"""The hot-key cache in front of RocksDB: recently read keys and their values (or absence).

Reads ask it first; what it lacks is read from a snapshot and offered back. It is exact only
under the owner's lock and generation (``store.table.replica``): every write drops the keys it
changes, and a read of an older generation neither uses nor fills it.

Admission resists large cold batches. The misses of a batch are admitted whole when there are
at most ``admit_all_up_to`` of them, or when at least half of the batch hit (a batch of hot keys
gets back the few the cache had evicted); otherwise one missed key in ``admit_stride`` is: a run
of consecutive ones from a random start. A Spark join sweeping the table asks each key about
once: admitting all of its keys would cost ~0.6 µs a key (a quarter of a cold read) and evict
the keys that are hot, for entries that are never read again. A key asked again and again in
cold batches is admitted within a few asks (after n asks, with probability
1 - (1 - 1/stride)^n). Runs, not every eighth key, because a batch asked again then finds its
keys together in the cache's memory: scattered, they made repeated hot batches ~15% slower.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Generic, TypeVar

MISS = object()
"""What :meth:`HotKeyCache.lookup` answers for a key it does not hold."""

ValueT = TypeVar("ValueT")

# Misses of one batch admitted whole; above this, one in ``ADMIT_STRIDE``.
ADMIT_ALL_UP_TO = 32
ADMIT_STRIDE = 8


class HotKeyCache(Generic[ValueT]):
    """A bounded map of key to value (for the table's values ``None``: known absent), oldest
    entries evicted first.

    Not thread-safe: its owner holds a lock around every call.
    """

    __slots__ = ("_admit_all_up_to", "_admit_stride", "_entries", "_random", "capacity")

    def __init__(
        self,
        capacity: int,
        *,
        admit_all_up_to: int = ADMIT_ALL_UP_TO,
        admit_stride: int = ADMIT_STRIDE,
        rng: random.Random | None = None,
    ) -> None:
        self.capacity = capacity
        self._admit_all_up_to = admit_all_up_to
        self._admit_stride = admit_stride
        self._random = rng or random.Random()
        self._entries: dict[bytes, ValueT] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> object:
        """The cached value of ``key``; :data:`MISS` if it is not cached."""
        return self._entries.get(key, MISS)

    def lookup(self, keys: Sequence[bytes]) -> list[object]:
        """The cached value of each key, in order; :data:`MISS` for a key not cached."""
        return self.find(keys)[0]

    def find(self, keys: Sequence[bytes]) -> tuple[list[object], bool]:
        """:meth:`lookup`, and whether every key was cached (no :data:`MISS` among the values)."""
        entries = self._entries
        if len(keys) > 1:
            try:  # a hot batch: every key cached, looked up in C with no pass of its own for misses
                return list(itemgetter(*keys)(entries)), True
            except KeyError:
                pass
        get = entries.get
        found = [get(key, MISS) for key in keys]
        return found, len(keys) < 2 and MISS not in found

    def offer(self, keys: Sequence[bytes], values: Sequence[ValueT], asked: int = 0) -> None:
        """Values just read for ``keys``, the misses of a batch of ``asked`` keys (``len(keys)`` if
        less); admitted as the module docstring says."""
        if self.capacity <= 0:
            return
        stride = self._admit_stride
        mostly_hits = 2 * len(keys) <= asked
        if len(keys) > self._admit_all_up_to and stride > 1 and not mostly_hits:
            # A run of consecutive misses, wrapping around, from a random start: each is admitted
            # with the same chance, and a batch asked again finds its admitted keys together in
            # the cache's memory, not one in eight apart.
            count = len(keys)
            take = -(-count // stride)
            start = self._random.randrange(count)
            wrapped = max(0, start + take - count)
            keys = [*keys[start : start + take], *keys[:wrapped]]
            values = [*values[start : start + take], *values[:wrapped]]
        self.put(keys, values)

    def put(self, keys: Sequence[bytes], values: Sequence[ValueT]) -> list[ValueT]:
        """Keep ``values`` for ``keys`` (admitted already, none of them held), evicting the oldest
        entries; returns the values let go: those evicted, and those offered past the capacity."""
        if self.capacity <= 0:
            return list(values)
        let_go: list[ValueT] = []
        if len(keys) > self.capacity:
            let_go += values[: -self.capacity]
            keys, values = keys[-self.capacity :], values[-self.capacity :]
        entries = self._entries
        overflow = len(entries) + len(keys) - self.capacity
        if overflow > 0:
            for old in list(itertools.islice(entries, overflow)):
                let_go.append(entries.pop(old))
        entries.update(zip(keys, values, strict=True))
        return let_go

    def drop(self, keys: Sequence[bytes]) -> None:
        """Forget ``keys`` (they were just written)."""
        entries = self._entries
        if entries:
            for key in keys:
                entries.pop(key, None)

    def remove(self, keys: Sequence[bytes]) -> list[ValueT]:
        """:meth:`drop`, returning the values held for ``keys``."""
        entries = self._entries
        if not entries:
            return []
        removed = [entries.pop(key, MISS) for key in keys]
        return [value for value in removed if value is not MISS]  # type: ignore[misc]

    def clear(self) -> None:
        self._entries.clear()


def read_misses(
    keys: Sequence[bytes], cached: list[object], read: Callable[[Sequence[bytes]], list[bytes | None]]
) -> tuple[list[bytes | None], list[bytes], list[bytes | None]]:
    """Complete a :meth:`HotKeyCache.lookup` answer: ``read`` the keys it missed and put their
    values in place. Returns the values of every key, in order, and the keys read with their values
    (to :meth:`HotKeyCache.offer`; empty when all hit)."""
    if MISS not in cached:  # every key hit (a hot batch): one pass in C
        return cached, [], []  # type: ignore[return-value]  # no MISS left: values only
    missing = [i for i, value in enumerate(cached) if value is MISS]
    missing_keys = [keys[i] for i in missing]
    fetched = read(missing_keys)
    for i, value in zip(missing, fetched, strict=True):
        cached[i] = value
    return cached, missing_keys, fetched  # type: ignore[return-value]  # every MISS was replaced
