"""The hot-key cache's admission and eviction (pure logic; the store's exactness under writes is
the contract suite's)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

from store.table.hot_keys import ADMIT_ALL_UP_TO, ADMIT_STRIDE, MISS, HotKeyCache, read_misses


def _keys(n: int, prefix: str = "k") -> list[bytes]:
    return [f"{prefix}{i:06d}".encode() for i in range(n)]


def test_a_small_batch_is_admitted_whole_with_absent_keys_remembered() -> None:
    cache = HotKeyCache(100)
    keys = _keys(ADMIT_ALL_UP_TO)
    values: list[bytes | None] = [b"v" + key for key in keys]
    values[3] = None
    cache.offer(keys, values)
    assert cache.lookup(keys) == values
    assert cache.lookup([b"other"]) == [MISS]


def test_find_says_whether_every_key_was_cached_repeats_and_known_absences_included() -> None:
    cache = HotKeyCache(100)
    cache.offer([b"a", b"b", b"gone"], [b"1", b"2", None])
    assert cache.find([b"a", b"gone", b"a", b"b"]) == ([b"1", None, b"1", b"2"], True)
    assert cache.find([b"a", b"other", b"b"]) == ([b"1", MISS, b"2"], False)
    assert cache.find([b"other", b"a"]) == ([MISS, b"1"], False)
    assert cache.find([b"gone"]) == ([None], True)
    assert cache.find([b"other"]) == ([MISS], False)
    assert cache.find([]) == ([], True)
    assert (cache.get(b"b"), cache.get(b"gone"), cache.get(b"other")) == (b"2", None, MISS)


def test_a_large_batch_admits_one_miss_in_the_stride() -> None:
    cache = HotKeyCache(100_000, rng=random.Random(3))
    keys = _keys(8_000)
    cache.offer(keys, keys)
    assert len(cache) == len(keys) // ADMIT_STRIDE
    held = [key for key, value in zip(keys, cache.lookup(keys), strict=True) if value is not MISS]
    # Every admitted key carries its own value; the admitted ones are one run (wrapping around).
    assert all(value == key for key, value in zip(held, cache.lookup(held), strict=True))
    positions = [keys.index(key) for key in held]
    gaps = [b - a for a, b in itertools.pairwise(positions)]
    assert sum(gap != 1 for gap in gaps) <= 1


def test_keys_asked_again_and_again_in_large_batches_become_cached() -> None:
    cache = HotKeyCache(100_000, rng=random.Random(7))
    hot = _keys(1_000, "hot")
    for _ in range(60):
        looked = cache.lookup(hot)
        missing = [key for key, value in zip(hot, looked, strict=True) if value is MISS]
        cache.offer(missing, missing)
    # (7/8)^60 is 0.03%: all or all but a key or two are cached by now.
    assert sum(value is MISS for value in cache.lookup(hot)) <= 2


def test_a_sweep_of_cold_keys_evicts_few_hot_ones() -> None:
    cache = HotKeyCache(2_000, rng=random.Random(1))
    hot = _keys(1_000, "hot")
    for start in range(0, len(hot), ADMIT_ALL_UP_TO):  # read one by one: admitted whole
        cache.offer(hot[start : start + ADMIT_ALL_UP_TO], hot[start : start + ADMIT_ALL_UP_TO])
    sweep = _keys(8_000, "cold")  # a join's batches of keys asked once
    for start in range(0, len(sweep), 1_000):
        cache.offer(sweep[start : start + 1_000], sweep[start : start + 1_000])
    # 1,000 of the sweep's keys were admitted: the 1,000 free entries took them, no hot key left.
    assert MISS not in cache.lookup(hot)
    assert len(cache) == 2_000


def test_eviction_keeps_the_capacity_and_drops_the_oldest() -> None:
    cache = HotKeyCache(10)
    first, second = _keys(10, "a"), _keys(4, "b")
    cache.offer(first, first)
    cache.offer(second, second)
    assert len(cache) == 10
    assert cache.lookup(first[:4]) == [MISS] * 4
    assert cache.lookup(first[4:] + second) == first[4:] + second


def test_an_offer_larger_than_the_capacity_keeps_its_last_keys() -> None:
    cache = HotKeyCache(5, admit_all_up_to=100)
    keys = _keys(20)
    cache.offer(keys, keys)
    assert len(cache) == 5
    assert cache.lookup(keys[-5:]) == keys[-5:]


def test_dropped_keys_are_misses_and_a_zero_capacity_holds_nothing() -> None:
    cache = HotKeyCache(10)
    keys = _keys(3)
    cache.offer(keys, keys)
    cache.drop([keys[1], b"never-cached"])
    assert cache.lookup(keys) == [keys[0], MISS, keys[2]]
    cache.clear()
    assert len(cache) == 0
    off = HotKeyCache(0)
    off.offer(keys, keys)
    assert len(off) == 0


def test_the_misses_of_a_batch_that_mostly_hit_are_admitted_whole() -> None:
    cache = HotKeyCache(100_000, rng=random.Random(5))
    batch = _keys(1_000, "hot")
    cache.offer(batch[:600], batch[:600], asked=600)  # asked alone: admitted one in eight
    assert len(cache) == 75
    cold = HotKeyCache(100_000, rng=random.Random(5))
    cold.offer(batch[:600], batch[:600], asked=32)  # fewer asked than missed: counted as all missed
    assert len(cold) == 75
    hot = HotKeyCache(100_000)
    hot.offer(batch[:500], batch[:500], asked=1_000)  # half the batch hit: the rest come back whole
    assert hot.lookup(batch[:500]) == batch[:500]


def test_every_miss_of_a_large_batch_has_the_same_chance_including_across_the_wrap() -> None:
    rng = random.Random(11)
    batch = _keys(800)
    admitted = dict.fromkeys(batch, 0)
    for _ in range(800):
        cache = HotKeyCache(10_000, rng=rng)
        cache.offer(batch, batch)
        for key, value in zip(batch, cache.lookup(batch), strict=True):
            admitted[key] += value is not MISS
    # Each key is admitted in about one offer in eight: 100 of 800.
    assert all(40 <= count <= 180 for count in admitted.values()), sorted(admitted.values())[:5]
    assert admitted[batch[0]] > 0
    assert admitted[batch[-1]] > 0


def test_read_misses_reads_only_the_missed_keys_and_fills_them_in_place() -> None:
    cache = HotKeyCache(10)
    cache.offer([b"a"], [b"A"])
    asked: list[list[bytes]] = []

    def read(keys: Sequence[bytes]) -> list[bytes | None]:
        asked.append(list(keys))
        return [None if key == b"gone" else key.upper() for key in keys]

    keys = [b"b", b"a", b"gone"]
    values, missing_keys, fetched = read_misses(keys, cache.lookup(keys), read)
    assert values == [b"B", b"A", None]
    assert (missing_keys, fetched) == ([b"b", b"gone"], [b"B", None])
    assert asked == [[b"b", b"gone"]]
    values, missing_keys, fetched = read_misses([b"a"], cache.lookup([b"a"]), read)
    assert (values, missing_keys, fetched) == ([b"A"], [], [])
    assert len(asked) == 1  # all hit: nothing read
