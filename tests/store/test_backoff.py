"""Backoff between retries: full jitter below a doubling ceiling, capped, reset, and stoppable."""

from __future__ import annotations

import threading

import pytest

from store.materializer import Backoff


class RecordingStop(threading.Event):
    """A stop event that records how long each wait asked for instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.waits.append(timeout)
        return False


def test_waits_double_up_to_the_maximum_with_jitter_in_the_upper_half() -> None:
    stop = RecordingStop()
    backoff = Backoff(initial=0.1, maximum=1.0)
    for _ in range(8):
        backoff.wait(stop)
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    for waited, ceiling in zip(stop.waits, ceilings, strict=True):
        assert ceiling / 2 <= waited <= ceiling


def test_reset_starts_again_from_the_initial_wait() -> None:
    stop = RecordingStop()
    backoff = Backoff(initial=0.1, maximum=10.0)
    for _ in range(5):
        backoff.wait(stop)
    backoff.reset()
    backoff.wait(stop)
    assert stop.waits[-1] <= 0.1


@pytest.mark.timeout(30)
def test_a_set_stop_event_ends_the_wait() -> None:
    stop = threading.Event()
    stop.set()
    Backoff(initial=3600.0, maximum=3600.0).wait(stop)  # would hang past the test timeout otherwise
