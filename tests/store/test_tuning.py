"""Tuning by concern: one frozen dataclass per concern, settable by field name whatever the group."""

from __future__ import annotations

import dataclasses

import pytest

from store import RestoreTuning, RocksDBOptions, StoreTuning


def test_replace_routes_each_setting_to_its_group_and_leaves_the_rest() -> None:
    tuned = StoreTuning().replace(block_cache_bytes=2**30, bulk_load_workers=6, read_cache_entries=0)
    assert tuned.rocksdb == RocksDBOptions(block_cache_bytes=2**30)
    assert tuned.restore == RestoreTuning(bulk_load_workers=6)
    assert tuned.read_cache_entries == 0
    assert (tuned.consumer, tuned.retry, tuned.maintenance) == (
        StoreTuning().consumer,
        StoreTuning().retry,
        StoreTuning().maintenance,
    )


def test_an_unknown_setting_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="no such tuning: block_cache_size"):
        StoreTuning().replace(block_cache_size=1)


def test_field_names_are_unique_across_groups() -> None:
    names = [
        field.name
        for group in dataclasses.fields(StoreTuning)
        if dataclasses.is_dataclass(group.default_factory)  # type: ignore[arg-type]
        for field in dataclasses.fields(group.default_factory)  # type: ignore[arg-type]
    ]
    assert len(names) == len(set(names)), names
