"""Paging, written once: prefix scans and index lookups read page after page the same way.

A listing answers a page of items and a cursor to the next page (``next_after``). Later pages demand
at least every position seen so far (the ``min_position`` floor), so a listing never goes back in
time; with ``as_of`` every page reads exactly that position, so the whole listing is one version.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

import httpx

from clients import wire
from clients.flow import Emit, Flow
from clients.wire import Call
from wire.position import Position, PositionLike

CursorT = TypeVar("CursorT")

Send = Callable[[Call], Flow[httpx.Response]]
"""How a page is sent: a call's retrying flow (``flow.sent``, with the deadline that applies)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Page(Generic[CursorT]):
    """One page: its items, the cursor of the next page (``None`` after the last), the next floor."""

    items: Iterable[Any]
    after: CursorT | None
    floor: Position | None


@dataclasses.dataclass(frozen=True, slots=True)
class Pager(Generic[CursorT]):
    """One listing: the call for the page after a cursor at a floor, and how to read a page's body."""

    call: Callable[[CursorT | None, Position | None], Call]
    decode: Callable[[Any], tuple[Iterable[Any], CursorT | None]]
    as_of: PositionLike | None

    def page(self, send: Send, after: CursorT | None, floor: Position | None) -> Flow[Page[CursorT]]:
        """The page after ``after``, read at least at ``floor`` (or exactly ``as_of``)."""
        response = yield from send(self.call(after, floor))
        items, following = self.decode(wire.json_body(response))
        return Page(items, following, self.floor_after(floor, wire.position_of(response)))

    def every_page(self, send: Send, after: CursorT | None, floor: Position | None) -> Flow[None]:
        """Every item from the page after ``after`` to the last, emitted page by page."""
        while True:
            page = yield from self.page(send, after, floor)
            yield Emit(page.items)
            if page.after is None:
                return
            after, floor = page.after, page.floor

    def floor_after(self, floor: Position | None, seen: Position | None) -> Position | None:
        """The floor for the next page: at least every position seen so far, unless reads are exact."""
        if seen is None or self.as_of is not None:
            return floor
        return seen if floor is None else floor.merged(seen)

    def with_items(self, convert: Callable[[Any], Any]) -> Pager[CursorT]:
        """This listing with every item passed through ``convert`` (lazily, as the caller reads)."""
        decode = self.decode

        def converted(body: Any) -> tuple[Iterable[Any], CursorT | None]:
            items, after = decode(body)
            return map(convert, items), after

        return dataclasses.replace(self, decode=converted)
