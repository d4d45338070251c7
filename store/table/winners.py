"""One natural key written under several key schema ids: which record the table answers.

A store whose keys go through the Schema Registry (``key_format: avro | protobuf | json_schema``)
keeps every record under its key's natural value (``store.formats.keys``). The producer's key bytes
also hold the key schema id, so natural key ``42`` written under key schema v1 and again under v2 is
two keys to Kafka: compaction keeps the latest record of each, and the two may sit on different
partitions, read in any interleaving. The table resolves them, the same way whatever the order it
reads them in:

- per ``(natural key, schema id)`` it keeps an entry: the latest record's timestamp, partition,
  offset, and whether it is a tombstone (the latest by offset: that is Kafka's own rule for one
  byte key);
- the natural key answers the *winner*: the entry with the greatest ``(timestamp, offset,
  partition)`` across its schema ids. A tombstone deletes the natural key only when it is the
  winner; a tombstone under a schema id whose record was not the winner changes no answer.

The entries live in the ``meta`` column family under ``natural/`` + the natural key, written in the
write batch of the row they decide, so a crash loses both or neither. A live entry that is not the
winner keeps its value there (the table's row holds the winner's), so that it can answer again
when the winner is replaced by an older record or a tombstone of its own schema id.

The rows and their indexes see only the changes of the winner: a record that does not change the
answer (an older write under another schema id) is not applied to them.

**Reads of the past.** History (``store.table.history``) keeps every record of a natural key as a
version with its own value and time, also one that changes no answer now, and at a natural key's
first write after history began its entries become versions of their own (:func:`earlier`: the
latest record of each schema id from before, with their times), instead of a base version of
unknown time. So a read as of a time answers exactly the rule of a plain key over all the natural
key's records under every schema id: the greatest ``(timestamp, offset)`` at or below the time
(KIP-889); as for a plain key, as of a time past every record that can differ from the current
answer, which follows each schema id's latest record by offset. A read as of a position answers the
winner rule over the records below it: each version names the key schema id it was written under,
so the read weighs the versions of each ``(partition, schema id)`` by offset (the latest record of
that byte key, as its entry would keep it) and the latest of those against each other by
``(timestamp, offset, partition)``, also when one partition holds records of the natural key under
two schema ids and the later by offset is the older in time (a *late* record sharing a partition
with a newer one).

**Pruning.** A natural key deleted under every schema id (all its entries tombstones) is absent, but
its entries still decide a later record of another schema id stamped before them (it loses to
them). They are dropped (:func:`prune`) once that can no longer happen short of a record more than
a grace (``MaintenanceTuning.natural_tombstone_grace_ms``, Kafka's ``delete.retention.ms`` default)
out of time order on its own partition: when their newest time is older than the grace behind the
*low watermark*, the least over the partitions of the newest record time applied on each (kept in
``meta`` under ``natural_time/``, raised in each write batch; a partition without a record yet does
not count). Pruning runs once the store is READY, every partition read to its end as of the start,
and a partition whose records are older holds it back: the watermark at a position is the same
whatever order the partitions were read in. Such a late record (stamped more than the grace
before the tombstones, read after them) answers as it would in a copy restored once Kafka's cleaner
has removed the tombstones from the topic.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Sequence
from typing import Any

from store.table import corruption
from store.table.corruption import family_get
from store.table.timed import newest_per_partition

PREFIX = b"natural/"
"""The prefix of the entries' keys in the ``meta`` column family."""
_PREFIX_END = b"natural0"  # the first key past every entry ("/" + 1)
_TIME_PREFIX = b"natural_time/"  # in meta: partition -> the newest record time applied on it
_HISTORY_KEY = b"natural_history"  # in meta: how history keeps natural keys' records (``mark_history``)
_HISTORY_MARK = b"every record, with its key schema id"
_PARTITION = struct.Struct(">i")
_TIME = struct.Struct(">q")

_ENTRY = struct.Struct(">iqiqB")  # schema id, timestamp, partition, offset, kind
_LENGTH = struct.Struct(">I")
_TOMBSTONE, _LIVE, _KEPT = 0, 1, 2  # _KEPT: a live entry that is not the winner, its value follows

Meta = tuple[int, int, int]  # (partition, offset, timestamp in ms) of one record


@dataclasses.dataclass(slots=True)
class Entry:
    """The latest record of one natural key under one key schema id."""

    schema_id: int
    timestamp: int
    partition: int
    offset: int
    live: bool
    value: bytes | None = None  # set only for a live entry that is not the winner

    def rank(self) -> tuple[int, int, int]:
        """What the winner is chosen by: the greatest ``(timestamp, offset, partition)``."""
        return self.timestamp, self.offset, self.partition


def winner(entries: dict[int, Entry]) -> Entry | None:
    """The entry the natural key answers (``None``: no entry)."""
    return max(entries.values(), key=Entry.rank, default=None)


