"""The executor side of one-to-many index lookups: expansion and per-task matches (Arrow only, no Spark)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from clients.index_lookup import KnownMatches, expand, index_values_array

ROW = pa.struct([("qty", pa.int64())])


def test_expand_repeats_each_row_per_match_and_numbers_its_matches() -> None:
    parents, matches = expand(pa.array([2, 0, 1, 3], pa.int64()), pa.array([10, None, 5, 0], pa.int64()))
    assert parents.to_pylist() == [0, 0, 2, 3, 3, 3]
    assert matches.to_pylist() == [10, 11, 5, 0, 1, 2]
    # A count of one with a null start is a left row kept with nulls.
    parents, matches = expand(pa.array([1, 1], pa.int64()), pa.array([None, 4], pa.int64()))
    assert parents.to_pylist() == [0, 1]
    assert matches.to_pylist() == [None, 4]
    empty_parents, empty_matches = expand(pa.array([], pa.int64()), pa.array([], pa.int64()))
    assert (len(empty_parents), len(empty_matches)) == (0, 0)


def test_known_matches_learn_runs_of_values_and_no_match_rows() -> None:
    known = KnownMatches(ROW, max_bytes=1 << 20)
    answer = pa.table(
        {
            "value": pa.array(["A", "A", "B", "C"]),
            "key": pa.array([b"p1", b"p2", None, b"p3"], pa.binary()),
            "row": pa.array([b"{}", b"{}", None, b"{}"], pa.binary()),
        }
    )
    rows = pa.array([{"qty": 1}, {"qty": 2}, None, {"qty": 3}], ROW)
    answered = known.add(answer, rows, pa.array([False, False, False, True]))
    assert answered.to_pylist() == ["A", "B", "C"]
    assert known.start.to_pylist() == [0, 2, 3]
    assert known.count.to_pylist() == [2, 0, 1]
    more = pa.table(
        {"value": pa.array(["D"]), "key": pa.array([b"p9"], pa.binary()), "row": pa.array([b"{}"])}
    )
    known.add(more, pa.array([{"qty": 9}], ROW), pa.array([False]))
    assert known.start.to_pylist() == [0, 2, 3, 4]
    assert known.index(pa.array(["D", "Z", None, "A"])).to_pylist() == [3, None, None, 0]
    # Every input row's matches, as the task takes them: inner drops B (no match) and nulls.
    places = known.index(pa.array(["B", "A", None, "C", "D"]))
    counts = pc.fill_null(known.count.take(places), 0)
    parents, matches = expand(counts, known.start.take(places))
    assert parents.to_pylist() == [1, 1, 3, 4]
    assert known.keys.take(matches).to_pylist() == [b"p1", b"p2", b"p3", b"p9"]
    left = pc.max_element_wise(counts, pa.scalar(1, pa.int64()))
    parents, matches = expand(left, known.start.take(places))
    assert parents.to_pylist() == [0, 1, 1, 2, 3, 4]
    assert known.keys.take(matches).to_pylist() == [None, b"p1", b"p2", None, b"p3", b"p9"]
    assert known.rows.take(matches).to_pylist()[0] is None
    assert not known.full
    known.reset()
    assert len(known.values) == 0


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        (pa.array(["AAPL", None]), ["AAPL", None]),
        (pa.array([b"MSFT"], pa.binary()), ["MSFT"]),
        (pa.array([42, None], pa.int64()), ["42", None]),
        (pa.array([True, False, None]), ["true", "false", None]),
    ],
)
def test_indexed_values_are_compared_as_text(column: pa.Array, expected: list[str | None]) -> None:
    assert index_values_array(column).to_pylist() == expected
