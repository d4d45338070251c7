"""History: reads pinned to an exact position (``as_of``), the same answer on every replica.

A Kafka partition's offsets are the same on every node, so a position names one exact version of
the table everywhere. A store that keeps history answers, for each key, the value of its last
record *below* the position on its partition; a natural key written under several key schema ids,
the winner rule (``store.table.winners``) over its records below the position, each version naming
the key schema id it was written under (:func:`choose_version`).

History starts when a store first becomes READY (a compacted topic no longer holds every old
version, so nothing older can be exact); the *floor* is the oldest position still answered
exactly. Below it the answer is a clear ``HistoryExpiredError``, never a wrong value.

Column families (``store.table.families``):

``history`` and ``changes``
    versions of rows and the change log since history started (``store.table.history_keys``).
``meta``, under ``history_start/``
    ``partition (4 B)`` → the next offset where history began on that partition.
``meta``, under ``history_time/``
    ``partition (4 B) | next offset (8 B)`` → timestamp (8 B) of each applied batch's last record:
    it moves the floor by ``retention_ms``.

Pruning runs on the materializer thread between batches, a bounded amount at a time, so it never
races a write of the same key.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import rocksdict

from store.table import families, timed
from store.table.corruption import check_status, prefixed
from store.table.history_keys import (
    OFFSET,
    PARTITION,
    TIMESTAMP,
    answer_of,
    base_key,
    change_key,
    escape,
    parse_change_key,
    parse_version,
    parse_version_key,
    parse_version_value,
    schema_id_of,
    version_key,
    version_value,
)
from wire.position import Position

if TYPE_CHECKING:
    from store.table.engine import Engine

_START_PREFIX = b"history_start/"  # in the meta family
_TIME_PREFIX = b"history_time/"  # in the meta family


@dataclasses.dataclass(frozen=True, slots=True)
class HistorySpec:
    """How much history a store keeps: by age, by offsets behind the head, or both (the shorter wins)."""

    retention_ms: int | None = None
    retention_offsets: int | None = None

    def __post_init__(self) -> None:
        if self.retention_ms is None and self.retention_offsets is None:
            raise ValueError("history needs retention_ms, retention_offsets, or both")
        for name in ("retention_ms", "retention_offsets"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"history.{name} must be at least 1, got {value}")


def _handles(engine: Engine) -> tuple[Any, Any, Any]:
    """The handles of the families history writes: history, changes, meta."""
    return engine.handle(families.HISTORY), engine.handle(families.CHANGES), engine.handle(families.META)


def _time_key(partition: int, next_offset: int) -> bytes:
    return _TIME_PREFIX + PARTITION.pack(partition) + OFFSET.pack(next_offset)


def stored_start(engine: Engine) -> Position:
    """Where history began per partition (empty: no history kept yet)."""
    return Position(
        {
            PARTITION.unpack(key[len(_START_PREFIX) :])[0]: OFFSET.unpack(value)[0]
            for key, value in engine.prefixed(families.META, _START_PREFIX)
        }
    )


def stored_time_log(engine: Engine) -> list[tuple[int, int, int]]:
    """``(partition, next_offset, timestamp_ms)`` of applied batches since history began."""
    log = []
    for key, value in engine.prefixed(families.META, _TIME_PREFIX):
        suffix = key[len(_TIME_PREFIX) :]
        partition = PARTITION.unpack(suffix[: PARTITION.size])[0]
        log.append((partition, OFFSET.unpack(suffix[PARTITION.size :])[0], OFFSET.unpack(value)[0]))
    return log


def put_start(engine: Engine, batch: Any, position: Mapping[int, int]) -> None:
    """Add to ``batch``: history begins at ``position``."""
    meta = engine.handle(families.META)
    for partition, next_offset in position.items():
        batch.put(_START_PREFIX + PARTITION.pack(partition), OFFSET.pack(next_offset), meta)


def clear(engine: Engine, batch: Any) -> None:
    """Add to ``batch``: forget all history (it restarts when the store is next READY)."""
    batch.delete_range(b"", b"\xff" * 64, engine.handle(families.HISTORY))
    batch.delete_range(b"", b"\xff" * 16, engine.handle(families.CHANGES))
    meta = engine.handle(families.META)
    for prefix in (_START_PREFIX, _TIME_PREFIX):
        batch.delete_range(prefix, prefix[:-1] + bytes([prefix[-1] + 1]), meta)


def choose_version(
    versions: Iterable[tuple[bytes, bytes]], as_of: Mapping[int, int]
) -> tuple[bool, bytes | None]:
    """From ``(history key, stored version)`` pairs of one key, the value as of a position.

    Returns ``(found, value)``: ``found`` is False when no version is visible (the key was never
    written since history started: its current value is the answer).

    Versions are weighed by *lane*: one byte key of the producer's as Kafka's compaction sees it,
    that is a partition and, for a natural key, the key schema id the record was written under
    (``store.table.winners``). Within a lane the highest offset below the position wins (its
    latest record); across lanes the greatest ``(timestamp, offset, partition)``: the winner rule
    of natural keys, and for a plain key (lanes only when it moved as partitions were added) the
    latest time. A base version (the value before history began: of a natural key, absent) is in
    its partition's lane, below every record.
    """
    best: dict[int | tuple[int, bytes], tuple[int, int, bytes]] = {}
    for history_key, stored in versions:
        partition, offset = parse_version_key(history_key)
        if offset >= as_of.get(partition, 0):
            continue
        # ``stored[0]``: the version's kind; 2 and 3 name the key schema id in bytes 9 to 13.
        lane = partition if stored[0] < 2 else (partition, stored[9:13])
        current = best.get(lane)
        if current is None or offset > current[0]:
            best[lane] = (offset, partition, stored)
    if len(best) < 2:  # the usual key: one lane, its latest version
        return (True, answer_of(next(iter(best.values()))[2])) if best else (False, None)
    chosen = max(best.values(), key=lambda seen: (parse_version_value(seen[2])[1], seen[0], seen[1]))
    return True, answer_of(chosen[2])


def floor_from(
    start: Mapping[int, int],
    position: Mapping[int, int],
    time_log: Sequence[tuple[int, int, int]],
    spec: HistorySpec,
    now_ms: int | None = None,
) -> Position:
    """The oldest position answered exactly.

    ``start``: where history began per partition. ``time_log``: ``(partition, next_offset,
    timestamp_ms)`` of applied batches, ascending per partition.
    """
    floor = dict(start)
    if spec.retention_offsets is not None:
        for partition, next_offset in position.items():
            floor[partition] = max(floor.get(partition, 0), next_offset - spec.retention_offsets)
    if spec.retention_ms is not None:
        cutoff = (now_ms if now_ms is not None else int(time.time() * 1000)) - spec.retention_ms
        for partition, next_offset, timestamp in time_log:
            if timestamp < cutoff:
                floor[partition] = max(floor.get(partition, 0), next_offset)
    return Position(floor)


def scan_versions(iterator: Any, key: bytes) -> list[tuple[bytes, bytes]]:
    """Every stored version of one key, read through a ``history`` iterator (re-seeked)."""
    return list(prefixed(iterator, escape(key)))


Earlier = tuple[int, int, int, bytes | None, int]
"""A record from before history began kept as a version: partition, offset, timestamp, value, key
schema id."""


class HistoryRecorder:
    """Adds versions and change entries to a store's write batches, and prunes below the floor."""

    def __init__(self, spec: HistorySpec) -> None:
        self.spec = spec

    def record(
        self,
        engine: Engine,
        batch: Any,
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        metas: Sequence[tuple[int, int, int]],
        earlier: Callable[[list[bytes]], list[list[Earlier] | None]] | None = None,
        schema_ids: Sequence[int | None] | None = None,
    ) -> None:
        """Versions for ``(key, value)`` records with their ``(partition, offset, timestamp)``.

        ``earlier``: for keys first written since history began, the records from before it that
        decide them, to keep as versions of their own instead of a base version (``None`` for a
        key: a base version); ``store.table.winners``. ``schema_ids``: for records under natural
        keys, the key schema id each was written under (``None``: not under one), kept in its
        version so that a read as of a position weighs it as the winner rule does.
        """
        live = engine.family(families.HISTORY)
        history, changes, meta = (
            engine.handle(name) for name in (families.HISTORY, families.CHANGES, families.META)
        )
        has_history = _versioned(live, keys)
        needing_base = [key for key, has in has_history.items() if not has]
        if earlier is not None and needing_base:
            remaining = _put_earlier(batch, history, needing_base, earlier)
            has_history.update(dict.fromkeys(set(needing_base) - set(remaining), True))
            needing_base = remaining
        previous = (
            dict(zip(needing_base, engine.get_latest(needing_base), strict=True)) if needing_base else {}
        )
        last_in_batch: dict[int, tuple[int, int]] = {}
        ids = [None] * len(keys) if schema_ids is None else schema_ids
        for key, value, (partition, offset, timestamp), schema_id in zip(
            keys, values, metas, ids, strict=True
        ):
            if not has_history[key]:
                batch.put(base_key(key, partition), version_value(previous[key], -1), history)
                has_history[key] = True
            stored = version_value(value, timestamp, schema_id)
            batch.put(version_key(key, partition, offset, timestamp), stored, history)
            batch.put(change_key(partition, offset), key, changes)
            last_in_batch[partition] = (offset + 1, timestamp)
        for partition, (next_offset, timestamp) in last_in_batch.items():
            batch.put(_time_key(partition, next_offset), TIMESTAMP.pack(timestamp), meta)

    def prune(
        self,
        engine: Engine,
        floor: Mapping[int, int],
        budget: int = 10_000,
        time_floor: Callable[[int], None] | None = None,
    ) -> int:
        """Drop versions superseded below ``floor`` (at most ``budget`` changes); returns how many.

        Keeps what a read as of a time at or above the time floor needs (``store.table.timed``); the
        floor's new value goes to ``time_floor`` before the batch is written, and into the batch.
        """
        base_times = timed.stored_bounds(engine).base_times
        pruned = timed.NO_TIME
        batch = engine.new_batch()
        changes, meta = engine.handle(families.CHANGES), engine.handle(families.META)
        done = 0
        for partition, floor_offset in floor.items():
            options = rocksdict.ReadOptions()
            options.set_iterate_upper_bound(change_key(partition, floor_offset))
            iterator = engine.family(families.CHANGES).iter(options)
            iterator.seek(change_key(partition, 0))
            while iterator.valid() and done < budget:
                change, key = iterator.key(), iterator.value()
                _partition, offset = parse_change_key(change)
                pruned = max(
                    pruned, self._prune_superseded(engine, batch, key, partition, offset, base_times)
                )
                batch.delete(change, changes)
                done += 1
                iterator.next()
            if not iterator.valid():
                check_status(iterator)
            if done < budget:
                batch.delete_range(
                    _TIME_PREFIX + PARTITION.pack(partition), _time_key(partition, floor_offset), meta
                )
        if pruned != timed.NO_TIME:
            floor_time = max(pruned, timed.stored_bounds(engine).pruned)
            timed.put_pruned(engine, batch, floor_time)
            if time_floor is not None:
                time_floor(floor_time)
        engine.write(batch)
        return done

    def _prune_superseded(
        self,
        engine: Engine,
        batch: Any,
        key: bytes,
        partition: int,
        offset: int,
        base_times: Mapping[int, int],
    ) -> int:
        """Add to ``batch``: drop the versions of ``key`` on ``partition`` that its version at
        ``offset`` supersedes, but those a read as of a time still needs (``store.table.timed``);
        returns the greatest timestamp passed (``timed.NO_TIME`` for none)."""
        live, history = engine.family(families.HISTORY), engine.handle(families.HISTORY)
        superseded, newest, only_version = _superseded(scan_versions(live.iter(), key), partition, offset)
        for history_key, *_rest in superseded:
            batch.delete(history_key, history)
        if newest is None:
            return timed.NO_TIME
        candidates = [entry[:4] for entry in [*superseded, newest]]
        keep = timed.prune_keep(candidates, newest[0], base_times)
        kept = {entry[0]: entry[4] for entry in superseded}
        for history_key in keep:
            batch.put(history_key, kept[history_key], history)
        if not keep and answer_of(newest[4]) is None and only_version:
            # Absent at every position from the floor on: nothing to keep.
            batch.delete(newest[0], history)
        return max(timestamp for *_, timestamp in candidates)


