"""Position (one type for the store, the service and the clients): parsing, formatting, ordering by
``reaches``, merging, and malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.positions import INVALID, VALID
from wire import InvalidPositionError, Position, WireError

offsets = st.dictionaries(st.integers(0, 1000), st.integers(0, 2**62), max_size=8)


def test_parse_and_format_round_trip_in_partition_order() -> None:
    position = Position.parse(" 2:1211, 0:1200 ,1:1187")
    assert str(position) == "0:1200,1:1187,2:1211"
    assert dict(position) == {0: 1200, 1: 1187, 2: 1211}
    assert list(position) == [0, 1, 2]
    assert repr(position) == "Position('0:1200,1:1187,2:1211')"


def test_empty_text_is_the_empty_position() -> None:
    assert Position.parse("") == Position()
    assert Position.parse("   ") == Position()
    assert str(Position()) == ""
    assert not Position()
    assert Position().total() == 0


@given(offsets)
def test_str_then_parse_is_identity(mapping: dict[int, int]) -> None:
    position = Position(mapping)
    assert Position.parse(str(position)) == position
    assert hash(Position.parse(str(position))) == hash(position)
    assert position == mapping
    assert position.total() == sum(mapping.values())


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("0", "has no ':'"),
        ("0:1,1", "has no ':'"),
        ("a:1", "is not two integers in ASCII digits"),
        ("0:1.5", "is not two integers in ASCII digits"),
        ("0:\u0661", "is not two integers in ASCII digits"),
        ("0:1,0:2", "names partition 0 twice"),
        ("-1:5", "is not two integers in ASCII digits"),
        ("0:1,", "has no ':'"),
        ("0:9223372036854775808", "beyond Kafka's range"),
    ],
)
def test_malformed_text_is_rejected_with_a_message_that_says_what_to_write(text: str, complaint: str) -> None:
    with pytest.raises(InvalidPositionError, match=complaint) as raised:
        Position.parse(text)
    assert isinstance(raised.value, WireError)
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize(("text", "offsets"), VALID)
def test_the_shared_valid_vectors_parse_to_their_offsets(text: str, offsets: dict[int, int]) -> None:
    assert dict(Position.parse(text)) == offsets


@pytest.mark.parametrize("text", INVALID)
def test_the_shared_invalid_vectors_are_refused(text: str) -> None:
    with pytest.raises(InvalidPositionError):
        Position.parse(text)


def test_negative_entries_are_rejected_from_mappings_too() -> None:
    with pytest.raises(InvalidPositionError):
        Position({0: -1})
    with pytest.raises(InvalidPositionError):
        Position({-2: 0})


def test_reaches_compares_only_the_partitions_the_minimum_names() -> None:
    position = Position({0: 10, 1: 5})
    assert position.reaches(Position())
    assert position.reaches({0: 10})
    assert position.reaches({0: 9, 1: 5})
    assert not position.reaches({0: 11})
    assert not position.reaches({1: 6})
    # An unknown partition counts as offset 0.
    assert position.reaches({2: 0})
    assert not position.reaches({2: 1})


@given(offsets, offsets)
def test_merged_is_the_per_partition_maximum_and_reaches_both(a: dict[int, int], b: dict[int, int]) -> None:
    merged = Position(a).merged(b)
    assert set(merged) == set(a) | set(b)
    for partition in merged:
        assert merged[partition] == max(a.get(partition, 0), b.get(partition, 0))
    assert merged.reaches(a)
    assert merged.reaches(b)
    assert Position(a).merged(b) == Position(b).merged(a)


def test_positions_are_immutable_mappings() -> None:
    position = Position({1: 3})
    with pytest.raises(TypeError):
        position[1] = 4  # type: ignore[index]
    assert position.get(7) is None
    assert position != "1:3"


def test_of_takes_the_text_form_a_mapping_or_a_position() -> None:
    position = Position({0: 3, 1: 4})
    assert Position.of(position) is position
    assert Position.of("0:3,1:4") == position
    assert Position.of({1: 4, 0: 3}) == position
    with pytest.raises(InvalidPositionError, match="twice"):
        Position.of("0:1,0:2")


def test_the_store_and_the_clients_use_this_one_type() -> None:
    import clients  # noqa: PLC0415
    import store  # noqa: PLC0415

    assert store.Position is Position
    assert store.InvalidPositionError is InvalidPositionError
    assert clients.Position is Position
