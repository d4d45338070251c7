"""The collector's threshold raised while stores restore, and given back after the last one."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from store.lifecycle.gc_pacing import fewer_collections


@pytest.fixture(autouse=True)
def known_thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


def test_raised_inside_and_restored_after() -> None:
    with fewer_collections(50_000):
        assert gc.get_threshold() == (50_000, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_restores_restore_after_the_last() -> None:
    first = fewer_collections(50_000)
    second = fewer_collections(80_000)
    first.__enter__()
    second.__enter__()
    assert gc.get_threshold()[0] == 80_000
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] == 80_000
    second.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)


def test_restored_after_an_exception() -> None:
    with pytest.raises(RuntimeError), fewer_collections(50_000):
        raise RuntimeError("restore failed")
    assert gc.get_threshold() == (700, 10, 10)


def test_zero_and_lower_thresholds_leave_it_alone() -> None:
    with fewer_collections(0):
        assert gc.get_threshold() == (700, 10, 10)
    with fewer_collections(500):
        assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_a_threshold_someone_else_set_meanwhile_is_kept() -> None:
    with fewer_collections(50_000):
        gc.set_threshold(2_000, 10, 10)
    assert gc.get_threshold() == (2_000, 10, 10)
