"""A copy's secondary indexes: the entries each write changes, their stored states, their builds.

An index is kept up to date by every write once it is ready; one configured later (or stored by an
older version) is built on the materializer thread while reads go on (``store.table.indexes`` holds
the layout). Part of :class:`store.table.replica.Replica`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from store.protocol import MAX_SCAN_LIMIT
from store.table import families
from store.table.engine import Engine
from store.table.indexes import OUTDATED, STATE_PREFIX, IndexSpec, index_changes, parse_states, state_entry
from store.table.seams import TableConfig
from store.table.snapshot_reader import SnapshotReader, prefix_upper_bound
from wire.position import Position

logger = logging.getLogger(__name__)


class IndexedCopy:
    """The index part of a copy (a base of ``Replica``, which sets these attributes up)."""

    config: TableConfig
    engine: Engine
    position: Position
    indexes: dict[str, IndexSpec]
    ready_indexes: dict[str, IndexSpec]
    index_progress: dict[str, int]  # rows indexed so far, per index being built
    _changed: threading.Condition

    def _maintain_indexes(self, batch: Any, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        """Add to ``batch`` the index entry changes of these records, in record order."""
        engine = self.engine
        index = engine.handle(families.INDEX)
        unique = list(dict.fromkeys(keys))
        current = dict(zip(unique, engine.get_latest(unique), strict=True))
        specs = list(self.ready_indexes.values())
        for key, value in zip(keys, values, strict=True):
            deletes, puts = index_changes(specs, key, current[key], value)
            for entry in deletes:
                batch.delete(entry, index)
            for entry in puts:
                batch.put(entry, b"", index)
            current[key] = value

    def _index_states(self) -> dict[str, tuple[str, str]]:
        return parse_states(self.engine.prefixed(families.META, STATE_PREFIX))

    def _put_index_state(self, batch: Any, name: str, field: str, state: str | None) -> None:
        """Add an index's state to ``batch`` (``None``: the index no longer exists)."""
        key, value = state_entry(name, field, state)
        if value is None:
            batch.delete(key, self.engine.handle(families.META))
        else:
            batch.put(key, value, self.engine.handle(families.META))

    def _drop_index_entries(self, batch: Any, spec: IndexSpec) -> None:
        """Add to ``batch``: remove every entry of the index."""
        upper = prefix_upper_bound(spec.prefix)
        assert upper is not None, "index prefixes never consist of 0xff bytes only"
        batch.delete_range(spec.prefix, upper, self.engine.handle(families.INDEX))

    def build_indexes(self, stop: threading.Event) -> None:
        """Build every configured index that is not ready; drop indexes no longer configured.

        Runs on the materializer thread once the store is READY, so no record is applied
        meanwhile; reads of the store go on (an index being built answers IndexNotReadyError).
        """
        engine = self.engine
        states = self._index_states()
        batch = engine.new_batch()
        for name, (field, _state) in states.items():
            if name not in self.indexes:
                self._drop_index_entries(batch, IndexSpec(name, field))
                self._put_index_state(batch, name, field, None)
                logger.info('store "%s": dropped index "%s" (no longer configured)', self.config.name, name)
        engine.write(batch)
        ready = {
            name: spec for name, spec in self.indexes.items() if states.get(name) == (spec.field, "ready")
        }
        with self._changed:
            self.ready_indexes = dict(ready)
        for spec in self.indexes.values():
            if spec.name in ready or stop.is_set():
                continue
            if states.get(spec.name) == (spec.field, OUTDATED):
                logger.info(
                    'store "%s": index "%s" was stored by an older statestore (numbers as parsed, not'
                    " as written); rebuilding it",
                    self.config.name,
                    spec.name,
                )
            self._build_index(spec, stop)

    def _build_index(self, spec: IndexSpec, stop: threading.Event) -> None:
        engine = self.engine
        started = time.monotonic()
        total = engine.approximate_num_keys()
        logger.info(
            'store "%s": building index "%s" on field "%s" (~%d rows)',
            self.config.name,
            spec.name,
            spec.field,
            total,
        )
        batch = engine.new_batch()
        self._drop_index_entries(batch, spec)
        self._put_index_state(batch, spec.name, spec.field, "building")
        engine.write(batch)
        self.index_progress[spec.name] = 0
        rows = 0
        last_log = started
        # No record is applied while the index is built (same thread): one snapshot sees all rows.
        with self._changed:
            reader = SnapshotReader(engine.snapshot(), self.position)
        try:
            after: bytes | None = None
            while True:
                if stop.is_set():
                    return  # left "building": the next start builds it again
                page = reader.prefix_scan(b"", after=after, limit=MAX_SCAN_LIMIT)
                batch = engine.new_batch()
                index = engine.handle(families.INDEX)
                for key, value in page.items:
                    indexed = spec.extract(value)
                    if indexed is not None:
                        batch.put(spec.entry_key(indexed, key), b"", index)
                rows += len(page.items)
                if page.next_after is None:
                    self._put_index_state(batch, spec.name, spec.field, "ready")
                with self._changed:
                    engine.write(batch)
                    if page.next_after is None:
                        self.ready_indexes[spec.name] = spec
                        self._changed.notify_all()
                self.index_progress[spec.name] = rows
                now = time.monotonic()
                if now - last_log >= self.config.tuning.restore.progress_log_interval_seconds:
                    last_log = now
                    logger.info(
                        'store "%s": index "%s" %d of ~%d rows', self.config.name, spec.name, rows, total
                    )
                if page.next_after is None:
                    break
                after = page.next_after
        finally:
            reader.release()
        self.index_progress.pop(spec.name, None)
        logger.info(
            'store "%s": index "%s" ready (%d rows in %.1fs)',
            self.config.name,
            spec.name,
            rows,
            time.monotonic() - started,
        )
