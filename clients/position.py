"""Positions as the clients see them: the next offset per partition of one table version.

Written ``partition:next_offset`` pairs joined by commas in ascending partition order, e.g.
``0:1200,1:1187,2:1211`` (the ``Statestore-Position`` header and the ``min_position`` parameter).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

# One ``partition:next_offset`` entry; ``\d`` and ``int()`` would take digits of any script.
_ENTRY = re.compile(r"[ \t]*([0-9]{1,19}):([0-9]{1,19})[ \t]*")
_MAX_PARTITION = 2**31 - 1  # Kafka partitions are int32, offsets int64
_MAX_OFFSET = 2**63 - 1


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
        """Parse ``"0:1200,1:1187"``; an empty string is the empty position.

        As strict as the service: ASCII digits only, each partition once, no empty entries;
        spaces and tabs may surround entries.
        """
        if not text.strip(" \t"):
            return cls()
        offsets: dict[int, int] = {}
        for part in text.split(","):
            match = _ENTRY.fullmatch(part)
            if match is None:
                raise ValueError(
                    f"position entry {part!r} is not partition:next_offset in ASCII digits"
                    " (e.g. 0:1200,1:1187)"
                )
            partition, next_offset = int(match[1]), int(match[2])
            if partition > _MAX_PARTITION or next_offset > _MAX_OFFSET:
                raise ValueError(f"position entry {part.strip()!r} is beyond Kafka's range")
            if partition in offsets:
                raise ValueError(f"position names partition {partition} twice")
            offsets[partition] = next_offset
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
