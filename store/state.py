"""The lifecycle of a store."""

from __future__ import annotations

import enum


class StoreState(enum.Enum):
    """Where a store is in its life.

    ``CREATED`` → ``RESTORING`` → ``READY`` ⇄ (``REBUILDING`` → ``RESTORING``) → ``STOPPED``;
    ``FAILED`` only for problems a retry cannot fix (e.g. the disk cannot be written).
    """

    CREATED = "CREATED"
    RESTORING = "RESTORING"  # applying the topic up to the end offsets sampled at start
    READY = "READY"  # caught up once; serving, and kept current by the materializer
    REBUILDING = "REBUILDING"  # stored offsets became invalid; discarding and restoring from earliest
    STOPPED = "STOPPED"
    FAILED = "FAILED"


class RestoreMode(enum.Enum):
    """How a restoring store reads the topic now."""

    BULK = "bulk"  # worker processes write SST files that the store ingests
    RECORDS = "records"  # record batches applied by the store's own consumer
    WAITING = "waiting"  # for a bulk restore slot other stores hold (engine.max_concurrent_bulk_restores)
