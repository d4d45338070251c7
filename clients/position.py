"""Positions as the clients see them: the next offset per partition of one table version.

Written ``partition:next_offset`` pairs joined by commas in ascending partition order, e.g.
``0:1200,1:1187,2:1211`` (the ``Statestore-Position`` header and the ``min_position`` parameter).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping


class Position(Mapping[int, int]):
    """An immutable mapping ``partition -> next_offset``."""

    __slots__ = ("_offsets",)

    def __init__(self, offsets: Mapping[int, int] | None = None) -> None:
        items = dict(offsets or {})
        for partition, next_offset in items.items():
            if partition < 0 or next_offset < 0:
                raise ValueError(f"position entry {partition}:{next_offset} is negative")
        self._offsets = dict(sorted(items.items()))

    @classmethod
    def parse(cls, text: str) -> Position:
        """Parse ``"0:1200,1:1187"``; an empty string is the empty position."""
        offsets: dict[int, int] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            partition, sep, offset = part.partition(":")
            if not sep:
                raise ValueError(f"position entry {part!r} is not partition:next_offset (e.g. 0:1200,1:1187)")
            try:
                offsets[int(partition)] = int(offset)
            except ValueError as exc:
                raise ValueError(f"position entry {part!r} is not two integers (e.g. 0:1200)") from exc
        return cls(offsets)

    @classmethod
    def of(cls, value: str | Mapping[int, int]) -> Position:
        """A position from its text form or any mapping."""
        if isinstance(value, Position):
            return value
        return cls.parse(value) if isinstance(value, str) else cls(value)

    def __str__(self) -> str:
        return ",".join(f"{p}:{o}" for p, o in self._offsets.items())

    def __repr__(self) -> str:
        return f"Position({str(self)!r})"

    def __getitem__(self, partition: int) -> int:
        return self._offsets[partition]

    def __iter__(self) -> Iterator[int]:
        return iter(self._offsets)

    def __len__(self) -> int:
        return len(self._offsets)

    def __hash__(self) -> int:
        return hash(tuple(self._offsets.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self._offsets == dict(other)
        return NotImplemented

    def reaches(self, minimum: Mapping[int, int]) -> bool:
        """True when at or past ``minimum`` on every partition it names (unknown partitions count as 0)."""
        return all(self._offsets.get(p, 0) >= o for p, o in minimum.items())

    def merged(self, other: Mapping[int, int]) -> Position:
        """The per-partition maximum of both positions."""
        merged = dict(self._offsets)
        for p, o in other.items():
            merged[p] = max(merged.get(p, 0), o)
        return Position(merged)


PositionLike = str | Mapping[int, int]
"""What ``min_position=`` accepts: the text form, a mapping, or a :class:`Position`."""
