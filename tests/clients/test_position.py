"""The client's positions parse exactly what the service's do (the shared test vectors)."""

from __future__ import annotations

import pytest

from clients.position import Position
from tests.support.positions import INVALID, VALID


@pytest.mark.parametrize(("text", "offsets"), VALID)
def test_the_shared_valid_vectors_parse_to_their_offsets(text: str, offsets: dict[int, int]) -> None:
    position = Position.parse(text)
    assert dict(position) == offsets
    assert Position.parse(str(position)) == position


@pytest.mark.parametrize("text", INVALID)
def test_the_shared_invalid_vectors_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="position"):
        Position.parse(text)
