"""The table's keys counted exactly, at a position: what a client decides a whole-store read by.

RocksDB's ``rocksdb.estimate-num-keys`` adds up the entries of the memtables and files, so the
overwrites and deletes not compacted yet inflate it (a 100,000-key store whose keys were written
ten times said 332,926). Keeping an exact count as records are applied would need each record's
previous presence: a read of every key written, which costs more than writing it (measured here:
2.9 µs a key by multi-get, against 1.9 µs a record by write batch). Instead the materializer counts
the keys of one iterator's view (an exact position: nothing is written while it takes the view), a
page at a time between its polls (0.2-0.4 µs a key: no value is copied, no block cached), and
counts again once the records applied since pass :data:`RECOUNT_SHARE` of the count. That is at
most ~1.6 µs of counting for every record applied, and meanwhile the count is off by less than that
share of it. A store whose keys are only overwritten keeps its exact count.

The count is stored in ``meta`` under ``key_count`` (``keys (8 B) | position as text``) so that a
restart need not count again; a count at a position the copy does not reach (data lost with its
memtable in a crash) is dropped.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import rocksdict

from store.exceptions import StoreError
from store.table import families
from store.table.corruption import check_status, family_get, read_error
from wire.position import Position

if TYPE_CHECKING:
    from store.table.engine import Engine

RECOUNT_SHARE = 0.25
"""The keys are counted again once the records applied since the last count pass this share of it."""

PAGE_KEYS = 50_000
"""Keys counted between two polls of the materializer (about 10-20 ms of its thread)."""

_KEY = b"key_count"  # in the meta family
_COUNT = struct.Struct(">q")


@dataclasses.dataclass(frozen=True, slots=True)
class KeyCount:
    """``keys`` keys held a value at ``position`` (tombstoned keys not counted)."""

    keys: int
    position: Position


def records_since(counted: Mapping[int, int], position: Mapping[int, int]) -> int | None:
    """Offsets ``position`` is past ``counted`` (every record applied since, and more: offsets of
    records compacted away or of transaction markers); ``None`` when ``position`` is behind it."""
    if not Position(position).reaches(counted):
        return None
    return sum(offset - counted.get(partition, 0) for partition, offset in position.items())


def stored_count(engine: Engine, position: Position) -> KeyCount | None:
    """The count stored with the copy, if ``position`` (the copy's) reaches it."""
    stored = family_get(engine.family(families.META), _KEY)
    if stored is None or len(stored) < _COUNT.size:
        return None
    count = KeyCount(_COUNT.unpack(stored[: _COUNT.size])[0], Position.parse(stored[_COUNT.size :].decode()))
    return count if records_since(count.position, position) is not None else None


class KeyCounter:
    """Counts a copy's keys, a page at a time, on the thread that writes the copy.

    ``count`` is the last completed count (``None`` until there is one); it is replaced whole, so
    that other threads may read it at any time.
    """

    def __init__(self, engine: Engine, position: Position) -> None:
        self._engine = engine
        self.count = stored_count(engine, position)
        self._iterator: Any = None  # the view being counted, while a count runs
        self._at = Position()
        self._keys = 0

    @property
    def counting(self) -> bool:
        return self._iterator is not None

    def due(self, position: Position) -> bool:
        """Whether the keys at ``position`` should be counted (again)."""
        count = self.count
        if count is None:
            return True
        since = records_since(count.position, position)
        return since is None or since > RECOUNT_SHARE * count.keys

    def step(self, position: Position, page: int = PAGE_KEYS) -> None:
        """Count up to ``page`` keys of the running count, or start one at ``position`` when due.

        Called between writes only: a count starts from a view of exactly ``position``.
        ``StoreReadError`` when a read of the table fails (the count is then dropped).
        """
        if self._iterator is None:
            if not self.due(position):
                return
            self._start(position)
        try:
            self._count_page(page)
        except BaseException:
            self.stop()
            raise

    def _start(self, position: Position) -> None:
        # One iterator for the whole count: it reads the version current when it is made (rocksdict's
        # Snapshot.iter() would not: it iterates the live database). It holds the memtables of that
        # moment in memory, and files compacted away meanwhile on disk, until the count ends.
        options = rocksdict.ReadOptions()
        options.fill_cache(False)  # a count must not push the hot blocks out
        options.set_readahead_size(2 * 1024 * 1024)
        iterator = self._engine.family(families.DEFAULT).iter(options)
        iterator.seek_to_first()
        self._iterator, self._at, self._keys = iterator, position, 0

    def _count_page(self, page: int) -> None:
        iterator = self._iterator
        counted = 0
        try:
            step, valid = iterator.next, iterator.valid
            while counted < page and valid():
                step()
                counted += 1
            more = valid()
        except StoreError:
            raise
        except Exception as exc:
            raise read_error(exc) from exc
        self._keys += counted
        if more:
            return
        check_status(iterator)  # a failed read is no end of the table
        self._finish()

    def _finish(self) -> None:
        count = KeyCount(self._keys, self._at)
        self.stop()
        engine = self._engine
        batch = engine.new_batch()
        batch.put(_KEY, _COUNT.pack(count.keys) + str(count.position).encode(), engine.handle(families.META))
        engine.write(batch)
        self.count = count

    def stop(self) -> None:
        """Drop the running count (its view holds the database open)."""
        self._iterator = None
