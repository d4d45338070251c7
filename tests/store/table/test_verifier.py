"""The verifier's pass logic and pacing (a scripted target and a clock the test moves), and the
byte rate a real store's tuning sets. Corruption found by a real pass over real RocksDB files is
tested in tests/faults/test_corruption.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

import store.lifecycle.store as store_module
from store import Store
from store.table.verifier import Verifier, VerifyStep, VerifyTarget
from tests.support.stores import FAST, produce_tracked


class ScriptedTarget:
    """Families of ``pages`` pages each; ``swap_at`` answers from another copy from that step on;
    ``gone_at`` has no copy to verify from that step on."""

    name = "scripted"
    column_families = ("default", "meta")

    def __init__(self, pages: int = 3, swap_at: int | None = None, gone_at: int | None = None) -> None:
        self.pages = pages
        self.swap_at = swap_at
        self.gone_at = gone_at
        self.asked: list[tuple[str, bytes | None]] = []

    def verify_step(self, family: str, start: bytes | None, max_entries: int) -> VerifyStep | None:
        step = len(self.asked)
        self.asked.append((family, start))
        if self.gone_at is not None and step >= self.gone_at:
            return None
        copy = "new" if self.swap_at is not None and step >= self.swap_at else "old"
        page = 0 if start is None else int(start)
        next_start = None if page + 1 == self.pages else str(page + 1).encode()
        return VerifyStep(copy, next_start, max_entries, 10)


def test_a_pass_reads_every_page_of_every_family_in_order_and_counts_once() -> None:
    target = ScriptedTarget(pages=3)
    verifier = Verifier(target, 3600, 1 << 30)
    assert verifier.verify_once()
    assert target.asked == [
        ("default", None),
        ("default", b"1"),
        ("default", b"2"),
        ("meta", None),
        ("meta", b"1"),
        ("meta", b"2"),
    ]
    assert verifier.passes == 1
    assert verifier.last_pass_ended is not None


@pytest.mark.parametrize(
    "target", [ScriptedTarget(swap_at=4), ScriptedTarget(gone_at=2)], ids=["swapped", "gone"]
)
def test_a_pass_over_a_copy_that_was_replaced_or_is_gone_does_not_count(target: ScriptedTarget) -> None:
    verifier = Verifier(target, 3600, 1 << 30)
    assert not verifier.verify_once()
    assert verifier.passes == 0
    assert len(target.asked) == (target.swap_at or target.gone_at or 0) + 1


def test_verification_needs_a_positive_interval_and_rate() -> None:
    with pytest.raises(ValueError, match="disable"):
        Verifier(ScriptedTarget(), 0, 1)
    with pytest.raises(ValueError, match="disable"):
        Verifier(ScriptedTarget(), 1, 0)


class FakeClock:
    """A clock that moves only when told: by each pause of the verifier, and by ``step_seconds``
    at every page read (the time the read itself takes)."""

    def __init__(self, step_seconds: float = 0.0) -> None:
        self.now = 0.0
        self.step_seconds = step_seconds
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


class TimedTarget(ScriptedTarget):
    """A scripted target whose every page read takes ``clock.step_seconds``."""

    def __init__(self, clock: FakeClock, pages: int = 3) -> None:
        super().__init__(pages=pages)
        self.clock = clock

    def verify_step(self, family: str, start: bytes | None, max_entries: int) -> VerifyStep | None:
        self.clock.now += self.clock.step_seconds
        return super().verify_step(family, start, max_entries)


@pytest.mark.parametrize(("rate", "pause"), [(20, 0.5), (40, 0.25), (5, 2.0)])
def test_a_pass_is_paced_to_the_byte_rate(rate: int, pause: float) -> None:
    # Six pages of 10 bytes each: at ``rate`` bytes a second the pass takes 60 / rate seconds,
    # every page waiting out its share.
    clock = FakeClock()
    target = TimedTarget(clock)
    verifier = Verifier(target, 3600, rate, clock=clock, pause=clock.pause)
    assert verifier.verify_once()
    assert clock.pauses == pytest.approx([pause] * 6)
    assert clock.now == pytest.approx(60 / rate)
    assert verifier.last_pass_ended == pytest.approx(60 / rate)


def test_reads_slower_than_the_rate_are_not_paused_and_faster_ones_wait_only_the_difference() -> None:
    slow = FakeClock(step_seconds=1.0)  # 10 bytes a second, below the 20 allowed
    assert Verifier(TimedTarget(slow), 3600, 20, clock=slow, pause=slow.pause).verify_once()
    assert slow.pauses == []
    assert slow.now == pytest.approx(6.0)
    quick = FakeClock(step_seconds=0.125)  # each page may take 0.5 s at 20 bytes a second
    assert Verifier(TimedTarget(quick), 3600, 20, clock=quick, pause=quick.pause).verify_once()
    assert quick.pauses == pytest.approx([0.375] * 6)
    assert quick.now == pytest.approx(3.0)


def test_the_default_pause_is_cut_short_by_stop() -> None:
    # One page of 10 bytes at 1 byte a second would pause 10 s; stop() ends the pass at once.
    clock = FakeClock()
    target = TimedTarget(clock, pages=2)
    verifier = Verifier(target, 3600, 1, clock=clock)
    outcome: list[bool] = []
    worker = threading.Thread(target=lambda: outcome.append(verifier.verify_once()))
    worker.start()
    while not target.asked:
        time.sleep(0.01)
    verifier.stop()
    worker.join(30)
    assert outcome == [False]
    assert target.asked == [("default", None)]
    assert verifier.passes == 0


def test_a_real_store_is_verified_at_the_byte_rate_its_tuning_sets(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = make_topic(partitions=2)
    records = [(b"key-%05d" % i, b"v" * 200) for i in range(3_000)]
    end = produce_tracked(producer, topic, records)
    clock = FakeClock()
    made: list[PacedVerifier] = []

    class PacedVerifier(Verifier):
        """The store's verifier, on the test's clock, counting the bytes of every page it reads."""

        def __init__(self, target: VerifyTarget, interval_seconds: float, bytes_per_second: int) -> None:
            self.settings = (interval_seconds, bytes_per_second)
            self.read = 0
            verify_step = target.verify_step

            def counted(family: str, start: bytes | None, max_entries: int) -> VerifyStep | None:
                step = verify_step(family, start, max_entries)
                self.read += step.bytes if step is not None else 0
                return step

            monkeypatch.setattr(target, "verify_step", counted)
            super().__init__(target, interval_seconds, bytes_per_second, clock=clock, pause=clock.pause)
            made.append(self)

    monkeypatch.setattr(store_module, "Verifier", PacedVerifier)
    rate = 256 * 1024
    store = make_store(
        topic, tuning=FAST.replace(verify_interval_seconds=3_600, verify_bytes_per_second=rate)
    )
    assert store.wait_for_position(end, 60), store.status()
    [verifier] = made
    assert verifier.settings == (3_600, rate)
    # The store's own first pass (begun at its start, on the same clock) ends before this one;
    # the next waits an hour.
    deadline = time.monotonic() + 60
    while verifier.passes < 1:
        assert time.monotonic() < deadline, "the store's first verification pass never ended"
        time.sleep(0.01)
    # A pass over the whole copy (the first may have found it nearly empty).
    read_before, paused_before = verifier.read, clock.now
    assert verifier.verify_once()
    read = verifier.read - read_before
    assert read >= sum(len(key) + len(value) for key, value in records)
    # Every byte read was paid for at the configured rate, to the byte.
    assert clock.now - paused_before == pytest.approx(read / rate)
