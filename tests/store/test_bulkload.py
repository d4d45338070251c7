"""The bulk loader's pure step: one chunk reduced to its last record per key, in byte order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from store.sst_worker import sorted_last_per_key

records = st.lists(st.tuples(st.binary(max_size=3), st.one_of(st.none(), st.binary(max_size=4))), max_size=60)


def test_last_occurrence_wins_and_tombstones_are_kept_as_none() -> None:
    keys, values = sorted_last_per_key([b"b", b"a", b"b", b"c", b"a"], [b"1", b"2", b"3", None, None])
    assert keys == [b"a", b"b", b"c"]
    assert values == [None, b"3", None]


def test_empty_chunk() -> None:
    assert sorted_last_per_key([], []) == ([], [])


@given(records)
def test_equals_a_dict_model(chunk: list[tuple[bytes, bytes | None]]) -> None:
    model: dict[bytes, bytes | None] = {}
    for key, value in chunk:
        model[key] = value
    keys, values = sorted_last_per_key([k for k, _ in chunk], [v for _, v in chunk])
    assert keys == sorted(model)
    assert len(set(keys)) == len(keys)
    assert dict(zip(keys, values, strict=True)) == model
