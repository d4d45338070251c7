"""Timelines answered a batch at a time (pure logic): every answer equals the version a seek would
have landed on, decided one key at a time, with misses, base versions, versions that do not
settle, keys past their versions and times anywhere in the 64-bit range; and the bytes the kept
timelines hold follow every keep, write, eviction and clear."""

from __future__ import annotations

import random
import struct
import threading
from bisect import bisect_left

from store.table.history_keys import escape, version_key, version_value
from store.table.hot_keys import MISS
from store.table.timelines import Timeline, Timelines, answer, read_timeline, size_of

_FIELD = struct.Struct(">Q")
_TOP = 2**63 - 1
_BASE = b"\xff" * 16


class _Iterator:
    """A ``history`` iterator over sorted entries (seek, valid, key, value, next)."""

    def __init__(self, entries: dict[bytes, bytes]) -> None:
        self._keys = sorted(entries)
        self._entries = entries
        self._at = 0

    def seek(self, key: bytes) -> None:
        self._at = bisect_left(self._keys, key)

    def valid(self) -> bool:
        return self._at < len(self._keys)

    def key(self) -> bytes:
        return self._keys[self._at]

    def value(self) -> bytes:
        return self._entries[self._keys[self._at]]

    def next(self) -> None:
        self._at += 1

    def status(self) -> None:
        return None


def _timeline(rng: random.Random, key: bytes) -> Timeline:
    """A key's versions (some tombstones, equal times, maybe a base version) as a timeline read
    from a history family holding them and a neighbour's."""
    entries: dict[bytes, bytes] = {}
    for offset in rng.sample(range(1_000), rng.randint(1, 8)):
        stamp = rng.choice([rng.randint(-50, 50), rng.randint(-(2**62), 2**62), 7])
        value = None if rng.random() < 0.2 else b"v%d" % offset
        entries[version_key(key, rng.randrange(3), offset, stamp)] = version_value(value, stamp)
    if rng.random() < 0.3:
        entries[version_key(key, 0, -1, -(2**63))] = version_value(b"base", -1)
    entries[version_key(key + b"\x00next", 0, 5, 1)] = version_value(b"neighbour", 1)
    return read_timeline(_Iterator(entries), escape(key))


def _one_at_a_time(timeline: Timeline, at: int, settled: int) -> tuple[bool, bytes | None]:
    """Whether the key's landing settles its answer, and the answer: one bisect, as a seek."""
    fields = timeline[0]
    assert fields is not None
    versions = [fields[i : i + 16] for i in range(0, len(fields), 16)]
    landed = bisect_left(versions, _FIELD.pack(_TOP - at))
    if landed < len(versions) and (versions[landed][:8] <= _FIELD.pack(settled) or versions[landed] == _BASE):
        return True, timeline[1 + landed]
    return False, None


def test_a_batch_of_timelines_answers_as_one_key_at_a_time() -> None:
    rng = random.Random(29)
    for _ in range(200):
        timelines = [_timeline(rng, b"k%d" % i) for i in range(rng.randint(1, 40))]
        cached: list[object] = [MISS if rng.random() < 0.2 else t for t in timelines]
        times = [
            rng.choice([rng.randint(-60, 60), rng.randint(-(10**18) + 1, 10**18 - 1), 7]) for _ in cached
        ]
        settled = rng.choice([0, _TOP - 7, _TOP, 2**64 - 1, _TOP + 10**17])
        values: list[bytes | None] = [b"untouched"] * len(cached)
        unsettled: list[int] = []
        rest = answer(cached, MISS not in cached, times, settled, values, unsettled)

        assert rest == [i for i, t in enumerate(cached) if t is MISS]
        expected_unsettled = []
        for i, timeline in enumerate(cached):
            if timeline is MISS:
                assert values[i] == b"untouched"
                continue
            settles, value = _one_at_a_time(timelines[i], times[i], settled)
            if settles:
                assert values[i] == value, (i, times[i], settled)
            else:
                expected_unsettled.append(i)
                assert values[i] in (None, b"untouched")  # never another version's value
        assert sorted(unsettled) == expected_unsettled


def test_the_kept_timelines_bytes_follow_keeps_writes_evictions_and_clears() -> None:
    rng = random.Random(3)
    timelines = Timelines(4, threading.Condition())
    kept: dict[bytes, Timeline] = {}

    def check() -> None:
        assert timelines.size == sum(map(size_of, kept.values()))
        assert len(timelines) == len(kept)

    made = {b"k%d" % i: _timeline(rng, b"k%d" % i) for i in range(8)}
    timelines.offer(timelines.generation, [b"k0", b"k1", b"k2"], [made[b"k0"], made[b"k1"], made[b"k2"]])
    kept.update((k, made[k]) for k in (b"k0", b"k1", b"k2"))
    check()
    assert timelines.size > 0
    # Offered again: replaced, not counted twice.
    timelines.offer(timelines.generation, [b"k1"], [made[b"k1"]])
    kept[b"k1"] = kept.pop(b"k1")
    check()
    # Past the capacity: the oldest evicted.
    timelines.offer(timelines.generation, [b"k3", b"k4"], [made[b"k3"], made[b"k4"]])
    del kept[b"k0"]
    kept.update((k, made[k]) for k in (b"k3", b"k4"))
    check()
    # Offered past the capacity at once: only the last ones kept.
    batch = [b"k5", b"k6", b"k7", b"k0", b"k1"]
    timelines.offer(timelines.generation, batch, [made[k] for k in batch])
    kept = {k: made[k] for k in batch[-4:]}
    check()
    timelines.written([b"k6", b"absent"])
    del kept[b"k6"]
    check()
    # Read before the write: not kept.
    timelines.offer(timelines.generation - 1, [b"k2"], [made[b"k2"]])
    check()
    timelines.clear()
    kept = {}
    check()
    assert timelines.size == 0
