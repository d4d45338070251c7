"""Pages of a store's whole history: every key's rows, from which a read as of any time is answered.

A point-in-time join that needs most of a store's keys reads its history whole, in key order, and
answers its rows' times itself, instead of one seek per row (``store.table.timed_reader``). A page
is read from a time view's snapshots (the ``history`` family and the table, taken together), and
holds, per key in byte order, the rows that answer it as of any time ``T`` at or above the time
floor: **the first row of the key whose time is at or below ``T``** (a row without a time counts
for every time) holds the answer, and no such row means absent. The rows are the key's versions
below the view's position, newest time first (ties: newest offset first, then lowest partition),
which is how the ``history`` family orders them, so the first one is the version with the
greatest ``(timestamp, offset)`` at or below ``T`` (KIP-889). What the per-key read weighs beside
that (``store.table.timed_reader``) is settled here once for every time:

* A key's *base* version (its value before history began, time unknown but at most its
  partition's pre-history bound, itself at most the floor) is its last row, without a time. A key
  with bases on several partitions keeps the first one (the one a seek lands on) as its row, and
  takes the pre-history bound of the last one (the one the versions are weighed against).
* A version stamped below that bound may be older or newer than the base: a time whose answer it
  would be is refused (``unsettled``), as the per-key read refuses it.
* A key without a version below the position (never written since history began) has one row
  without a time: its table value.

Only the versions read from the ``history`` family are walked one by one in Python (three calls
each); they are parsed at once with numpy.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from store.protocol import EVERY_TIME, HistoryRows
from store.table import timed
from store.table.corruption import check_status
from store.table.history_keys import KEYED_PUT, PUT, escape
from store.table.snapshot_reader import prefix_upper_bound

CHUNK = 256
"""Versions read between two checks of the page's bytes."""

# ``~timestamp | ~(offset + 1) | partition`` of a version key (``store.table.history_keys``).
_FIELDS = np.dtype([("time", ">u8"), ("offset", ">u8"), ("partition", ">i4")])
_SUFFIX = _FIELDS.itemsize
_TIME_TOP = np.uint64(2**63 - 1)
_OFFSET_TOP = np.uint64(2**64 - 1)
_NO_TIME = np.int64(EVERY_TIME)  # also ``timed.NO_TIME``: below every record's time


def history_page(
    history: Any,
    table: Any,
    as_of: Mapping[int, int] | None,
    bounds: timed.TimeBounds,
    after: bytes | None,
    limit: int,
    max_bytes: int,
) -> HistoryRows | None:
    """The rows (module doc) of the keys after ``after``: about ``limit`` versions and at most
    ``limit`` keys without one, whole keys only. ``history`` and ``table`` are iterators of one view
    (re-seeked); only versions below ``as_of`` count (``None``: every one). ``None`` when the values
    read pass ``max_bytes``."""
    start = b"" if after is None else prefix_upper_bound(escape(after)) or b""
    read = _versions(history, start, limit, max_bytes)
    if read is None:
        return None
    history_keys, stored, history_done = read
    versions = _Versions(history_keys, stored)
    end = None if history_done or not versions.group_keys else versions.group_keys[-1]
    table_read = _table(table, after, end, limit, max_bytes)
    if table_read is None:
        return None
    walked, table_done = table_read
    if not table_done:  # the table's keys end the page before the versions read do
        end = walked[-1][0]
        versions.cut(end)
    rows = _rows(versions, dict(walked), as_of, bounds)
    if sum(map(len, filter(None, rows.values))) > max_bytes:
        return None
    return HistoryRows(rows.keys, rows.counts, rows.times, rows.values, rows.unsettled, end, bounds.floor)


def _versions(
    history: Any, start: bytes, limit: int, max_bytes: int
) -> tuple[list[bytes], list[bytes], bool] | None:
    """About ``limit`` versions from ``start`` (the last key's all), and whether none is left."""
    keys: list[bytes] = []
    stored: list[bytes] = []
    add_key, add_stored = keys.append, stored.append
    valid, key_of, value_of, step = history.valid, history.key, history.value, history.next
    history.seek(start)
    size = 0
    while valid() and len(keys) < limit:
        first = len(stored)
        for _ in range(min(CHUNK, limit - first)):  # the lean loop: fields parsed afterwards, at once
            if not valid():
                break
            add_key(key_of())
            add_stored(value_of())
            step()
        size += sum(map(len, stored[first:]))
        if size > max_bytes:
            return None
    if keys and valid():  # the last key's other versions: a key's rows come together
        last = keys[-1][:-_SUFFIX]
        while valid() and key_of().startswith(last):
            add_key(key_of())
            add_stored(value_of())
            size += len(stored[-1])
            if size > max_bytes:
                return None
            step()
    done = not valid()
    if done:
        check_status(history)  # the walk ended at the end of the family or on a failed read
    return keys, stored, done


def _table(
    table: Any, after: bytes | None, end: bytes | None, limit: int, max_bytes: int
) -> tuple[list[tuple[bytes, bytes]], bool] | None:
    """The table's entries after ``after`` up to ``end`` (``None``: the last), at most ``limit``,
    and whether that reached ``end``; ``None`` once their values pass ``max_bytes``."""
    walked: list[tuple[bytes, bytes]] = []
    valid, key_of, value_of, step = table.valid, table.key, table.value, table.next
    table.seek(b"" if after is None else after + b"\x00")
    size = 0
    while valid():
        key = key_of()
        if end is not None and key > end:
            return walked, True
        if len(walked) == limit:
            return walked, False
        value = value_of()
        size += len(value)
        if size > max_bytes:
            return None
        walked.append((key, value))
        step()
    check_status(table)
    return walked, True


