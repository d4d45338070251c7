"""The RocksDB engine: one database per store, data and offsets written together.

Layout of a store directory (``state_dir / name``)::

    statestore.lock     advisory lock held by the process that owns the store
    db/                 the RocksDB database
        column family "default"  the table: key -> latest value
        column family "meta"     next offset per partition, topic identity, format version, index states
        column family "index"    secondary index entries (see ``store.indexes``)
        column families "history" and "changes"   versions for reads as of a position (``store.history``)
    bulk/               SST files being built by the bootstrap bulk loader

The WAL is disabled: the topic is the log. Data and offsets are written in one ``WriteBatch`` and
``atomic_flush`` persists both column families together, so after a crash they never disagree.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import rocksdict

from store.config import EngineTuning
from store.corruption import check_status, family_get, is_absent, named_file, prefixed, read_error
from store.exceptions import (
    ScanLimitError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    StoreReadError,
    StoreWriteError,
    UnknownIndexError,
)
from store.indexes import IndexSpec
from store.position import Position
from store.protocol import MAX_SCAN_LIMIT, MemoryUsage, ScanPage

logger = logging.getLogger(__name__)

FORMAT_VERSION = b"1"
_META_CF = "meta"
_INDEX_CF = "index"
_HISTORY_CF = "history"
_CHANGES_CF = "changes"
_HISTORY_START_PREFIX = b"history_start/"
_HISTORY_TIME_PREFIX = b"history_time/"
_CFS = ("default", _META_CF, _INDEX_CF, _HISTORY_CF, _CHANGES_CF)
_INDEX_STATE_PREFIX = b"index/"
_OFFSET_PREFIX = b"offset/"
_TOPIC_KEY = b"topic"
_TOPIC_ID_KEY = b"topic_id"
_FORMAT_KEY = b"format_version"
_OFFSET = struct.Struct(">q")
_PARTITION = struct.Struct(">i")


def _offset_key(partition: int) -> bytes:
    return _OFFSET_PREFIX + _PARTITION.pack(partition)


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (``None``: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


# What RocksDB reports when the volume, a quota or a file size limit refuses a write: the store's
# files are fine, so opening must wait for space rather than rebuild.
_SPACE_ERRORS = ("no space left on device", "file too large", "disk quota exceeded")


def _is_space_error(exc: Exception) -> bool:
    text = str(exc).lower()
    return any(marker in text for marker in _SPACE_ERRORS)


def _options(tuning: EngineTuning) -> rocksdict.Options:
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_atomic_flush(True)
    options.set_write_buffer_size(tuning.write_buffer_bytes)
    options.set_max_background_jobs(2)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(rocksdict.Cache(tuning.block_cache_bytes))
    table.set_bloom_filter(10, False)
    options.set_block_based_table_factory(table)
    options.set_compression_type(rocksdict.DBCompressionType.lz4())
    return options


class Engine:
    """An open RocksDB database holding one store's table and offsets.

    Writes come from one thread (the materializer); reads may come from any thread through
    snapshots.
    """

    def __init__(self, path: Path, tuning: EngineTuning) -> None:
        self.path = path
        self.tuning = tuning
        self._options = _options(tuning)
        try:
            # Options given only to the constructor are ignored when reopening an existing
            # database unless they are also given per column family.
            self._db = rocksdict.Rdict(
                str(path),
                self._options,
                column_families=dict.fromkeys(_CFS, self._options),
            )
        except Exception as exc:
            if _is_space_error(exc):
                raise StoreWriteError(
                    f"cannot open the RocksDB database at {path} ({exc}): its volume is full; free"
                    " space on it (or grow it): the store opens by itself once it can write again"
                ) from exc
            if "lock" in str(exc).lower():
                raise StoreLockedError(
                    f"the RocksDB database at {path} is still open in this process; stop the Store that"
                    " holds it (and drop its views) before opening it again"
                ) from exc
            raise StoreCorruptError(
                f"cannot open the RocksDB database at {path}: {exc}; the store will be rebuilt from the topic"
            ) from exc
        self._meta = self._db.get_column_family(_META_CF)
        self._meta_handle = self._db.get_column_family_handle(_META_CF)
        self._index = self._db.get_column_family(_INDEX_CF)
        self._index_handle = self._db.get_column_family_handle(_INDEX_CF)
        self.history = self._db.get_column_family(_HISTORY_CF)
        self._history_handle = self._db.get_column_family_handle(_HISTORY_CF)
        self.changes = self._db.get_column_family(_CHANGES_CF)
        self._changes_handle = self._db.get_column_family_handle(_CHANGES_CF)
        self._write_options = rocksdict.WriteOptions()
        self._write_options.disable_wal = True
        try:
            version = family_get(self._meta, _FORMAT_KEY)
        except StoreReadError as exc:
            self.close()
            raise StoreCorruptError(
                f"reading the metadata of the store at {path} failed ({exc.engine_message}); it will be"
                " rebuilt from the topic"
            ) from exc
        if version is None:
            self._meta.put(_FORMAT_KEY, FORMAT_VERSION, self._write_options)
        elif version != FORMAT_VERSION:
            self.close()
            raise StoreCorruptError(
                f"the store at {path} has format version {version!r}, this statestore writes"
                f" {FORMAT_VERSION!r}; it will be rebuilt from the topic"
            )

    # -- metadata ---------------------------------------------------------------------------

    def stored_position(self) -> Position:
        """The next offset per partition recorded with the data (empty for a new store)."""
        offsets: dict[int, int] = {}
        for key, value in prefixed(self._meta.iter(), _OFFSET_PREFIX):
            offsets[_PARTITION.unpack(key[len(_OFFSET_PREFIX) :])[0]] = _OFFSET.unpack(value)[0]
        return Position(offsets)

    def topic_identity(self) -> tuple[str | None, str | None]:
        """The topic name and topic id the stored data came from."""
        topic = family_get(self._meta, _TOPIC_KEY)
        topic_id = family_get(self._meta, _TOPIC_ID_KEY)
        return (topic.decode() if topic else None, topic_id.decode() if topic_id else None)

    def set_topic_identity(self, topic: str, topic_id: str | None) -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.put(_TOPIC_KEY, topic.encode(), self._meta_handle)
        if topic_id:
            batch.put(_TOPIC_ID_KEY, topic_id.encode(), self._meta_handle)
        self._db.write(batch, self._write_options)

    def index_states(self) -> dict[str, tuple[str, str]]:
        """Per index name: the field it was built on and its state (``building`` or ``ready``)."""
        states: dict[str, tuple[str, str]] = {}
        for key, value in prefixed(self._meta.iter(), _INDEX_STATE_PREFIX):
            field, _, state = value.decode().partition("\n")
            states[key[len(_INDEX_STATE_PREFIX) :].decode()] = (field, state)
        return states

    def put_index_state(self, batch: rocksdict.WriteBatch, name: str, field: str, state: str | None) -> None:
        """Record an index's state in ``batch`` (``None``: the index no longer exists)."""
        key = _INDEX_STATE_PREFIX + name.encode()
        if state is None:
            batch.delete(key, self._meta_handle)
        else:
            batch.put(key, f"{field}\n{state}".encode(), self._meta_handle)

    def put_index_entry(self, batch: rocksdict.WriteBatch, entry_key: bytes) -> None:
        batch.put(entry_key, b"", self._index_handle)

    def delete_index_entry(self, batch: rocksdict.WriteBatch, entry_key: bytes) -> None:
        batch.delete(entry_key, self._index_handle)

    def delete_index_range(self, batch: rocksdict.WriteBatch, prefix: bytes) -> None:
        """Remove every index entry whose key starts with ``prefix``."""
        upper = prefix_upper_bound(prefix)
        assert upper is not None, "index prefixes never consist of 0xff bytes only"
        batch.delete_range(prefix, upper, self._index_handle)

    def get_latest(self, keys: list[bytes]) -> list[bytes | None]:
        """Current values, outside any snapshot (the materializer is the only writer)."""
        values: list[bytes | None] = family_get(self._db, keys)
        return values

    def history_start(self) -> Position:
        """Where history began per partition (empty: no history kept yet)."""
        return Position(
            {
                _PARTITION.unpack(key[len(_HISTORY_START_PREFIX) :])[0]: _OFFSET.unpack(value)[0]
                for key, value in self._meta_range(_HISTORY_START_PREFIX)
            }
        )

    def history_time_log(self) -> list[tuple[int, int, int]]:
        """``(partition, next_offset, timestamp_ms)`` of applied batches since history began."""
        log = []
        for key, value in self._meta_range(_HISTORY_TIME_PREFIX):
            suffix = key[len(_HISTORY_TIME_PREFIX) :]
            partition = _PARTITION.unpack(suffix[: _PARTITION.size])[0]
            log.append((partition, _OFFSET.unpack(suffix[_PARTITION.size :])[0], _OFFSET.unpack(value)[0]))
        return log

    def put_history_start(self, batch: rocksdict.WriteBatch, position: Mapping[int, int]) -> None:
        for partition, next_offset in position.items():
            batch.put(
                _HISTORY_START_PREFIX + _PARTITION.pack(partition),
                _OFFSET.pack(next_offset),
                self._meta_handle,
            )

    def put_history_time(
        self, batch: rocksdict.WriteBatch, partition: int, next_offset: int, timestamp: int
    ) -> None:
        key = _HISTORY_TIME_PREFIX + _PARTITION.pack(partition) + _OFFSET.pack(next_offset)
        batch.put(key, _OFFSET.pack(timestamp), self._meta_handle)

    def delete_history_time_below(
        self, batch: rocksdict.WriteBatch, partition: int, next_offset: int
    ) -> None:
        prefix = _HISTORY_TIME_PREFIX + _PARTITION.pack(partition)
        batch.delete_range(prefix, prefix + _OFFSET.pack(next_offset), self._meta_handle)

    def put_version(self, batch: rocksdict.WriteBatch, history_key: bytes, stored: bytes) -> None:
        batch.put(history_key, stored, self._history_handle)

    def delete_versions(self, batch: rocksdict.WriteBatch, begin: bytes, end: bytes) -> None:
        batch.delete_range(begin, end, self._history_handle)

    def delete_version(self, batch: rocksdict.WriteBatch, history_key: bytes) -> None:
        batch.delete(history_key, self._history_handle)

    def put_change(self, batch: rocksdict.WriteBatch, change: bytes, key: bytes) -> None:
        batch.put(change, key, self._changes_handle)

    def delete_change(self, batch: rocksdict.WriteBatch, change: bytes) -> None:
        batch.delete(change, self._changes_handle)

    def clear_history(self, batch: rocksdict.WriteBatch) -> None:
        """Forget all history (it restarts when the store is next READY)."""
        batch.delete_range(b"", b"\xff" * 64, self._history_handle)
        batch.delete_range(b"", b"\xff" * 16, self._changes_handle)
        for prefix in (_HISTORY_START_PREFIX, _HISTORY_TIME_PREFIX):
            upper = prefix_upper_bound(prefix)
            assert upper is not None
            batch.delete_range(prefix, upper, self._meta_handle)

    def _meta_range(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        return list(prefixed(self._meta.iter(), prefix))

    # -- writes -----------------------------------------------------------------------------

    def new_batch(self) -> rocksdict.WriteBatch:
        return rocksdict.WriteBatch(raw_mode=True)

    def put_offsets(self, batch: rocksdict.WriteBatch, offsets: Mapping[int, int]) -> None:
        """Add the new next offset of each partition to ``batch``."""
        for partition, next_offset in offsets.items():
            batch.put(_offset_key(partition), _OFFSET.pack(next_offset), self._meta_handle)

    def defer_compactions(self, deferred: bool) -> None:
        """Stop (``True``) or resume automatic compactions of the table.

        While a bulk restore ingests its files, compacting them costs the restore a CPU it needs,
        and each later file would be merged again; once resumed, RocksDB compacts them all at once.
        Not persisted: a reopened store compacts as usual.
        """
        try:
            self._db.set_options({"disable_auto_compactions": "true" if deferred else "false"})
        except Exception as exc:
            raise self._write_error(exc) from exc

    def write(self, batch: rocksdict.WriteBatch) -> None:
        """Apply ``batch`` atomically (WAL disabled: the topic is the log)."""
        try:
            self._db.write(batch, self._write_options)
        except Exception as exc:
            raise self._write_error(exc) from exc

    def _write_error(self, exc: Exception) -> StoreWriteError | StoreReadError:
        text = str(exc)
        if text.startswith("Corruption"):
            # A flush or compaction read a corrupt file, and RocksDB refuses writes from then on:
            # the copy is corrupt, not the volume full.
            return StoreReadError(
                f"RocksDB refuses writes to the store at {self.path}: its background work found a"
                f" corrupt file ({text})",
                file=named_file(text),
                engine_message=text,
            )
        return StoreWriteError(
            f"cannot write the store at {self.path} ({exc}); free space on its volume (or grow it):"
            " the store resumes by itself once it can write again"
        )

    def ingest(self, sst_paths: Sequence[Path]) -> None:
        """Ingest SST files built by the bulk loader into the table (later files win)."""
        options = rocksdict.IngestExternalFileOptions()
        options.set_move_files(True)
        try:
            self._db.ingest_external_file([str(p) for p in sst_paths], options)
        except Exception as exc:
            raise self._write_error(exc) from exc

    def flush(self) -> None:
        """Persist the memtables of every column family, the offsets last.

        rocksdict flushes one column family per call (flushing the table alone left the offsets
        in memory, so a crash re-read the whole topic). In this order a crash between the calls
        leaves only data, indexes and history ahead of the offsets, which replaying the records
        from the offsets makes right again.
        """
        try:
            for family in (self._index, self.history, self.changes, self._db, self._meta):
                family.flush(True)
        except Exception as exc:
            raise self._write_error(exc) from exc

    # -- reads ------------------------------------------------------------------------------

    def snapshot(self) -> rocksdict.Snapshot:
        return self._db.snapshot()

    def index_snapshot(self) -> rocksdict.Snapshot:
        return self._index.snapshot()

    def history_snapshot(self) -> rocksdict.Snapshot:
        return self.history.snapshot()

    def changes_snapshot(self) -> rocksdict.Snapshot:
        return self.changes.snapshot()

    @property
    def column_families(self) -> tuple[str, ...]:
        """The names of every column family of the database."""
        return _CFS

    def verify_page(
        self, family: str, start: bytes | None, max_entries: int
    ) -> tuple[bytes | None, int, int]:
        """Read up to ``max_entries`` entries of column family ``family`` from ``start`` on.

        Every block read from a file has its checksum verified; blocks read do not enter the block
        cache, so verifying does not push the hot blocks out. Returns ``(where the next page starts
        or None at the family's end, entries read, bytes read)``; ``StoreReadError`` on a failure.
        """
        handle = {
            "default": self._db,
            _META_CF: self._meta,
            _INDEX_CF: self._index,
            _HISTORY_CF: self.history,
            _CHANGES_CF: self.changes,
        }[family]
        options = rocksdict.ReadOptions()
        options.set_verify_checksums(True)
        options.fill_cache(False)
        options.set_readahead_size(2 * 1024 * 1024)
        try:
            iterator = handle.iter(options)
            if start is None:
                iterator.seek_to_first()
            else:
                iterator.seek(start)
            entries = size = 0
            while entries < max_entries and iterator.valid():
                size += len(iterator.key()) + len(iterator.value())
                entries += 1
                iterator.next()
            if iterator.valid():
                return iterator.key(), entries, size
        except StoreError:
            raise
        except Exception as exc:
            raise read_error(exc) from exc
        check_status(iterator)
        return None, entries, size

    def approximate_num_keys(self) -> int:
        return int(self._db.property_int_value("rocksdb.estimate-num-keys") or 0)

    def memory(self, read_cache_entries: int) -> MemoryUsage:
        """The block cache (shared by the column families) and the memtables of every column family."""
        db = self._db
        memtables = sum(
            int(family.property_int_value("rocksdb.cur-size-all-mem-tables") or 0)
            for family in (db, self._meta, self._index, self.history, self.changes)
        )
        return MemoryUsage(
            block_cache_capacity_bytes=int(db.property_int_value("rocksdb.block-cache-capacity") or 0),
            block_cache_usage_bytes=int(db.property_int_value("rocksdb.block-cache-usage") or 0),
            memtable_bytes=memtables,
            read_cache_entries=read_cache_entries,
        )

    def size_on_disk_bytes(self) -> int:
        return directory_size(self.path)

    def close(self) -> None:
        """Close the database; column family objects are dropped too, as each keeps it open."""
        try:
            self._db.close()
        except Exception:  # closing twice is harmless
            logger.debug("closing %s failed", self.path, exc_info=True)
        for name in ("_meta", "_meta_handle", "_index", "_index_handle", "history", "_history_handle"):
            setattr(self, name, None)
        for name in ("changes", "_changes_handle", "_db"):
            setattr(self, name, None)


def directory_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += (Path(root) / name).stat().st_size
            except FileNotFoundError:  # compaction removed it while we walked
                continue
    return total


def can_write(directory: Path, size: int) -> bool:
    """Whether ``size`` bytes can be written (and synced) under ``directory`` now."""
    probe = directory / ".space-probe"
    try:
        with open(probe, "wb") as file:
            chunk = bytes(min(size, 1 << 20))
            for _ in range(0, size, len(chunk)):
                file.write(chunk)
            file.flush()
            os.fsync(file.fileno())
        return True
    except OSError:
        return False
    finally:
        probe.unlink(missing_ok=True)


def destroy(path: Path) -> None:
    """Remove a database directory entirely."""
    shutil.rmtree(path, ignore_errors=True)


class _ReleasedSnapshot:
    def __getitem__(self, key: bytes) -> bytes:
        raise StoreClosedError("this view has ended; take a new one with store.view()")

    def iter(self, read_options: object = None) -> Any:
        raise StoreClosedError("this view has ended; take a new one with store.view()")

    def seek(self, key: bytes) -> None:
        raise StoreClosedError("this view has ended; take a new one with store.view()")


class SnapshotReader:
    """Reads from one RocksDB snapshot; implements ``ReadOnlyKeyValueStore``."""

    __slots__ = ("_index_iterator", "_index_snapshot", "_indexes", "_iterator", "_position", "_snapshot")

    def __init__(
        self,
        snapshot: rocksdict.Snapshot | _ReleasedSnapshot,
        position: Position,
        index_snapshot: rocksdict.Snapshot | _ReleasedSnapshot | None = None,
        indexes: Mapping[str, IndexSpec] | None = None,
    ) -> None:
        self._snapshot = snapshot
        self._position = position
        self._index_snapshot = index_snapshot
        self._indexes = indexes or {}
        # rocksdict's Snapshot.iter() drops the snapshot and iterates the live database; an
        # iterator reads the version current when it is created, so scans use iterators made now,
        # while the store lock holds writes back.
        self._iterator: Any = snapshot.iter()
        self._index_iterator: Any = index_snapshot.iter() if index_snapshot is not None else None

    @property
    def snapshot(self) -> Any:
        return self._snapshot

    @property
    def iterator(self) -> Any:
        """The table iterator pinned when this view was taken (re-seek it; never share threads)."""
        return self._iterator

    def release(self) -> None:
        """Drop the snapshot so the database can close; later reads raise ``StoreClosedError``."""
        self._snapshot = _ReleasedSnapshot()
        self._index_snapshot = _ReleasedSnapshot()
        self._iterator = self._index_iterator = _ReleasedSnapshot()

    def get(self, key: bytes) -> bytes | None:
        return self.get_many((key,))[0]

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values in request order, ``None`` only for absent keys; ``StoreReadError`` if a read failed."""
        snapshot = self._snapshot
        values: list[bytes | None] = []
        append = values.append
        for key in keys:
            try:
                append(snapshot[key])
            except StoreClosedError:
                raise
            except Exception as exc:  # rocksdict raises a bare Exception for absence and failure alike
                if not is_absent(exc):
                    raise read_error(exc) from exc
                append(None)
        return values

    def prefix_scan(self, prefix: bytes, *, after: bytes | None = None, limit: int = 1000) -> ScanPage:
        return ScanPage(*_scan(self._iterator, prefix, after, limit, lambda key: key))

    def index_scan(
        self, index: str, value: bytes, *, after: bytes | None = None, limit: int = 1000
    ) -> ScanPage:
        spec = self._indexes.get(index)
        if spec is None or self._index_iterator is None:
            raise UnknownIndexError(index, sorted(self._indexes))
        value_prefix = spec.value_prefix(value)
        start_after = None if after is None else value_prefix + after
        entries, next_after = _scan(
            self._index_iterator, value_prefix, start_after, limit, lambda key: key[len(value_prefix) :]
        )
        row_keys = [row_key for row_key, _ in entries]
        rows = self.get_many(row_keys)
        # Index and rows come from snapshots taken together, so every entry has its row.
        items = [(k, v) for k, v in zip(row_keys, rows, strict=True) if v is not None]
        return ScanPage(items, next_after)

    def position(self) -> Position:
        return self._position


def _scan(
    iterator: Any, prefix: bytes, after: bytes | None, limit: int, key_of: Callable[[bytes], bytes]
) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
    """One bounded, byte-ordered page of keys starting with ``prefix``, strictly after ``after``."""
    if limit < 1:
        raise ScanLimitError(f"scan limit must be at least 1, got {limit}")
    limit = min(limit, MAX_SCAN_LIMIT)
    iterator.seek(prefix if after is None or after < prefix else after + b"\x00")
    items: list[tuple[bytes, bytes]] = []
    while iterator.valid():
        key = iterator.key()
        if not key.startswith(prefix):
            break
        if len(items) == limit:
            return items, items[-1][0]
        items.append((key_of(key), iterator.value()))
        iterator.next()
    # An iterator also stops on a failed read: without this check a corrupt block ends the page early.
    check_status(iterator)
    return items, None


def iter_offsets(records: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Next offset per partition after ``(partition, offset)`` records."""
    offsets: dict[int, int] = {}
    for partition, offset in records:
        offsets[partition] = offset + 1
    return offsets