def _versioned(live: Any, keys: Sequence[bytes]) -> dict[bytes, bool]:
    """Whether each of ``keys`` has a version (read through the ``history`` family ``live``)."""
    has_history: dict[bytes, bool] = {}
    for key in dict.fromkeys(keys):
        iterator = live.iter()
        escaped = escape(key)
        iterator.seek(escaped)
        if not iterator.valid():
            check_status(iterator)  # a failed read is no evidence the key has no history
        has_history[key] = iterator.valid() and iterator.key().startswith(escaped)
    return has_history


def _put_earlier(
    batch: Any, history: Any, keys: list[bytes], earlier: Callable[[list[bytes]], list[list[Earlier] | None]]
) -> list[bytes]:
    """Add to ``batch`` the versions ``earlier`` gives for ``keys``; the keys it gives none for."""
    decided = earlier(keys)
    for key, records in zip(keys, decided, strict=True):
        for partition, offset, timestamp, value, schema_id in records or ():
            batch.put(
                version_key(key, partition, offset, timestamp),
                version_value(value, timestamp, schema_id),
                history,
            )
    return [key for key, records in zip(keys, decided, strict=True) if records is None]


_Version = tuple[bytes, int, int, int, bytes]  # history key, partition, offset, timestamp, stored


def _superseded(
    versions: Sequence[tuple[bytes, bytes]], partition: int, offset: int
) -> tuple[list[_Version], _Version | None, bool]:
    """Of a key's ``(history key, stored)`` versions (all partitions, in time order): those in the
    lane (:func:`choose_version`) of the one at ``offset`` on ``partition`` below it, with the base
    version of ``partition``; the one at ``offset`` (if kept); and whether no other version exists
    (a key has few, bounded by retention)."""
    parsed = [(k, *parse_version(k, v)[:3], v) for k, v in versions]
    newest = next((entry for entry in parsed if entry[1] == partition and entry[2] == offset), None)
    lane = None if newest is None else schema_id_of(newest[4])
    superseded = [
        entry
        for entry in parsed
        if entry[1] == partition and entry[2] < offset and (entry[2] < 0 or schema_id_of(entry[4]) == lane)
    ]
    only_version = len(superseded) + (newest is not None) == len(parsed)
    return superseded, newest, only_version
