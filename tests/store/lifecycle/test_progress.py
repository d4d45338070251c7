"""What the materializer counts and times: error bookkeeping, restore progress and its log line,
backoff between retries, and periodic deadlines."""

from __future__ import annotations

import threading
import time

import pytest

from store.lifecycle.progress import Progress
from store.lifecycle.timing import Backoff, Every


def test_an_error_shows_until_work_begun_after_it_succeeds() -> None:
    progress = Progress()
    before = time.monotonic()
    progress.note_error("kafka: broker down")
    assert progress.last_error == "kafka: broker down"
    # A poll that began before the error (the error came during it) proves nothing.
    progress.note_healthy(before)
    assert progress.last_error == "kafka: broker down"
    progress.note_healthy(time.monotonic())
    assert progress.last_error is None


def test_a_newer_error_replaces_the_older_one_and_needs_its_own_recovery() -> None:
    progress = Progress()
    progress.note_error("first")
    between = time.monotonic()
    progress.note_error("second")
    progress.note_healthy(between)
    assert progress.last_error == "second"


def test_healthy_work_without_an_error_changes_nothing() -> None:
    progress = Progress()
    progress.note_healthy(time.monotonic())
    assert progress.last_error is None


def test_the_restore_line_says_at_least_until_fetches_refine_the_target_then_the_real_one() -> None:
    progress = Progress()
    progress.begin_restore({0: 600, 1: 400})
    line = progress.describe_restore({})
    assert "0% (0 records applied, 1,000 to go to at least 0:600,1:400)" in line
    assert "time left unknown yet" in line
    # The broker's ListOffsets answer was low for partition 1: fetches show 600.
    progress.raise_target({0: 600, 1: 600}, refined=True)
    progress.count(300)
    time.sleep(0.01)
    progress.count(300)
    line = progress.describe_restore({0: 600})
    assert "50% (600 records applied, 600 to go to 0:600,1:600)" in line
    assert "at least" not in line
    assert "left" in line
    assert "time left unknown" not in line


def test_fraction_and_eta_follow_the_remaining_records_and_the_rate() -> None:
    progress = Progress()
    progress.begin_restore({0: 1000})
    assert progress.fraction({}) == 0.0
    assert progress.eta_seconds({}) is None  # nothing applied yet: no rate
    progress.count(250)
    time.sleep(0.05)
    progress.count(250)
    assert progress.fraction({0: 500}) == 0.5
    eta = progress.eta_seconds({0: 500})
    assert eta is not None
    assert eta == pytest.approx(500 / progress.rate())
    # A target that only grows: the remaining records count against the same applied ones.
    progress.raise_target({0: 1500}, refined=True)
    assert progress.fraction({0: 500}) == pytest.approx(500 / 1500)


def test_every_is_due_once_per_interval() -> None:
    every = Every(5.0, now=100.0)
    assert not every.due(104.9)
    assert every.due(105.0)
    assert not every.due(109.0)
    assert every.due(110.5)
    assert not every.due(115.0)  # the next deadline counts from when it was last due
    assert every.due(115.5)


class RecordingStop(threading.Event):
    """A stop event that records how long each wait asked for instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.waits.append(timeout)
        return False


def test_backoff_waits_double_up_to_the_maximum_with_jitter_in_the_upper_half() -> None:
    stop = RecordingStop()
    backoff = Backoff(initial=0.1, maximum=1.0)
    for _ in range(8):
        backoff.wait(stop)
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    for waited, ceiling in zip(stop.waits, ceilings, strict=True):
        assert ceiling / 2 <= waited <= ceiling


def test_backoff_reset_starts_again_from_the_initial_wait() -> None:
    stop = RecordingStop()
    backoff = Backoff(initial=0.1, maximum=10.0)
    for _ in range(5):
        backoff.wait(stop)
    backoff.reset()
    backoff.wait(stop)
    assert stop.waits[-1] <= 0.1


@pytest.mark.timeout(30)
def test_a_set_stop_event_ends_the_backoff_wait() -> None:
    stop = threading.Event()
    stop.set()
    Backoff(initial=3600.0, maximum=3600.0).wait(stop)  # would hang past the test timeout otherwise
