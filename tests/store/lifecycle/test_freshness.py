"""The freshness histogram: one observation per applied batch, by its oldest record."""

from __future__ import annotations

import math
import threading

from store.freshness import BUCKETS, EMPTY, FreshnessHistogram


def test_observations_land_in_their_buckets_and_cumulate() -> None:
    histogram = FreshnessHistogram()
    assert histogram.snapshot is EMPTY
    now = 1_000.0
    histogram.observe(999_996, now)  # 4 ms
    histogram.observe(999_920, now)  # 80 ms: the bucket bounded by 0.1
    histogram.observe(600_000, now)  # 400 s: above every bound
    seen = histogram.snapshot
    assert seen.count == 3
    assert abs(seen.sum_seconds - (0.004 + 0.08 + 400.0)) < 1e-9
    cumulative = dict(seen.cumulative())
    assert cumulative[0.005] == 1
    assert cumulative[0.05] == 1
    assert cumulative[0.1] == 2
    assert cumulative[300.0] == 2
    assert cumulative[math.inf] == 3
    assert [bound for bound, _ in seen.cumulative()] == [*BUCKETS, math.inf]


def test_batches_without_a_timestamp_are_not_observed_and_clock_skew_counts_as_zero() -> None:
    histogram = FreshnessHistogram()
    histogram.observe(None, 1_000.0)
    assert histogram.snapshot.count == 0
    histogram.observe(1_000_500, 1_000.0)  # the producer's clock is half a second ahead
    assert histogram.snapshot.count == 1
    assert histogram.snapshot.sum_seconds == 0.0
    assert dict(histogram.snapshot.cumulative())[0.005] == 1


def test_a_reader_sees_whole_snapshots_while_the_writer_observes() -> None:
    histogram = FreshnessHistogram()
    done = threading.Event()
    torn: list[object] = []

    def read() -> None:
        while not done.is_set():
            seen = histogram.snapshot
            if sum(seen.bucket_counts) != seen.count:
                torn.append(seen)

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(20_000):
        histogram.observe(1_000_000 - i % 500, 1_000.0)
    done.set()
    reader.join()
    assert torn == []
    assert histogram.snapshot.count == 20_000
