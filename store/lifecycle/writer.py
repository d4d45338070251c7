"""The seam between the materializer and its store: what the materializer writes through.

As Kafka Streams splits a global table's thread from the state it maintains, the materializer
(``store.lifecycle.materializer``) reads the topic and decides; it writes one copy of the table
through a :class:`TableWriter` (and RocksDB itself, under it, through :class:`TableFiles`), and asks
the store's copies (:class:`StoreCopies`, ``store.lifecycle.copies``) to change state, rebuild or
reopen. Readers never see these calls: ``Store``'s public face is reads and lifecycle only.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

from store.exceptions import StoreReadError
from store.json_values import CheckRecord
from store.kafka.client import RebuildRequired
from store.lifecycle.sharding import NaturalKeysRecord
from store.protocol import CorruptionReport
from store.state import StoreState
from store.table.corruption import FINDERS
from store.table.seams import Changes
from wire.position import Position


class TableFiles(CheckRecord, NaturalKeysRecord, Protocol):
    """The database under the copy being written (``store.table.engine.Engine``): what the
    materializer asks of RocksDB itself, beside writing records."""

    def topic_identity(self) -> tuple[str | None, str | None]:
        """The topic name and topic id the stored data came from."""
        ...

    def set_topic_identity(self, topic: str, topic_id: str | None) -> None: ...

    def check_writable(self) -> None:
        """Raise the write error (``StoreWriteError``) while RocksDB refuses writes; return once it
        takes them again. Creates no file."""
        ...

    def defer_compactions(self, deferred: bool) -> None:
        """Stop or resume automatic compactions while a bulk restore ingests files."""
        ...

    def compact_leftover_level0(self) -> int:
        """After a bulk restore: merge the level-0 files RocksDB would leave, so cold reads search
        one sorted run; returns how many there were."""
        ...

    def level0(self) -> tuple[int, int]:
        """The table's level-0 files: how many, and their bytes on disk."""
        ...

    def compactions(self) -> tuple[int, bool]:
        """The table's compactions: how many run now, and whether RocksDB has one due."""
        ...

    def block_cache_room(self) -> tuple[int, int]:
        """``(bytes the table's blocks take uncompressed, bytes free in the block cache)``."""
        ...

    def warm_block_cache(self, stop: threading.Event) -> int:
        """Read the whole table once through the block cache; returns the entries read."""
        ...

    def flush(self) -> None:
        """Persist what has been applied so far (data and offsets together)."""
        ...


class TableWriter(Protocol):
    """One copy of the table as the materializer writes it (``store.table.replica.Replica``).

    Writes come from the materializer's thread only.
    """

    @property
    def engine(self) -> TableFiles: ...

    @property
    def position(self) -> Position:
        """The next offset per partition written so far (stored with the data)."""
        ...

    @property
    def corruption(self) -> CorruptionReport | None:
        """Set once a read or write of this copy failed (by any thread): it must be rebuilt."""
        ...

    @property
    def keeps_history(self) -> bool:
        """Whether records must come with ``(partition, offset, timestamp)`` (``RecordBatch.metas``)."""
        ...

    def apply(self, records: Changes) -> None:
        """Write records, tombstones and the partitions' next offsets in one atomic batch."""
        ...

    def ingest(
        self, sst_path: Path | None, next_offsets: dict[int, int], newest_times: dict[int, int] | None = None
    ) -> None:
        """Ingest a bulk restore chunk's SST file, then record the chunk's offsets."""
        ...

    def build_indexes(self, stop: threading.Event) -> None:
        """Build every configured index not ready yet (until ``stop``); drop unconfigured ones."""
        ...

    def begin_history(self, partitions: int) -> None:
        """Start keeping history at the current position, if configured and not yet started."""
        ...

    def maintain_history(self) -> None:
        """Move the history floor as retention passes and drop versions below it."""
        ...

    def natural_history_reason(self) -> str | None:
        """Why a copy of natural keys must be rebuilt before it is written (its history was kept
        otherwise), or ``None``."""
        ...

    def maintain_winners(self) -> int:
        """Drop the entries of natural keys deleted under every key schema id long enough ago."""
        ...

    def count_keys(self) -> None:
        """Count a page of the copy's keys, starting a count when the last one is out of date
        (``store.table.key_count``)."""
        ...


class StoreCopies(Protocol):
    """The store's side of materializing: its state, and the copy the materializer writes."""

    @property
    def state(self) -> StoreState: ...

    @property
    def writer(self) -> TableWriter:
        """The copy being written; ``StoreClosedError`` while none is open."""
        ...

    def open_writer(self) -> TableWriter:
        """The copy being written, opened first if a full volume kept it closed.

        Raises ``StoreWriteError`` if it still cannot be opened.
        """
        ...

    @property
    def writing(self) -> TableWriter | None:
        """The copy being written, ``None`` while none is open (a full volume kept it closed)."""
        ...

    def fail(self, reason: str) -> None:
        """The store is FAILED for ``reason``: it neither materializes nor answers reads any more."""
        ...

    def transition(self, state: StoreState) -> None:
        """Move the store to ``state`` (checked: ``InvalidTransitionError`` if not allowed).

        ``READY`` after a rebuild swaps the rebuilt copy in for readers.
        """
        ...

    def rebuild(self, reason: str) -> None:
        """Restore from the earliest offsets into a fresh copy (``REBUILDING``)."""
        ...

    def reopen(self) -> None:
        """Reopen the written copy after a write error; ``StoreWriteError`` if it cannot be yet."""
        ...

    def report_corruption(self, error: StoreReadError) -> bool:
        """A read or write of the written copy on the materializer's thread failed (corruption,
        I/O error): mark the copy corrupt; ``True`` if it is (the store may be stopping)."""
        ...


def check_written_copy(writer: TableWriter) -> None:
    """Raise ``RebuildRequired`` once the written copy was found corrupt, by whichever thread: the
    materializer checks before each step, so no write is under way on the copy it replaces."""
    report = writer.corruption
    if report is not None:
        raise RebuildRequired(f"corruption found by {FINDERS[report.found_by]}: {report.detail}")
