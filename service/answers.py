"""Reads bounded by the size of their answer (``limits.max_answer_bytes``), refused before it is built.

A small request can ask for a huge answer: a batch naming a 1 MiB value 1,000 times, or a page of
10,000 large values. So the values are read in chunks and their bytes counted as they come (a key
asked several times counts each time, though it is read once); as soon as the answer would pass
the bound, the read stops with ``413 answer-too-large``. A refused answer has read at most one
chunk past the bound, and has built nothing. With ``fields=`` the values are counted as projected:
the bound is on what the answer carries. An answer that parses its fields straight out of the stored
values (:func:`stored_first`) counts them as stored while they fit, and as projected past that.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from service.bodies import too_large
from store import ReadOnlyKeyValueStore, ScanPage
from wire.problems import ANSWER_TOO_LARGE

GET_CHUNK = 1024
"""Distinct keys read at once by a batch get."""
SCAN_CHUNK = 256
"""Items read at once by a page of a scan or an index read."""


Shape = Callable[[Sequence[bytes | None]], list[bytes | None]]
"""Stored values as the answer carries them (``fields=``: service.projection)."""

T = TypeVar("T")


class AnswerBudget:
    """The bytes of values an answer may still carry; ``413 answer-too-large`` once they are spent.

    With a ``shape`` (a projection), the values are counted as answered, not as stored."""

    __slots__ = ("left", "limit", "shape")

    def __init__(self, limit: int, shape: Shape | None = None) -> None:
        self.limit = limit
        self.left = limit
        self.shape = shape

    def fresh(self) -> AnswerBudget:
        """A full budget of the same bound and shape."""
        return type(self)(self.limit, self.shape)

    def take(self, values: list[bytes | None]) -> list[bytes | None]:
        """``values`` as answered, spent from the budget."""
        if self.shape is not None:
            values = self.shape(values)
        self.spend(_size(values))
        return values

    def spend(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise too_large(
                ANSWER_TOO_LARGE,
                f"the answer would carry more than {self.limit} bytes of values (limits.max_answer_bytes);"
                " ask for fewer keys or a smaller page at once",
                self.limit,
            )


class StoredPastBound(Exception):
    """The values read pass the answer's bound as stored (:class:`StoredBudget`)."""


class StoredBudget(AnswerBudget):
    """A budget counting the values as stored, which raises :class:`StoredPastBound` instead of
    ``413`` once they pass the bound: the answer may still fit as projected."""

    __slots__ = ()

    def spend(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise StoredPastBound


def stored_first(read: Callable[[AnswerBudget], T], budget: AnswerBudget) -> T:
    """``read(budget)``, its values as stored while they fit ``budget``'s bound as stored, else as
    ``budget`` shapes them (projected), and refused only if they pass it so too.

    For an answer that takes the fields of ``fields=`` from the stored values itself (a typed
    Arrow answer: the parse into the projected struct skips the other fields), projecting each
    value first to count its bytes would cost more than the parse. The stored values bound what
    the answer holds as well: they are what it parses. Past the bound as stored, the values are
    read again, projected and counted as before, so an answer that fits as projected is answered
    as before (no answer refused that would not have been without this)."""
    try:
        return read(StoredBudget(budget.limit))
    except StoredPastBound:
        return read(budget)


def _size(values: Sequence[bytes | None]) -> int:
    try:  # every key present (the usual batch): no test per value
        return sum(map(len, values))  # type: ignore[arg-type]
    except TypeError:  # len(None)
        return sum(map(len, filter(None, values)))


def read_keys(view: ReadOnlyKeyValueStore, keys: list[bytes], budget: AnswerBudget) -> list[bytes | None]:
    """The values of ``keys`` in request order, each distinct key read once, within ``budget``."""
    # One pass finds the distinct keys, and keeps them for the mapping back when some repeat.
    found: dict[bytes, bytes | None] = dict.fromkeys(keys)
    if len(found) == len(keys):
        if len(keys) <= GET_CHUNK:  # the usual batch: one read, one sum
            return budget.take(view.get_many(keys))
        return _read_chunks(view, keys, budget)
    # Read each distinct key once (stopping early if even those pass the bound), then count the
    # answer as asked: the list holds references, so nothing is copied before the count.
    distinct = list(found)
    if len(distinct) <= GET_CHUNK:
        # One read: the count of the answer below bounds it as the distinct values' count would.
        read = view.get_many(distinct)
        shown = read if budget.shape is None else budget.shape(read)
    else:
        shown = _read_chunks(view, distinct, budget.fresh())
    found.update(zip(distinct, shown, strict=True))
    values = list(map(found.__getitem__, keys))
    budget.spend(_size(values))
    return values


def read_keys_at(
    view: ReadOnlyKeyValueStore, keys: list[bytes], times: list[int], budget: AnswerBudget
) -> list[bytes | None]:
    """The value of each key as of its own time, in request order, within ``budget``.

    ``view`` is a time view (taken with ``at_time``, at the earliest time).
    """
    # Not ``isinstance(view, TimedKeyValueStore)``: a protocol check costs a dozen calls a read.
    get_many_at: Callable[[list[bytes], list[int]], list[bytes | None]] | None = getattr(
        view, "get_many_at", None
    )
    assert get_many_at is not None, "a read with per-key times needs a time view"
    if len(keys) <= GET_CHUNK:  # the usual batch: one read
        return budget.take(get_many_at(keys, times))
    values: list[bytes | None] = []
    for start in range(0, len(keys), GET_CHUNK):
        values += budget.take(get_many_at(keys[start : start + GET_CHUNK], times[start : start + GET_CHUNK]))
    return values


def _read_chunks(view: ReadOnlyKeyValueStore, keys: list[bytes], budget: AnswerBudget) -> list[bytes | None]:
    values: list[bytes | None] = []
    for start in range(0, len(keys), GET_CHUNK):
        values += budget.take(view.get_many(keys[start : start + GET_CHUNK]))
    return values


def read_page(
    scan: Callable[[bytes | None, int], ScanPage], after: bytes | None, limit: int, budget: AnswerBudget
) -> ScanPage:
    """Up to ``limit`` items of ``scan(after, n)`` (a prefix or index scan of one view) after
    ``after``, read ``SCAN_CHUNK`` at a time within ``budget``: the same page one call would give,
    its values as answered."""
    items: list[tuple[bytes, bytes]] = []
    while True:
        page = scan(after, min(SCAN_CHUNK, limit - len(items)))
        if budget.shape is None:
            budget.spend(sum(len(value) for _, value in page.items))
            items += page.items
        else:
            shown = budget.take([value for _, value in page.items])
            # A page holds no None value, and the shape keeps every value there is.
            items += [(key, value or b"") for (key, _), value in zip(page.items, shown, strict=True)]
        if page.next_after is None or len(items) >= limit or page.next_after == after:
            return ScanPage(items, page.next_after)
        after = page.next_after
