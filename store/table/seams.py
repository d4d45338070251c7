"""What the table takes from the rest of the store, as protocols: its configuration and the changes
it writes. The table imports nothing of the Kafka side nor of the lifecycle; they meet it here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from store.table.history import HistorySpec
from store.table.indexes import IndexSpec
from store.tuning import StoreTuning


class TableConfig(Protocol):
    """The part of a store's configuration its table reads (``store.lifecycle.config.StoreConfig``)."""

    @property
    def name(self) -> str: ...

    @property
    def tuning(self) -> StoreTuning: ...

    @property
    def indexes(self) -> tuple[IndexSpec, ...]: ...

    @property
    def history(self) -> HistorySpec | None: ...


class Changes(Protocol):
    """Records to write in one atomic batch (``store.kafka.batch.RecordBatch``): keys, values with
    ``None`` for a tombstone, each record's ``(partition, offset, timestamp)`` when history is kept,
    and the next offset of every partition read."""

    @property
    def keys(self) -> Sequence[bytes]: ...

    @property
    def values(self) -> Sequence[bytes | None]: ...

    @property
    def metas(self) -> Sequence[tuple[int, int, int]] | None: ...

    @property
    def schema_ids(self) -> Sequence[int | None] | None:
        """Each record's key schema id when keys are stored by natural value (``None`` for a key
        that could not be decoded), resolved by ``store.table.winners``; ``None`` otherwise."""
        ...

    @property
    def next_offsets(self) -> Mapping[int, int]: ...
