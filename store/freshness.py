"""How fresh a READY store's reads are: the delay from a record's timestamp to when reads see it.

Kafka Streams calls this the record's end-to-end latency (KIP-613). Each batch a READY store
applies is observed once, by its oldest record: the timestamp its producer set (CreateTime) or
its broker did (LogAppendTime), to the moment the batch became visible. The producer's clock
counts, so a producer writing old timestamps (a replay) shows as a large delay, and skew between
the producer's and this machine's clocks shifts every figure (a negative delay counts as 0).
Records without a timestamp are not observed.

Exported as the histogram ``statestore_freshness_seconds`` (``service/metrics.py``).
"""

from __future__ import annotations

import bisect
import dataclasses
import math

BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)
"""Upper bounds of the histogram's buckets, in seconds (and one more, +Inf)."""


@dataclasses.dataclass(frozen=True, slots=True)
class FreshnessSnapshot:
    """The histogram at one moment: observations per bucket (the last one above every bound),
    their count and their sum in seconds."""

    bucket_counts: tuple[int, ...]
    count: int
    sum_seconds: float

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations at or below it)`` per bucket, infinity last (Prometheus')."""
        bounds = [*BUCKETS, math.inf]
        running, pairs = 0, []
        for bound, count in zip(bounds, self.bucket_counts, strict=True):
            running += count
            pairs.append((bound, running))
        return pairs


EMPTY = FreshnessSnapshot((0,) * (len(BUCKETS) + 1), 0, 0.0)


class FreshnessHistogram:
    """Observed by the materializer thread only; :attr:`snapshot` is replaced whole, so a reader on
    another thread always sees a consistent one."""

    def __init__(self) -> None:
        self._counts = [0] * (len(BUCKETS) + 1)
        self._count = 0
        self._sum = 0.0
        self.snapshot = EMPTY

    def observe(self, oldest_timestamp_ms: int | None, visible_at: float) -> None:
        """One applied batch: ``visible_at`` (seconds since the epoch) minus its oldest timestamp."""
        if oldest_timestamp_ms is None:
            return
        delay = max(0.0, visible_at - oldest_timestamp_ms / 1000)
        self._counts[bisect.bisect_left(BUCKETS, delay)] += 1
        self._count += 1
        self._sum += delay
        self.snapshot = FreshnessSnapshot(tuple(self._counts), self._count, self._sum)
