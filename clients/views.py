"""Views of one store tied to a position read once.

``client.pinned("products")``: every read demands at least that position (never older data).
``client.consistent("tickers")``: every read is ``as_of`` exactly that position, so it answers the
same version of the table on every replica and every retry, while the store keeps history back to it.

:class:`View` holds what both flavours share, streaming reads included; the other reads are in
``StoreView`` (:mod:`clients.client`) and ``AsyncStoreView`` (:mod:`clients.aio`), so a view of
either flavour offers the whole read API of its client.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic

from clients.base import BaseClient, ReadAt, RowsT
from clients.indexes import IndexValue
from clients.wire import Key
from wire.position import Position


class View(Generic[RowsT]):
    """One store of ``client`` and the position every read through the view is tied to."""

    exact: ClassVar[bool]
    """``True``: reads are exactly ``as_of`` the position; ``False``: at least at it (``min_position``)."""

    def __init__(self, client: BaseClient[Any, Any, RowsT], store: str, position: Position) -> None:
        self.client = client
        self.store = store
        self.position = position
        self._read: ReadAt = {"as_of": position} if self.exact else {"min_position": position}

    def __repr__(self) -> str:
        keyword = "as_of" if self.exact else "position"
        return f"{type(self).__name__}({self.store!r}, {keyword}={str(self.position)!r})"

    def scan(self, prefix: Key = "", *, page_size: int = 1000) -> RowsT:
        return self.client.scan(self.store, prefix, page_size=page_size, **self._read)

    def index_lookup(
        self, index: str, value: IndexValue, *, page_size: int = 1000, binary_keys: bool = False
    ) -> RowsT:
        return self.client.index_lookup(
            self.store, index, value, page_size=page_size, binary_keys=binary_keys, **self._read
        )


class Exact:
    """Reads exactly as of the view's position."""

    exact: ClassVar[bool] = True


class AtLeast:
    """Reads never older than the view's position."""

    exact: ClassVar[bool] = False
