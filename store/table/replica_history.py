"""A copy's history state: where history began, its floor, the time bounds of reads as of a time.

Loaded when the copy opens, begun when the store is READY, raised as records are applied before it
begins, and moved by retention (``store.table.history``, ``store.table.timed``). The state is part
of :class:`store.table.replica.Replica`, which writes records and serves reads; readers check it
under the owning store's lock.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Sequence
from typing import Any

from store.exceptions import HistoryExpiredError, HistoryNotKeptError, PositionNotReachedError
from store.table import families, history, history_layout, timed, winners
from store.table.engine import Engine
from store.table.history import HistoryRecorder, floor_from
from store.table.seams import TableConfig
from store.table.timed import TimeBounds, newest_per_partition
from wire.position import Position

logger = logging.getLogger(__name__)


class HistoryState:
    """The history part of a copy (a base of ``Replica``, which sets these attributes up)."""

    config: TableConfig
    engine: Engine
    position: Position
    history: HistoryRecorder | None
    history_start: Position
    history_floor: Position | None
    time_bounds: TimeBounds
    _changed: threading.Condition

    @property
    def keeps_history(self) -> bool:
        """Whether records must come with ``(partition, offset, timestamp)`` for history (also
        before history begins: their timestamps bound the times of the versions it starts from)."""
        return self.history is not None

    def _bound_base_times(self, batch: Any, metas: Sequence[tuple[int, int, int]]) -> None:
        """Add to ``batch``: raise each partition's pre-history time bound (``store.table.timed``)."""
        known = self.time_bounds.base_times
        raised = {
            partition: timestamp
            for partition, timestamp in newest_per_partition(metas).items()
            if timestamp > known.get(partition, timed.NO_TIME)
        }
        if raised:
            timed.put_base_times(self.engine, batch, raised)
            # Only the writer thread reads these before history begins: no reader looks yet.
            self.time_bounds = dataclasses.replace(self.time_bounds, base_times={**known, **raised})

    def _check_as_of(self, as_of: Position) -> Position:
        """``as_of`` on every partition of the copy (0 where it names none), once it is answered."""
        if self.history is None:
            raise HistoryNotKeptError(
                f'store "{self.config.name}" keeps no history; configure its history retention to read as_of'
            )
        position = self.position
        if as_of is not position and not position.reaches(as_of):
            raise PositionNotReachedError(f'store "{self.config.name}" is at {position}, not yet at {as_of}')
        # A read as of a time at the copy's position asks that very position: nothing to rebuild.
        pinned = as_of if as_of is position else Position({p: as_of.get(p, 0) for p in position})
        floor = self.history_floor
        if floor is None or not pinned.reaches(floor):
            raise HistoryExpiredError(
                self.config.name, as_of, floor if floor is not None else "no position yet"
            )
        return pinned

    def _load_history_state(self) -> None:
        engine = self.engine
        history_layout.upgrade(engine, self.config.name)
        if self.history is None:
            if history.stored_start(engine) or timed.stored_bounds(engine) != timed.TimeBounds({}):
                batch = engine.new_batch()
                history.clear(engine, batch)
                timed.clear(engine, batch)  # records applied from now on are not timed
                engine.write(batch)
                logger.info(
                    'store "%s": history is no longer configured; dropped the stored versions',
                    self.config.name,
                )
            return
        self.history_start = history.stored_start(engine)
        self.history_floor = self._compute_floor() if self.history_start else None
        self.time_bounds = timed.stored_bounds(engine)
        applied = any(self.position.values())
        if (self.history_start or applied) and not self.time_bounds.base_times:
            # Records applied while history was not configured (or by a version that kept no
            # time bounds): their times are unknown.
            batch = engine.new_batch()
            timed.put_bulk(engine, batch)
            engine.write(batch)
            self.time_bounds = dataclasses.replace(self.time_bounds, known=False)

    def begin_history(self, partitions: int) -> None:
        """Start keeping history from the current position (called when the store is READY).

        The start names every partition, also those with no record yet, so that history has
        begun (and is kept) even for an empty topic.
        """
        if self.history is None or self.history_start:
            return
        engine = self.engine
        start = Position(
            {p: self.position.get(p, 0) for p in range(max(partitions, 1))} | dict(self.position)
        )
        batch = engine.new_batch()
        history.put_start(engine, batch, start)
        if engine.natural_keys() is not None:
            winners.mark_history(engine.handle(families.META), batch)
        # Every partition's time bound is stored, also of those without records: their presence
        # says this copy's pre-history times were tracked (``_load_history_state``).
        base_times = {p: self.time_bounds.base_times.get(p, timed.NO_TIME) for p in start}
        timed.put_base_times(engine, batch, base_times)
        with self._changed:
            engine.write(batch)
            self.history_start = start
            self.history_floor = start
            self.time_bounds = dataclasses.replace(self.time_bounds, base_times=base_times)
        logger.info('store "%s" keeps history from position %s on', self.config.name, start)

    def _compute_floor(self) -> Position:
        assert self.history is not None
        return floor_from(
            self.history_start, self.position, history.stored_time_log(self.engine), self.history.spec
        )

    def maintain_history(self) -> None:
        """Move the history floor as retention passes and drop versions below it."""
        if self.history is None or not self.history_start:
            return
        floor = self._compute_floor()
        with self._changed:
            # Readers check against the new floor before any version below it is dropped.
            self.history_floor = floor if self.history_floor is None else self.history_floor.merged(floor)
        while self.history.prune(self.engine, floor, time_floor=self._raise_time_floor) >= 10_000:
            pass

    def natural_history_reason(self) -> str | None:
        """Why this copy of natural keys must be rebuilt first (``store.table.winners``), or ``None``."""
        if self.history is None or self.engine.natural_keys() is None:
            return None
        return winners.history_reason(self.engine.family(families.META), bool(self.history_start))

    def _raise_time_floor(self, timestamp: int) -> None:
        # Readers check against the new time floor before any version below it is dropped.
        with self._changed:
            self.time_bounds = self.time_bounds.with_pruned(timestamp)
