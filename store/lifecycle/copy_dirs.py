"""Where a store's copies live on disk, and the swap of a rebuilt copy that a crash cannot tear.

Under the store's directory: ``db/``, the served copy; ``db.rebuilding/``, a copy being rebuilt
beside it; ``bulk/``, the files of a bulk load in progress. A rebuilt copy replaces the served one
in steps that a crash may interrupt anywhere: the rebuilt copy is marked complete
(``REBUILD_COMPLETE`` in it), the served copy removed, the rebuilt one renamed into its place, the
mark removed. At the next open a marked rebuilt copy finishes the swap; an unmarked one (a rebuild
that had not finished) and a bulk load's files are dropped: the topic restores them again.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from store.table.volume import destroy

logger = logging.getLogger(__name__)

_COMPLETE = "REBUILD_COMPLETE"


class CopyDirs:
    """The directories of one store's copies (module doc)."""

    def __init__(self, path: Path, store: str) -> None:
        self.served = path / "db"
        self.rebuilding = path / "db.rebuilding"
        self._bulk = path / "bulk"
        self._store = store

    def drop_bulk(self) -> None:
        """Remove the files of a bulk load (a crash interrupted it, or a rebuild starts over)."""
        destroy(self._bulk)

    def drop_rebuilding(self) -> None:
        """Remove the copy being rebuilt, whatever state it is in."""
        destroy(self.rebuilding)

    def drop_served(self) -> None:
        """Remove the served copy (closed: a store that never was READY rebuilds in place)."""
        destroy(self.served)

    def mark_complete(self) -> None:
        """The rebuilt copy is closed and whole: from now on a crash finishes the swap."""
        (self.rebuilding / _COMPLETE).touch()

    def promote(self) -> None:
        """Put the complete rebuilt copy in the served copy's place (both closed)."""
        destroy(self.served)
        os.replace(self.rebuilding, self.served)
        (self.served / _COMPLETE).unlink(missing_ok=True)

    def finish_interrupted(self) -> None:
        """At open: finish a swap a crash interrupted, or drop a rebuild that had not finished."""
        if (self.rebuilding / _COMPLETE).exists():
            logger.info('store "%s": finishing a swap to a rebuilt copy interrupted by a crash', self._store)
            self.promote()
        else:
            self.drop_rebuilding()
