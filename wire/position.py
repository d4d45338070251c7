"""Positions: the next offset to read per partition, i.e. one exact version of the table.

A position is written ``partition:next_offset`` pairs joined by commas, ordered by partition,
e.g. ``0:1200,1:1187,2:1211`` (the ``Statestore-Position`` header, the ``min_position`` and
``as_of`` parameters). Because a Kafka partition's offsets are the same on every node, a position
names the same table version on every replica. The store, the service and the clients share this
one type.
"""

from __future__ import annotations

import re
from collections.abc import ItemsView, Iterator, Mapping

from wire.exceptions import InvalidPositionError

# One ``partition:next_offset`` entry; ``\d`` and ``int()`` would take digits of any script.
_ENTRY = re.compile(r"[ \t]*([0-9]{1,19}):([0-9]{1,19})[ \t]*")
MAX_PARTITION = 2**31 - 1  # Kafka partitions are int32, offsets int64
MAX_OFFSET = 2**63 - 1


class Position(Mapping[int, int]):
    """An immutable mapping ``partition -> next_offset``."""

    __slots__ = ("_offsets",)

    def __init__(self, offsets: Mapping[int, int] | None = None) -> None:
        items = dict(offsets or {})
        for partition, next_offset in items.items():
            if partition < 0 or next_offset < 0:
                raise InvalidPositionError(
                    f"position entry {partition}:{next_offset} is negative; partitions and offsets start at 0"
                )
        self._offsets: dict[int, int] = dict(sorted(items.items()))

    @classmethod
    def of(cls, value: PositionLike) -> Position:
        """A position from its text form or any mapping (a position is returned as it is)."""
        if isinstance(value, Position):
            return value
        return cls.parse(value) if isinstance(value, str) else cls(value)

    @classmethod
    def parse(cls, text: str) -> Position:
        """Parse ``"0:1200,1:1187"``; an empty string is the empty position.

        Strict: ASCII digits only (no signs, ``_`` or digits of other scripts), each partition
        once, no empty entries; spaces and tabs may surround entries.
        """
        if not text.strip(" \t"):
            return cls()
        offsets: dict[int, int] = {}
        for part in text.split(","):
            match = _ENTRY.fullmatch(part)
            if match is None:
                what = "has no ':'" if ":" not in part else "is not two integers in ASCII digits"
                raise InvalidPositionError(
                    f"position entry {part!r} {what}; write partition:next_offset pairs joined by commas,"
                    " e.g. 0:1200,1:1187"
                )
            partition, next_offset = int(match[1]), int(match[2])
            if partition > MAX_PARTITION or next_offset > MAX_OFFSET:
                raise InvalidPositionError(f"position entry {part.strip()!r} is beyond Kafka's range")
            if partition in offsets:
                raise InvalidPositionError(f"position names partition {partition} twice")
            offsets[partition] = next_offset
        return cls(offsets)

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

    def items(self) -> ItemsView[int, int]:
        # The dict's own view: Mapping's would call __getitem__ for every partition.
        return self._offsets.items()

    def __hash__(self) -> int:
        return hash(tuple(self._offsets.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Position):
            return self._offsets == other._offsets
        if isinstance(other, Mapping):
            return self._offsets == dict(other)
        return NotImplemented

    def reaches(self, minimum: Mapping[int, int]) -> bool:
        """True when this position is at or past ``minimum`` on every partition ``minimum`` names.

        A partition this position does not know counts as offset 0.
        """
        return all(self._offsets.get(p, 0) >= o for p, o in minimum.items())

    def merged(self, other: Mapping[int, int]) -> Position:
        """The per-partition maximum of both positions."""
        merged = dict(self._offsets)
        for p, o in other.items():
            merged[p] = max(merged.get(p, 0), o)
        return Position(merged)

    def total(self) -> int:
        """Sum of next offsets over all partitions."""
        return sum(self._offsets.values())


PositionLike = str | Mapping[int, int]
"""What ``min_position=`` and ``as_of=`` accept: the text form, a mapping, or a :class:`Position`."""