class _Versions:
    """The versions read, grouped by key: ``starts`` (each key's first) and ``group_keys``."""

    def __init__(self, history_keys: list[bytes], stored: list[bytes]) -> None:
        prefixes = [key[:-_SUFFIX] for key in history_keys]
        self.history_keys, self.stored = history_keys, stored
        self.starts = [i for i in range(len(prefixes)) if i == 0 or prefixes[i] != prefixes[i - 1]]
        self.group_keys = [prefixes[i][:-2].replace(b"\x00\xff", b"\x00") for i in self.starts]

    def cut(self, end: bytes) -> None:
        """Keep the keys up to ``end``."""
        kept = bisect.bisect_right(self.group_keys, end)
        cut = self.starts[kept] if kept < len(self.starts) else len(self.history_keys)
        self.history_keys, self.stored = self.history_keys[:cut], self.stored[:cut]
        self.starts, self.group_keys = self.starts[:kept], self.group_keys[:kept]


class _Rows:
    """A page's rows while they are put together (``HistoryRows``)."""

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.counts: npt.NDArray[np.int64] = np.zeros(0, np.int64)
        self.times: npt.NDArray[np.int64] = np.zeros(0, np.int64)
        self.values: list[bytes | None] = []
        self.unsettled: npt.NDArray[np.bool_] = np.zeros(0, np.bool_)


def _rows(
    versions: _Versions, table: dict[bytes, bytes], as_of: Mapping[int, int] | None, bounds: timed.TimeBounds
) -> _Rows:
    """The rows of the versions read and of the table's keys without one, in key order."""
    history_keys, stored, starts, group_keys = (
        versions.history_keys, versions.stored, versions.starts, versions.group_keys,
    )  # fmt: skip
    fields = np.frombuffer(b"".join([key[-_SUFFIX:] for key in history_keys]), _FIELDS)
    is_base = fields["offset"] == _OFFSET_TOP
    times = np.where(is_base, _NO_TIME, (_TIME_TOP - fields["time"]).astype(np.int64))
    offsets = (_OFFSET_TOP - fields["offset"]).astype(np.int64) - 1
    partitions = fields["partition"].astype(np.int64)
    counted = np.ones(len(history_keys), np.bool_)
    if as_of is not None:
        for partition in np.unique(partitions).tolist():
            on = partitions == partition
            counted[on] = offsets[on] < as_of.get(partition, 0)
    kept, unsettled = _settled(times, is_base, partitions, counted, starts, bounds)
    group_of = np.repeat(np.arange(len(starts)), np.diff([*starts, len(history_keys)]))
    # Keys without a version below the position: the table's value, for every time.
    versioned = {group_keys[group] for group in np.unique(group_of[kept]).tolist()}
    plain = [key for key in table if key not in versioned]  # in key order, as walked
    order_of = {key: rank for rank, key in enumerate(sorted([*versioned, *plain]))}
    rank_of_group = np.asarray([order_of.get(key, -1) for key in group_keys], np.int64)
    ranks = np.concatenate(
        [rank_of_group[group_of[kept]], np.asarray([order_of[k] for k in plain], np.int64)]
    )
    order = np.argsort(ranks, kind="stable")
    rows = _Rows()
    rows.keys = list(order_of)
    rows.counts = np.bincount(ranks, minlength=len(order_of)).astype(np.int64)
    rows.times = np.concatenate([times[kept], np.full(len(plain), _NO_TIME)])[order]
    rows.unsettled = np.concatenate([unsettled[kept], np.zeros(len(plain), np.bool_)])[order]
    values = _answers(stored, kept.tolist())
    if plain:  # else every row is a version's, already in key order
        values += [table[key] for key in plain]
        values = [values[i] for i in order.tolist()]
    rows.values = values
    return rows


def _answers(stored: list[bytes], kept: list[int]) -> list[bytes | None]:
    """The values of the versions at the places ``kept`` (``None`` for a tombstone)."""
    # A stored version's value (``1 | timestamp | value``, under a key schema id ``3 | timestamp |
    # schema id | value``; a tombstone: ``0`` or ``2``), inline: this runs once for every version read.
    return [
        v[9:] if v[:1] == PUT else (v[13:] if v[:1] == KEYED_PUT else None)
        for v in map(stored.__getitem__, kept)
    ]


def _settled(
    times: npt.NDArray[np.int64],
    is_base: npt.NDArray[np.bool_],
    partitions: npt.NDArray[np.int64],
    counted: npt.NDArray[np.bool_],
    starts: list[int],
    bounds: timed.TimeBounds,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """The versions kept as rows (their places, in order), and which of all read are unsettled."""
    count = len(times)
    if not count:
        return np.zeros(0, np.int64), np.zeros(0, np.bool_)
    place = np.arange(count)
    group_of = np.repeat(np.arange(len(starts)), np.diff([*starts, count]))
    bases = counted & is_base
    first_base = np.minimum.reduceat(np.where(bases, place, count), starts)
    last_base = np.maximum.reduceat(np.where(bases, place, -1), starts)
    bound = np.full(len(starts), _NO_TIME)
    has_base = last_base >= 0
    base_partitions = partitions[np.where(has_base, last_base, 0)]
    for partition in np.unique(base_partitions[has_base]).tolist():
        bound[has_base & (base_partitions == partition)] = bounds.base_times.get(partition, timed.NO_TIME)
    unsettled = counted & ~is_base & (times < bound[group_of])
    kept = counted & (~is_base | (place == first_base[group_of]))
    return np.nonzero(kept)[0], unsettled
