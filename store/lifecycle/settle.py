"""Before READY after a bulk restore: the restored files merged, so reads run at full speed at once.

A bulk restore ingests one SST file per chunk, and every chunk spans the whole key range, so all
but the first land in level 0, where a point read searches each file in turn (bloom filters make
that cheaper, not free). RocksDB merges them once compactions resume, but on a store already
READY that merge competes with the first reads for the CPU while they still search every file:
cold reads ran at a third to a half of their settled speed for the seconds it took (about a
second of CPU per million records). So the store merges them first, with the restore's progress
in ``compacting`` mode (``/v1/stores/{store}``, the status page); then, if the block cache has room
for the whole table, reads it once into the cache (``warming``), and is READY once both are done.
Readers of a rebuilt copy keep the last good one meanwhile.

The merge is bounded by the restored bytes; the wait ends early on a stop, raises the write error
if RocksDB refuses writes after a failed compaction, and gives up (READY with the files as they
are, logged) if RocksDB starts no compaction for ``_IDLE_LIMIT_SECONDS`` while one is due.
"""

from __future__ import annotations

import logging
import threading
import time

from store.lifecycle.progress import Progress
from store.lifecycle.writer import TableFiles
from store.state import RestoreMode
from store.table.options import LEVEL0_COMPACTION_TRIGGER

# How often the wait asks RocksDB whether its merge is done (two property reads): the merge of a
# million restored records takes about a quarter of a second in two threads on a quiet machine,
# and READY should not wait on the next check for a good part of that.
_POLL_SECONDS = 0.02
_IDLE_LIMIT_SECONDS = 10.0


def settle_restored_files(
    files: TableFiles,
    progress: Progress,
    stop: threading.Event,
    log: logging.LoggerAdapter[logging.Logger],
    store: str,
) -> int:
    """Merge the level-0 files a bulk restore left in ``files`` before READY; returns how many
    there were (0: nothing to merge). Call it before the flush that persists the restore's tail,
    whose file would otherwise count as one of them."""
    count, size = files.level0()
    if count == 0:  # nothing left in level 0 (RocksDB may have merged a few small files already)
        warm_block_cache(files, progress, stop, log, store)
        return 0
    started = time.monotonic()
    log.info(
        'store "%s": merging the %d files the bulk restore left in level 0 (%.0f MiB) before READY,'
        " so that reads run at full speed from the first one",
        store,
        count,
        size / 2**20,
    )
    progress.restore_mode = RestoreMode.COMPACTING
    try:
        if 0 < count < LEVEL0_COMPACTION_TRIGGER and files.compactions() == (0, False):
            files.compact_leftover_level0()  # RocksDB would leave fewer than its trigger for good
        else:
            _wait_for_compactions(files, stop, log, store)
    finally:
        progress.restore_mode = RestoreMode.RECORDS
    left, _ = files.level0()
    log.info(
        'store "%s": restored files merged in %.1fs (%d level-0 files left)',
        store,
        time.monotonic() - started,
        left,
    )
    warm_block_cache(files, progress, stop, log, store)
    return count


def warm_block_cache(
    files: TableFiles,
    progress: Progress,
    stop: threading.Event,
    log: logging.LoggerAdapter[logging.Logger],
    store: str,
) -> int:
    """Read the merged table once into the block cache if the cache has room for all of it;
    returns the entries read (0: no room, nothing read).

    A cold read whose block is not cached reads the block from its file and decompresses it; at
    10M records that is most of its cost, and a cache that fills only as keys are asked keeps
    cold reads slow for as long as it takes to fill. Part of a table would be pushed out again by
    the reads of the rest, so a cache without room for the whole table is left as it is.
    """
    needed, room = files.block_cache_room()
    if needed == 0 or needed > room:
        if needed:
            log.info(
                'store "%s": the block cache has %.0f MiB free, the table takes about %.0f MiB: not'
                " read into it before READY (engine.block_cache_bytes sizes it)",
                store,
                room / 2**20,
                needed / 2**20,
            )
        return 0
    started = time.monotonic()
    progress.restore_mode = RestoreMode.WARMING
    try:
        entries = files.warm_block_cache(stop)
    finally:
        progress.restore_mode = RestoreMode.RECORDS
    log.info(
        'store "%s": %d records (about %.0f MiB) read into the block cache in %.1fs before READY',
        store,
        entries,
        needed / 2**20,
        time.monotonic() - started,
    )
    return entries


def _wait_for_compactions(
    files: TableFiles, stop: threading.Event, log: logging.LoggerAdapter[logging.Logger], store: str
) -> None:
    """Until RocksDB has nothing to compact: its own compactions, resumed after the restore, are
    merging the files already (a manual one would wait for them, then merge again)."""
    idle_since: float | None = None
    while not stop.is_set():
        running, due = files.compactions()
        if not running and not due:
            return
        now = time.monotonic()
        if running:
            idle_since = None
        else:
            # Due, yet nothing runs: RocksDB refuses writes after a failed compaction (this raises
            # the write error then), or has not started the next one yet.
            files.check_writable()
            idle_since = now if idle_since is None else idle_since
            if now - idle_since > _IDLE_LIMIT_SECONDS:
                log.warning(
                    'store "%s": RocksDB started no compaction of the restored files in %.0fs; READY'
                    " with them as they are (cold reads are slower until RocksDB merges them)",
                    store,
                    _IDLE_LIMIT_SECONDS,
                )
                return
        stop.wait(_POLL_SECONDS)
