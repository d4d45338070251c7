"""A read's answer together with the position (table version) it was read at."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, NamedTuple, TypeVar

from wire.position import Position

T = TypeVar("T")


class Answer(NamedTuple, Generic[T]):
    """``value`` as the service answered it, and ``position``: its ``Statestore-Position``.

    A tuple, so ``value, position = client.get_with_position("products", "p-1")`` unpacks it. For
    an answer gathered from several requests (batches, shards), ``position`` is the per-partition
    maximum of theirs: every value was read at a version no newer than it, and a later read with
    ``min_position=answer.position`` never sees an older table. An answer for which nothing had to
    be asked (no keys) has the empty position.
    """

    value: T
    position: Position


def merged_positions(positions: Iterable[Position | None]) -> Position:
    """The per-partition maximum of ``positions`` (``None``: an answer that carried none)."""
    merged = Position()
    for position in positions:
        if position is not None:
            merged = merged.merged(position)
    return merged
