"""Errors raised by the ``store`` package.

Hierarchy::

    StoreError
    ├── RebuildNeededError        the table cannot be kept current record by record: rebuild it
    ├── StoreLockedError          the store directory is held by another process
    ├── StoreClosedError          the store was stopped; no more reads
    ├── StoreCorruptError         the store directory cannot be opened as a store
    │   └── StoreReadError        a read failed for a reason other than "not found" (corruption, I/O)
    ├── StoreWriteError           the store's files cannot be written; RocksDB refuses writes until reopened
    │   ├── StoreFullError        its volume is full (or a quota or file size limit is reached)
    │   ├── StoreIOError          its volume failed a read or write (device, filesystem)
    │   ├── StoreCorruptWriteError  RocksDB found its files corrupt while writing (also a StoreReadError)
    │   └── StoreWriterClosedError  the copy was closed while being written (also a StoreClosedError)
    ├── InvalidTransitionError    a state change the store's lifecycle does not allow (a bug)
    ├── ScanLimitError            a prefix scan asked for an unusable page size
    ├── UnknownIndexError         the store has no index of that name
    ├── IndexNotReadyError        the index is still being built
    ├── HistoryNotKeptError       an ``as_of`` read of a store that keeps no history
    ├── HistoryExpiredError       an ``as_of`` position older than the retained history
    │   └── TimeExpiredError      an ``as_of_time`` the retained history does not settle
    ├── PositionNotReachedError   an ``as_of`` position the store has not reached yet
    └── KafkaSourceError          the changelog topic cannot be read (fatal configuration problems only)

A malformed position raises ``wire.InvalidPositionError`` (the position type is shared with the
service and the clients: ``wire.position``). Foreign errors (rocksdict, confluent-kafka) are
converted at the boundary with ``raise ... from exc``.
"""

from __future__ import annotations


class StoreError(Exception):
    """Root of every error the store package raises."""


class RebuildNeededError(StoreError):
    """What the store holds can no longer be kept current record by record (e.g. the values'
    latest schema changed their shape): the store is rebuilt from its topic."""


class StoreLockedError(StoreError):
    """The store directory is locked by another process or another open store."""


class StoreClosedError(StoreError):
    """The store has been stopped and can no longer be read."""


class StoreCorruptError(StoreError):
    """The store directory exists but cannot be used (corrupt, foreign or incompatible)."""


class StoreReadError(StoreCorruptError):
    """A read of the store's files failed for a reason other than "not found".

    RocksDB found a checksum mismatch or another corruption, or the volume answered an I/O error:
    the copy cannot be trusted, so the read has no answer (never "absent", never a short page).
    ``file`` is the file RocksDB names in its message, when it names one.
    """

    def __init__(self, message: str, *, file: str | None = None, engine_message: str | None = None) -> None:
        super().__init__(message)
        self.file = file
        self.engine_message = engine_message if engine_message is not None else message


class StoreWriteError(StoreError):
    """RocksDB refused a write, flush, ingestion or option change of the store's database.

    RocksDB refuses every later write too, until the database is reopened. The subclasses say
    why; this class itself is raised for a refusal of no known kind.
    """


class StoreFullError(StoreWriteError):
    """The store's volume is full, or a quota or file size limit refused the write: free space."""


class StoreIOError(StoreWriteError):
    """The store's volume failed an I/O other than for space: check the device and filesystem."""


class StoreCorruptWriteError(StoreWriteError, StoreReadError):
    """RocksDB found the store's files corrupt while writing (a flush or compaction read a corrupt
    file): the copy cannot be trusted, and, like any failed read, it is rebuilt from the topic."""


class StoreWriterClosedError(StoreWriteError, StoreClosedError):
    """The copy was closed while being written: the store is stopping or reopening it."""


class InvalidTransitionError(StoreError, RuntimeError):
    """A state change that ``StoreState`` does not allow from the current state: a bug, never retried."""


class ScanLimitError(StoreError, ValueError):
    """A prefix scan was asked for a page size below 1."""


class KafkaSourceError(StoreError):
    """The changelog topic cannot be consumed because of a configuration problem."""


class UnknownIndexError(StoreError, KeyError):
    """The store declares no index of this name."""

    def __init__(self, index: str, known: list[str]) -> None:
        super().__init__(f"no index {index!r}; this store has {', '.join(known) or 'no indexes'}")
        self.index = index
        self.known = known

    def __str__(self) -> str:
        return str(self.args[0])


class IndexNotReadyError(StoreError):
    """The index is being built (new index, or after a bootstrap); retry shortly."""

    def __init__(self, index: str) -> None:
        super().__init__(f"index {index!r} is being built; retry shortly")
        self.index = index


class HistoryNotKeptError(StoreError):
    """The store keeps no history, so it cannot answer as of a position."""


class HistoryExpiredError(StoreError):
    """The position is older than the oldest one the retained history answers exactly."""

    def __init__(self, store: str, as_of: object, floor: object) -> None:
        super().__init__(
            f'store "{store}" keeps history from position {floor} on; {as_of} is older.'
            " Read at a newer position, or raise history.retention_ms / retention_offsets"
        )
        self.as_of = as_of
        self.floor = floor


class TimeExpiredError(HistoryExpiredError):
    """A time older than the oldest one the retained history answers exactly (``store.table.timed``),
    or one that a key's versions do not settle (then ``key`` names it)."""

    def __init__(self, store: str, at: int, time_floor: int | None, key: bytes | None = None) -> None:
        asked = f"as_of_time {at}" + ("" if key is None else f" for key {key[:64]!r}")
        if key is not None:
            floor: str = (
                "a time this key's versions settle: a record applied after history began is stamped"
                " before the value history began with may have been"
            )
        elif time_floor is None:
            floor = "no time: this copy was restored in bulk, so the times of its older records are unknown"
        else:
            floor = f"time {time_floor}"
        StoreError.__init__(
            self,
            f'store "{store}" answers as_of_time from {floor} on; {asked} is older or unsettled.'
            " Read at a later time, or raise history.retention_ms / retention_offsets",
        )
        self.as_of = at
        self.floor = time_floor
        self.key = key


class PositionNotReachedError(StoreError):
    """The store has not applied the records up to this position yet."""