def encode(entries: dict[int, Entry]) -> bytes:
    """The stored form of a natural key's entries."""
    if len(entries) == 1:
        (entry,) = entries.values()
        if entry.value is None:  # the usual case, packed at once
            kind = _LIVE if entry.live else _TOMBSTONE
            return _ENTRY.pack(entry.schema_id, entry.timestamp, entry.partition, entry.offset, kind)
    parts = []
    for entry in entries.values():
        kind = _KEPT if entry.value is not None else (_LIVE if entry.live else _TOMBSTONE)
        parts.append(_ENTRY.pack(entry.schema_id, entry.timestamp, entry.partition, entry.offset, kind))
        if entry.value is not None:
            parts.append(_LENGTH.pack(len(entry.value)))
            parts.append(entry.value)
    return b"".join(parts)


def decode(stored: bytes | None) -> dict[int, Entry]:
    """A natural key's entries from their stored form (``None``: none yet)."""
    entries: dict[int, Entry] = {}
    if stored is not None and len(stored) == _ENTRY.size:  # the usual case: one entry, no value
        schema_id, timestamp, partition, offset, kind = _ENTRY.unpack(stored)
        entries[schema_id] = Entry(schema_id, timestamp, partition, offset, kind != _TOMBSTONE)
        return entries
    at = 0
    while stored is not None and at < len(stored):
        schema_id, timestamp, partition, offset, kind = _ENTRY.unpack_from(stored, at)
        at += _ENTRY.size
        value = None
        if kind == _KEPT:
            (length,) = _LENGTH.unpack_from(stored, at)
            at += _LENGTH.size
            value = stored[at : at + length]
            at += length
        entries[schema_id] = Entry(schema_id, timestamp, partition, offset, kind != _TOMBSTONE, value)
    return entries


def stored_entries(meta_family: Any, key: bytes) -> dict[int, Entry]:
    """The entries of natural key ``key`` as stored (for reads and tests)."""
    return decode(family_get(meta_family, PREFIX + key))


Changed = tuple[list[bytes], list[bytes | None], list[Meta]]


class Winners:
    """Resolves a batch of records under natural keys into the changes of their winners.

    ``current`` answers a row's value as stored before the batch (the materializer is the only
    writer, so no snapshot is needed); it is asked only when a winner loses to another schema id's
    record and its value must move into its entry.
    """

    def __init__(self, meta_family: Any, meta_handle: Any, current: Any) -> None:
        self._family = meta_family
        self._handle = meta_handle
        self._current = current

    def resolve(
        self,
        batch: Any,
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        metas: Sequence[Meta],
        schema_ids: Sequence[int | None],
    ) -> Changed:
        """The records to apply to rows, indexes and history; the entries' changes go to ``batch``.

        A record without a schema id (a key that could not be decoded, kept under the producer's
        bytes) is applied as it is.
        """
        named = list(dict.fromkeys(key for key, sid in zip(keys, schema_ids, strict=True) if sid is not None))
        stored = family_get(self._family, [PREFIX + key for key in named]) if named else []
        state = {key: decode(raw) for key, raw in zip(named, stored, strict=True)}
        rows: dict[bytes, tuple[bytes | None]] = {}
        out_keys: list[bytes] = []
        out_values: list[bytes | None] = []
        out_metas: list[Meta] = []
        for key, value, meta, schema_id in zip(keys, values, metas, schema_ids, strict=True):
            if schema_id is None:
                out_keys.append(key)
                out_values.append(value)
                out_metas.append(meta)
                continue
            change = self._one(state[key], rows, key, value, meta, schema_id)
            if change is not None:
                rows[key] = change
                out_keys.append(key)
                out_values.append(change[0])
                out_metas.append(meta)
        for key, kept in state.items():
            batch.put(PREFIX + key, encode(kept), self._handle)
        self._raise_times(batch, metas)
        return out_keys, out_values, out_metas

    def _raise_times(self, batch: Any, metas: Sequence[Meta]) -> None:
        """Add to ``batch``: each partition's newest record time, where this batch raises it."""
        newest = newest_per_partition(metas)
        keys = [_TIME_PREFIX + _PARTITION.pack(partition) for partition in newest]
        for key, timestamp, stored in zip(keys, newest.values(), family_get(self._family, keys), strict=True):
            if stored is None or _TIME.unpack(stored)[0] < timestamp:
                batch.put(key, _TIME.pack(timestamp), self._handle)

    def _one(
        self,
        entries: dict[int, Entry],
        rows: dict[bytes, tuple[bytes | None]],
        key: bytes,
        value: bytes | None,
        meta: Meta,
        schema_id: int,
    ) -> tuple[bytes | None] | None:
        """The row's new value (a 1-tuple: ``(None,)`` deletes it), or ``None`` when it stays."""
        partition, offset, timestamp = meta
        new = Entry(schema_id, timestamp, partition, offset, value is not None)
        if not entries or (len(entries) == 1 and schema_id in entries):
            # One schema id (the usual topic): its latest record answers, none to weigh.
            entries[schema_id] = new
            return (value,)
        before = winner(entries)
        entries[schema_id] = new
        after = winner(entries)
        if after is new:
            if before is not None and before.schema_id != schema_id and before.live:
                # The old winner's value leaves the row: its entry keeps it from now on.
                held = rows.get(key)
                before.value = held[0] if held is not None else self._current(key)
            return (value,)
        new.value = value
        if before is None or before.schema_id != schema_id:
            return None  # an older write under another schema id: the answer stays
        # The winner's own schema id wrote an older record: the next best entry answers.
        assert after is not None
        promoted, after.value = after.value, None
        return (promoted if after.live else None,)


