"""Listings of a sharded store merged into one: every shard's pages, read side by side, in key order.

Each shard answers a prefix scan or an index lookup with its own keys, in byte order, page after page.
:func:`merged` reads one page of every shard, then hands the caller items in key order for as long as
every shard that has more pages still has items buffered; a shard whose buffer runs dry is asked for
its next page (all such shards at once) before anything else is handed out. So the merged listing is
byte-ordered and complete, holds at most one page per shard, and each shard's cursor and position
floor move exactly as they would for a listing of that shard alone.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Generic

from clients.flow import Emit, Flow, Together
from clients.paging import CursorT, Pager, Send
from wire.position import Position


@dataclasses.dataclass(slots=True)
class Listing(Generic[CursorT]):
    """One shard's listing: its pages, how to send them, where it is, and what it holds unread."""

    pager: Pager[CursorT]
    send: Send
    floor: Position | None
    after: CursorT | None = None
    items: deque[Any] = dataclasses.field(default_factory=deque)
    more: bool = True

    def next_page(self) -> Flow[None]:
        page = yield from self.pager.page(self.send, self.after, self.floor)
        self.items.extend(page.items)
        self.after, self.floor, self.more = page.after, page.floor, page.after is not None


def merged(listings: Sequence[Listing[Any]], key: Callable[[Any], Any]) -> Flow[None]:
    """Every item of every listing, emitted in ascending ``key`` order (keys are unique across them)."""
    while True:
        dry = [listing for listing in listings if listing.more and not listing.items]
        if dry:
            yield Together(tuple(listing.next_page() for listing in dry))
            continue
        ready = [listing for listing in listings if listing.items]
        if not ready:
            return
        out: list[Any] = []
        # Hand out items while no shard with more pages has run dry: until then its next item may
        # sort before any item buffered elsewhere.
        while True:
            first = min(ready, key=lambda listing: key(listing.items[0]))
            out.append(first.items.popleft())
            if not first.items:
                if first.more:
                    break
                ready.remove(first)
                if not ready:
                    break
        yield Emit(out)
