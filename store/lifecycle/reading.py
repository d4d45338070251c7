"""A view of a store: a reader of its served copy, pinned while the ``with`` block runs."""

from __future__ import annotations

from types import TracebackType
from typing import Protocol

from store.protocol import ReadOnlyKeyValueStore
from store.table.replica import Reader, Replica
from wire.position import Position


class Pins(Protocol):
    """Where a view's copy is pinned (``store.lifecycle.copies.Copies``)."""

    def pin(self, as_of: Position | None, at_time: int | None) -> tuple[Replica, Reader]: ...

    def unpin(self, replica: Replica, reader: Reader, error: BaseException | None) -> None: ...


class Reading:
    """``Copies.reading``: the copy is pinned (never closed or swapped out) from ``__enter__`` to
    ``__exit__``, and a read that failed in between marks it corrupt. A plain class, not a
    generator context manager: a view is taken for every read, and this costs a third of the calls."""

    __slots__ = ("_as_of", "_at_time", "_copies", "_reader", "_replica")
    _replica: Replica
    _reader: Reader

    def __init__(self, copies: Pins, as_of: Position | None, at_time: int | None) -> None:
        self._copies = copies
        self._as_of = as_of
        self._at_time = at_time

    def __enter__(self) -> ReadOnlyKeyValueStore:
        self._replica, self._reader = self._copies.pin(self._as_of, self._at_time)
        return self._reader

    def __exit__(
        self, exc_type: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._copies.unpin(self._replica, self._reader, error)
