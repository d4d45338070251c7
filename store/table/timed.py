"""Reads as of a time: each key's record with the greatest timestamp at or below it (point in time).

The answer for a key as of time ``T`` is its record with the greatest ``(timestamp, offset)``
among those whose timestamp is at or below ``T`` (Kafka Streams' versioned stores, KIP-889), so
out-of-order producer timestamps are handled; a tombstone there means absent. Combined with
``as_of`` (a position), only records below the position count, which is what makes an answer
repeatable while the topic grows.

Which times are answered exactly (the *time floor*, one per store):

* A record applied before history began has no recorded version: a *base* version keeps the
  value a key had then, and the table keeps keys not written since. Their timestamps are not
  kept, only their bound per partition: the greatest timestamp applied on that partition before
  history began (``history_pretime/``). A base version's time is therefore "at most that bound".
* Pruning drops versions superseded below the position floor. Every version below the position
  floor is at or below the time floor, so for a time at or above it they are all candidates and
  only the greatest of them (by ``(timestamp, offset)``) can be the answer: pruning keeps that one
  (besides the newest below the floor, which position reads need) and drops the rest.

So the time floor is the greatest of: every partition's pre-history bound, and the timestamp of
every version that pruning has passed (``history_time_floor``). A time below it is refused
(``HistoryExpiredError``), never guessed. One case remains that no floor settles: a key whose base
version competes with a later-applied record stamped *below* the pre-history bound (a late record
behind the history start): which of the two is newer in time is unknown, so that read is refused
too. A bulk restore's chunks report the newest timestamp of each partition they hold, so the bound
holds for them as well; a chunk ingested without it (``put_bulk``) leaves the bound unknown, and the
copy answers no read as of a time until it is rebuilt from the topic.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from store.exceptions import TimeExpiredError
from store.table import families

if TYPE_CHECKING:
    from store.table.engine import Engine

_PARTITION = struct.Struct(">i")
_TIMESTAMP = struct.Struct(">q")
_PRE_TIME_PREFIX = b"history_pretime/"  # meta: partition -> greatest timestamp applied before history
_BULK_KEY = b"history_pretime_unknown"  # meta: records were ingested in bulk, their times unknown
_FLOOR_KEY = b"history_time_floor"  # meta: greatest timestamp of a version pruning has passed
NO_TIME = -(2**63)


@dataclasses.dataclass(frozen=True, slots=True)
class TimeBounds:
    """What a copy knows about the times of the records it keeps no version of.

    ``base_times``: per partition, the greatest timestamp applied before history began.
    ``pruned``: the greatest timestamp of a version pruning passed. ``known``: False after a bulk
    restore (pre-history times unknown).
    """

    base_times: Mapping[int, int]
    pruned: int = NO_TIME
    known: bool = True

    @property
    def floor(self) -> int | None:
        """The oldest time answered exactly (``None``: no time is)."""
        if not self.known:
            return None
        return max([self.pruned, *self.base_times.values()])

    def with_pruned(self, timestamp: int) -> TimeBounds:
        return dataclasses.replace(self, pruned=max(self.pruned, timestamp))


def stored_bounds(engine: Engine) -> TimeBounds:
    """The time bounds kept in the copy's meta family."""
    base = {
        _PARTITION.unpack(key[len(_PRE_TIME_PREFIX) :])[0]: _TIMESTAMP.unpack(value)[0]
        for key, value in engine.prefixed(families.META, _PRE_TIME_PREFIX)
    }
    meta = engine.family(families.META)
    floor = meta.get(_FLOOR_KEY)
    return TimeBounds(
        base,
        NO_TIME if floor is None else _TIMESTAMP.unpack(floor)[0],
        known=meta.get(_BULK_KEY) is None,
    )


def put_base_times(engine: Engine, batch: Any, times: Mapping[int, int]) -> None:
    """Add to ``batch``: the pre-history bound of each partition in ``times``."""
    meta = engine.handle(families.META)
    for partition, timestamp in times.items():
        batch.put(_PRE_TIME_PREFIX + _PARTITION.pack(partition), _TIMESTAMP.pack(timestamp), meta)


def put_bulk(engine: Engine, batch: Any) -> None:
    """Add to ``batch``: records were ingested without their timestamps."""
    batch.put(_BULK_KEY, b"", engine.handle(families.META))


def clear(engine: Engine, batch: Any) -> None:
    """Add to ``batch``: forget every time bound (the copy's records are no longer timed)."""
    meta = engine.handle(families.META)
    batch.delete_range(_PRE_TIME_PREFIX, _PRE_TIME_PREFIX[:-1] + b"0", meta)
    batch.delete(_BULK_KEY, meta)
    batch.delete(_FLOOR_KEY, meta)


def put_pruned(engine: Engine, batch: Any, timestamp: int) -> None:
    batch.put(_FLOOR_KEY, _TIMESTAMP.pack(timestamp), engine.handle(families.META))


def newest_per_partition(metas: Iterable[tuple[int, int, int]]) -> dict[int, int]:
    """The greatest timestamp of each partition's ``(partition, offset, timestamp)`` records."""
    newest: dict[int, int] = {}
    for partition, _offset, timestamp in metas:
        if timestamp > newest.get(partition, NO_TIME):
            newest[partition] = timestamp
    return newest


def check_time(store: str, at: int, bounds: TimeBounds) -> None:
    """``TimeExpiredError`` when ``at`` is below the time floor."""
    floor = bounds.floor
    if floor is None or at < floor:
        raise TimeExpiredError(store, at, floor)


def prune_keep(
    versions: Sequence[tuple[bytes, int, int, int]], newest: bytes, base_times: Mapping[int, int]
) -> list[bytes]:
    """Of the ``(history key, partition, offset, timestamp)`` versions superseded below the position
    floor by the one at history key ``newest`` (among them, and kept anyway), the history keys a
    read as of a time at or above the time floor may still need (module doc)."""
    best: tuple[int, int, bytes] | None = None
    base: bytes | None = None
    base_partition = 0
    for history_key, partition, offset, timestamp in versions:
        if offset < 0:
            base, base_partition = history_key, partition
            continue
        if best is None or (timestamp, offset) > (best[0], best[1]):
            best = (timestamp, offset, history_key)
    keep = []
    if best is not None and best[2] != newest:
        keep.append(best[2])
    if base is not None and (best is None or best[0] < base_times.get(base_partition, NO_TIME)):
        keep.append(base)
    return keep
