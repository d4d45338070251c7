"""RestoreProgress's derived figures: the share done and the time left."""

from __future__ import annotations

import pytest

from store import Position, RestoreMode, RestoreProgress


def progress(
    applied: int, remaining: int, rate: float, mode: RestoreMode = RestoreMode.RECORDS
) -> RestoreProgress:
    return RestoreProgress(applied, remaining, rate, Position({0: applied + remaining}), mode)


def test_share_done_counts_applied_against_applied_plus_remaining() -> None:
    assert progress(250, 750, 100.0).progress == 0.25
    assert progress(0, 1_000, 0.0).progress == 0.0
    assert progress(1_000, 0, 100.0).progress == 1.0


def test_nothing_to_restore_is_done() -> None:
    assert progress(0, 0, 0.0).progress == 1.0
    assert progress(0, 0, 0.0).eta_seconds == 0.0


def test_time_left_is_remaining_records_at_the_recent_rate() -> None:
    assert progress(500, 3_000, 1_500.0).eta_seconds == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("rate", "mode"), [(0.0, RestoreMode.RECORDS), (0.0, RestoreMode.BULK), (5_000.0, RestoreMode.WAITING)]
)
def test_time_left_is_unknown_while_nothing_moves(rate: float, mode: RestoreMode) -> None:
    assert progress(100, 900, rate, mode).eta_seconds is None


@pytest.mark.parametrize("mode", [RestoreMode.COMPACTING, RestoreMode.WARMING])
def test_time_left_is_unknown_while_the_restored_files_are_settled(mode: RestoreMode) -> None:
    # Every record is in, yet READY waits for the merge (store.lifecycle.settle): not "0 s left".
    merging = progress(1_000, 0, 5_000.0, mode)
    assert merging.progress == 1.0
    assert merging.eta_seconds is None
