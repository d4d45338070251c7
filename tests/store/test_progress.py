"""The materializer's error bookkeeping: an error shows until work begun after it goes through."""

from __future__ import annotations

import time

from store.materializer import Progress


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