def earlier(
    meta_family: Any, rows: Callable[[list[bytes]], list[bytes | None]], keys: list[bytes]
) -> list[list[tuple[int, int, int, bytes | None, int]] | None]:
    """Per natural key, its entries as stored (before the batch being written) as records of their
    own, ``(partition, offset, timestamp, value, schema id)``, the winner's value from ``rows`` (the
    table's values); ``None`` for a key without entries. What history keeps of a key's records from
    before it began (``store.table.history``), so that reads of the past weigh them by their times
    and schema ids."""
    stored = family_get(meta_family, [PREFIX + key for key in keys])
    found = [decode(raw) for raw in stored]
    winners = [winner(entries) for entries in found]
    needing_row = [key for key, best in zip(keys, winners, strict=True) if best is not None and best.live]
    row_of = dict(zip(needing_row, rows(needing_row), strict=True)) if needing_row else {}
    decided: list[list[tuple[int, int, int, bytes | None, int]] | None] = []
    for key, entries, best in zip(keys, found, winners, strict=True):
        if best is None:
            decided.append(None)
            continue
        records = []
        for entry in entries.values():
            value = (row_of[key] if entry is best else entry.value) if entry.live else None
            records.append((entry.partition, entry.offset, entry.timestamp, value, entry.schema_id))
        decided.append(records)
    return decided


def mark_history(meta_handle: Any, batch: Any) -> None:
    """Add to ``batch``: this copy's history keeps every record of its natural keys, each with its
    key schema id (begun now)."""
    batch.put(_HISTORY_KEY, _HISTORY_MARK, meta_handle)


def history_reason(meta_family: Any, history_begun: bool) -> str | None:
    """Why a copy of natural keys must be rebuilt before it is written, or ``None``: its history was
    begun by a version that kept only the winner's changes (no marker), or every record without its
    key schema id (an older marker), which reads of the past cannot weigh as they now do (module
    doc)."""
    if not history_begun:
        return None
    marker = family_get(meta_family, _HISTORY_KEY)
    if marker == _HISTORY_MARK:
        return None
    if marker is None:
        return (
            "its history holds only the winners' changes of its natural keys; reads of the past now"
            " need every record"
        )
    return (
        "its history keeps the records of its natural keys without their key schema ids; reads as of"
        " a position now weigh each record by the key schema id it was written under"
    )


def applied_times(meta_family: Any) -> dict[int, int]:
    """The newest record time applied on each partition (of records under natural keys' stores)."""
    upper = _TIME_PREFIX[:-1] + b"0"
    return {
        _PARTITION.unpack(key[len(_TIME_PREFIX) :])[0]: _TIME.unpack(value)[0]
        for key, value in corruption.entries(meta_family.iter(), _TIME_PREFIX, upper)
    }


def prune(
    meta_family: Any, meta_handle: Any, batch: Any, *, start: bytes, budget: int, grace_ms: int
) -> tuple[int, bytes | None]:
    """Add to ``batch``: drop the entries of natural keys deleted under every schema id whose newest
    tombstone is older than ``grace_ms`` behind the low watermark (module doc), looking at most at
    ``budget`` natural keys from ``start`` (a ``meta`` key; ``b""``: the first). Returns how many
    were dropped and where the next pass goes on (``None``: it reached the last)."""
    times = applied_times(meta_family)
    if not times:
        return 0, None
    horizon = min(times.values()) - grace_ms
    dropped = 0
    found = corruption.entries(meta_family.iter(), max(start, PREFIX), _PREFIX_END)
    for looked, (key, stored) in enumerate(found):
        if looked == budget:
            return dropped, key
        kept = decode(stored).values()
        if not any(entry.live for entry in kept) and max(entry.timestamp for entry in kept) < horizon:
            batch.delete(key, meta_handle)
            dropped += 1
    return dropped, None
