"""The lifecycle of a store: its states and the transitions between them."""

from __future__ import annotations

import enum


class StoreState(enum.Enum):
    """Where a store is in its life, and where it may go from each state::

        CREATED     → RESTORING, REBUILDING, FAILED, STOPPED
        RESTORING   → READY, REBUILDING, FAILED, STOPPED
        READY       → RESTORING, REBUILDING, FAILED, STOPPED
        REBUILDING  → READY, REBUILDING, FAILED, STOPPED
        FAILED      → STOPPED

    ``READY`` goes back to ``RESTORING`` when the store reopens its copy after a write error (what
    was applied since the last checkpoint is read again); a rebuild starts again when the topic is
    recreated once more meanwhile. ``STOPPED`` is final.

    ``FAILED`` is set by the store when :meth:`Store.start` raised (its directory is locked by
    another process, or cannot be created or opened for a reason other than a full volume), or when
    its volume kept failing writes with I/O errors through every retry. A retry cannot fix that:
    the store neither materializes nor serves, and ``status().last_error`` says why; fix the cause
    and start a new ``Store``. (The service also shows ``FAILED`` for a store whose start raised.)
    Problems a retry can fix (broker unreachable, topic missing, full volume, a crashed Kafka
    client) never make a store ``FAILED``: it retries, with the problem in ``status().last_error``.
    """

    CREATED = "CREATED"
    RESTORING = "RESTORING"  # applying the topic up to the end offsets sampled at start
    READY = "READY"  # caught up once; serving, and kept current by the materializer
    REBUILDING = "REBUILDING"  # stored offsets became invalid; discarding and restoring from earliest
    STOPPED = "STOPPED"
    FAILED = "FAILED"

    def can_become(self, state: StoreState) -> bool:
        """Whether a store in this state may move to ``state``."""
        return state in _NEXT[self]


_NEXT: dict[StoreState, frozenset[StoreState]] = {
    StoreState.CREATED: frozenset(
        {StoreState.RESTORING, StoreState.REBUILDING, StoreState.FAILED, StoreState.STOPPED}
    ),
    StoreState.RESTORING: frozenset(
        {StoreState.READY, StoreState.REBUILDING, StoreState.FAILED, StoreState.STOPPED}
    ),
    StoreState.READY: frozenset(
        {StoreState.RESTORING, StoreState.REBUILDING, StoreState.FAILED, StoreState.STOPPED}
    ),
    StoreState.REBUILDING: frozenset(
        {StoreState.READY, StoreState.REBUILDING, StoreState.FAILED, StoreState.STOPPED}
    ),
    StoreState.FAILED: frozenset({StoreState.STOPPED}),
    StoreState.STOPPED: frozenset(),
}


class RestoreMode(enum.Enum):
    """How a restoring store reads the topic now."""

    BULK = "bulk"  # worker processes write SST files that the store ingests
    RECORDS = "records"  # record batches applied by the store's own consumer
    WAITING = "waiting"  # for a bulk restore slot other stores hold (engine.max_concurrent_bulk_restores)
    # Every record is in; the bulk restore's overlapping files are merged so that reads run at
    # full speed from READY on (``store.lifecycle.settle``).
    COMPACTING = "compacting"
    # Then the table is read once into the block cache, if the cache has room for all of it.
    WARMING = "warming"
