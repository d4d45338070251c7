"""The RocksDB engine: one database per store, data and offsets written together.

Layout of a store directory (``state_dir / name``)::

    statestore.lock     advisory lock held by the process that owns the store
    db/                 the RocksDB database: the table, offsets, indexes, history (``store.table.families``)
    bulk/               SST files being built by the bootstrap bulk loader

The WAL is disabled: the topic is the log. Data and offsets are written in one ``WriteBatch`` and
``atomic_flush`` persists both column families together, so after a crash they never disagree.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import rocksdict

from store.exceptions import (
    ScanLimitError,
    StoreClosedError,
    StoreCorruptError,
    StoreCorruptWriteError,
    StoreError,
    StoreFullError,
    StoreIOError,
    StoreLockedError,
    StoreReadError,
    StoreWriteError,
    StoreWriterClosedError,
    UnknownIndexError,
)
from store.protocol import MAX_SCAN_LIMIT, MemoryUsage, ScanPage
from store.table import families
from store.table.corruption import check_status, family_get, is_absent, named_file, prefixed, read_error
from store.table.indexes import IndexSpec
from store.table_format import compression, table_options
from store.tuning import RocksDBOptions
from wire.position import Position

logger = logging.getLogger(__name__)

FORMAT_VERSION = b"1"
# The engine's own keys in the meta family (other owners' prefixes: ``store.table.families``).
_OFFSET_PREFIX = b"offset/"
_TOPIC_KEY = b"topic"
_TOPIC_ID_KEY = b"topic_id"
_FORMAT_KEY = b"format_version"
_VALUES_CHECKED_KEY = b"values_checked"
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


def is_space_error(error: Exception | str) -> bool:
    """Whether RocksDB's (or the OS's) message says the volume, a quota or a file size limit
    refused a write."""
    text = str(error).lower()
    return any(marker in text for marker in _SPACE_ERRORS)


def write_error(path: Path, exc: Exception, closed: bool = False) -> StoreWriteError:
    """The error to raise for RocksDB's refusal ``exc`` to write the database at ``path``, by kind,
    saying what to do. ``closed``: the engine was closed already.

    RocksDB names the kind at the start of its message (``IO error: No space left on device``,
    ``Corruption: block checksum mismatch``); rocksdict raises ``DbClosedError`` once closed.
    """
    text = str(exc)
    kind = text.lower()
    if closed or isinstance(exc, rocksdict.DbClosedError):
        return StoreWriterClosedError(
            f"the store at {path} was closed while being written ({text or type(exc).__name__}); nothing"
            " to do: the store is stopping, or reopening its copy"
        )
    if is_space_error(exc):
        return StoreFullError(
            f"cannot write the store at {path} ({text}); free space on its volume (or grow it):"
            " the store resumes by itself once it can write again"
        )
    if kind.startswith("corruption"):
        # A flush or compaction read a corrupt file, and RocksDB refuses writes from then on: the
        # copy is corrupt (not the volume full), and the store rebuilds it from the topic.
        return StoreCorruptWriteError(
            f"RocksDB refuses writes to the store at {path}: its background work found a corrupt file"
            f" ({text}); the store rebuilds its copy from the topic. If this recurs, check the volume"
            " (the kernel log names failing devices)",
            file=named_file(text),
            engine_message=text,
        )
    if kind.startswith("io error"):
        return StoreIOError(
            f"cannot write the store at {path}: an I/O error ({text}); check its volume (the kernel log"
            " names failing devices): the store retries by itself"
        )
    return StoreWriteError(
        f"cannot write the store at {path} ({text}); the store retries by itself. If this recurs,"
        " report it with this message"
    )


# RocksDB compacts level 0 once it holds this many files (its default, set here because
# Engine.compact_leftover_level0 relies on it).
LEVEL0_COMPACTION_TRIGGER = 4
# From this many level-0 files RocksDB slows writes down, and stops them (its defaults; see
# Engine.defer_compactions).
LEVEL0_SLOWDOWN_WRITES_TRIGGER = 20
LEVEL0_STOP_WRITES_TRIGGER = 36


# Threads of one level-0 compaction: the merge of a bulk restore's files runs before READY
# (``store.lifecycle.settle``), when nothing else of the store runs, so it may take a second core.
SUBCOMPACTIONS = 2

_INFO_LOG_FILES = 2
_INFO_LOG_FILE_BYTES = 512 * 1024


# The smallest write buffer a small volume gets (see ``write_buffer_for``).
_MIN_WRITE_BUFFER_BYTES = 1024 * 1024


def write_buffer_for(path: Path, configured: int) -> int:
    """The write buffer (memtable) size of the database at ``path``: ``configured``, but at most a
    quarter of its volume. After a full volume refused a flush, RocksDB resumes writing by itself
    only once a write buffer is free; on a volume not much larger than one it never would."""
    directory = path
    while not directory.exists() and directory != directory.parent:
        directory = directory.parent
    try:
        stats = os.statvfs(directory)
    except OSError:
        return configured
    return min(configured, max(_MIN_WRITE_BUFFER_BYTES, stats.f_blocks * stats.f_frsize // 4))


_shared_caches: dict[int, rocksdict.Cache] = {}
_shared_caches_lock = threading.Lock()


def block_cache(tuning: RocksDBOptions) -> rocksdict.Cache:
    """The block cache of a database tuned by ``tuning``: its own, or the process's shared cache of
    that capacity (``RocksDBOptions.share_block_cache``), created by the first database to ask."""
    if not tuning.share_block_cache:
        return rocksdict.Cache(tuning.block_cache_bytes)
    with _shared_caches_lock:
        cache = _shared_caches.get(tuning.block_cache_bytes)
        if cache is None:
            cache = _shared_caches[tuning.block_cache_bytes] = rocksdict.Cache(tuning.block_cache_bytes)
        return cache


def database_options(tuning: RocksDBOptions, write_buffer_bytes: int) -> rocksdict.Options:
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_atomic_flush(True)
    options.set_write_buffer_size(write_buffer_bytes)
    options.set_max_background_jobs(2)
    options.set_max_subcompactions(SUBCOMPACTIONS)
    options.set_level_zero_file_num_compaction_trigger(LEVEL0_COMPACTION_TRIGGER)
    options.set_level_zero_slowdown_writes_trigger(LEVEL0_SLOWDOWN_WRITES_TRIGGER)
    options.set_level_zero_stop_writes_trigger(LEVEL0_STOP_WRITES_TRIGGER)
    options.set_block_based_table_factory(table_options(block_cache(tuning)))
    options.set_compression_type(compression())
    # RocksDB's own info log: every open renames the last one to LOG.old.*; a store reopened after
    # write errors on a full volume must not fill what is left of it with them.
    options.set_keep_log_file_num(_INFO_LOG_FILES)
    options.set_max_log_file_size(_INFO_LOG_FILE_BYTES)
    return options


class Engine:
    """An open RocksDB database holding one store's table and offsets.

    Writes come from one thread (the materializer); reads may come from any thread through
    snapshots.
    """

    def __init__(self, path: Path, options: RocksDBOptions) -> None:
        self.path = path
        self.write_buffer_bytes = write_buffer_for(path, options.write_buffer_bytes)
        if self.write_buffer_bytes < options.write_buffer_bytes:
            logger.info(
                "the store at %s writes memtables of %d MiB, not engine.write_buffer_bytes (%d MiB): at"
                " most a quarter of its volume, so that RocksDB resumes by itself after the volume was full",
                path,
                self.write_buffer_bytes // 2**20,
                options.write_buffer_bytes // 2**20,
            )
        self._options = database_options(options, self.write_buffer_bytes)
        try:
            # Options given only to the constructor are ignored when reopening an existing
            # database unless they are also given per column family.
            self._db = rocksdict.Rdict(
                str(path),
                self._options,
                column_families=dict.fromkeys(families.ALL, self._options),
            )
        except Exception as exc:
            if is_space_error(exc):
                raise StoreFullError(
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
        self._families: dict[str, Any] = {
            name: self._db if name == families.DEFAULT else self._db.get_column_family(name)
            for name in families.ALL
        }
        self._handles = {name: self._db.get_column_family_handle(name) for name in families.ALL}
        self._meta = self._families[families.META]
        self._meta_handle = self._handles[families.META]
        self._write_options = rocksdict.WriteOptions()
        self._write_options.disable_wal = True
        self._write_triggers_raised = False
        try:
            version = family_get(self._meta, _FORMAT_KEY)
        except StoreReadError as exc:
            self.close()
            raise StoreCorruptError(
                f"reading the metadata of the store at {path} failed ({exc.engine_message}); it will be"
                " rebuilt from the topic"
            ) from exc
        if version is None:
            try:
                self._meta.put(_FORMAT_KEY, FORMAT_VERSION, self._write_options)
            except Exception as exc:
                self.close()
                raise write_error(path, exc) from exc
        elif version != FORMAT_VERSION:
            self.close()
            raise StoreCorruptError(
                f"the store at {path} has format version {version!r}, this statestore writes"
                f" {FORMAT_VERSION!r}; it will be rebuilt from the topic"
            )

    # -- metadata ---------------------------------------------------------------------------

    def stored_position(self) -> Position:
        """The next offset per partition recorded with the data (empty for a new store)."""
        return Position(
            {
                _PARTITION.unpack(key[len(_OFFSET_PREFIX) :])[0]: _OFFSET.unpack(value)[0]
                for key, value in self.prefixed(families.META, _OFFSET_PREFIX)
            }
        )

    def topic_identity(self) -> tuple[str | None, str | None]:
        """The topic name and topic id the stored data came from."""
        topic = family_get(self._meta, _TOPIC_KEY)
        topic_id = family_get(self._meta, _TOPIC_ID_KEY)
        return (topic.decode() if topic else None, topic_id.decode() if topic_id else None)

    def set_topic_identity(self, topic: str, topic_id: str | None) -> None:
        batch = self.new_batch()
        batch.put(_TOPIC_KEY, topic.encode(), self._meta_handle)
        if topic_id:
            batch.put(_TOPIC_ID_KEY, topic_id.encode(), self._meta_handle)
        self.write(batch)

    def values_checked(self) -> bytes | None:
        """How every stored value was checked when written (``store.json_values.JSON_CHECKED``), or
        ``None`` for values stored as read."""
        check: bytes | None = family_get(self._meta, _VALUES_CHECKED_KEY)
        return check

    def set_values_checked(self, check: bytes | None) -> None:
        """Record how the values written from now on are checked (``None``: not at all)."""
        batch = self.new_batch()
        if check is None:
            batch.delete(_VALUES_CHECKED_KEY, self._meta_handle)
        else:
            batch.put(_VALUES_CHECKED_KEY, check, self._meta_handle)
        self.write(batch)

    # -- generic access to the column families ---------------------------------------------

    def family(self, name: str) -> Any:
        """The column family ``name`` (``store.table.families``), for reads: ``get``, ``iter``, ``snapshot``.

        Read it through ``store.table.corruption``'s helpers, so that only "not found" means absent.
        """
        return self._families[name]

    def handle(self, name: str) -> Any:
        """The handle of column family ``name``, for writes to it in a batch (``batch.put(k, v, handle)``)."""
        return self._handles[name]

    def prefixed(self, name: str, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """Every entry of column family ``name`` whose key starts with ``prefix``, byte-ordered.

        For the small ranges of metadata only: the whole range is read at once. A failed read
        raises ``StoreReadError`` rather than ending the range early.
        """
        return list(prefixed(self._families[name].iter(), prefix))

    def get_latest(self, keys: list[bytes]) -> list[bytes | None]:
        """Current values, outside any snapshot (the materializer is the only writer)."""
        values: list[bytes | None] = family_get(self._db, keys)
        return values

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

        A large restore leaves more level-0 files than RocksDB lets writes go on with: it would
        stop every write (the restore's last records and offsets too, so READY) until it had
        compacted them, about a second per million records. So on resuming, the write triggers
        are raised above the files there are, until the next ``flush`` finds them compacted.
        """
        changes = {"disable_auto_compactions": "true" if deferred else "false"}
        try:
            files = self._level0_files()
            if not deferred and files >= LEVEL0_SLOWDOWN_WRITES_TRIGGER:
                changes["level0_slowdown_writes_trigger"] = str(files + LEVEL0_SLOWDOWN_WRITES_TRIGGER)
                changes["level0_stop_writes_trigger"] = str(files + LEVEL0_STOP_WRITES_TRIGGER)
                self._write_triggers_raised = True
            self._db.set_options(changes)
        except Exception as exc:
            raise self._write_error(exc) from exc

    def _restore_write_triggers(self) -> None:
        """RocksDB's write triggers again, once level 0 is below them (``defer_compactions``)."""
        if self._write_triggers_raised and self._level0_files() < LEVEL0_SLOWDOWN_WRITES_TRIGGER:
            self._db.set_options(
                {
                    "level0_slowdown_writes_trigger": str(LEVEL0_SLOWDOWN_WRITES_TRIGGER),
                    "level0_stop_writes_trigger": str(LEVEL0_STOP_WRITES_TRIGGER),
                }
            )
            self._write_triggers_raised = False

    def _level0_files(self) -> int:
        return int(self._db.property_int_value("rocksdb.num-files-at-level0") or 0)

    def level0(self) -> tuple[int, int]:
        """The table's level-0 files: how many, and about how many bytes on disk (to the MiB)."""
        try:
            stats = str(self._db.property_value("rocksdb.levelstats") or "")
            files = self._level0_files()
        except Exception as exc:
            raise self._write_error(exc) from exc
        # "Level Files Size(MB)", a rule, then one line per level: "  0        3        12".
        for line in stats.splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[0] == "0" and fields[2].isdigit():
                return files, int(fields[2]) * 2**20
        return files, 0

    def compactions(self) -> tuple[int, bool]:
        """The table's compactions: how many run now, and whether RocksDB has one due."""
        try:
            db = self._db
            running = int(db.property_int_value("rocksdb.num-running-compactions") or 0)
            return running, int(db.property_int_value("rocksdb.compaction-pending") or 0) > 0
        except Exception as exc:
            raise self._write_error(exc) from exc

    def block_cache_room(self) -> tuple[int, int]:
        """``(bytes the table's blocks take uncompressed, bytes free in the block cache)``.

        The blocks' size is estimated from the keys' and values' raw sizes, plus a tenth for the
        blocks' own structure and the cache's entries (a 3M-record table here: 404 MB of keys and
        values, 436 MB cached). A shared cache counts what the other stores hold as taken.
        """
        try:
            db = self._db
            text = str(db.property_value("rocksdb.aggregated-table-properties") or "")
            capacity = int(db.property_int_value("rocksdb.block-cache-capacity") or 0)
            usage = int(db.property_int_value("rocksdb.block-cache-usage") or 0)
        except Exception as exc:
            raise self._write_error(exc) from exc
        raw = {
            name.strip(): value.strip()
            for name, _, value in (field.partition("=") for field in text.split(";"))
        }
        size = sum(int(raw.get(name, "0") or 0) for name in ("raw key size", "raw value size"))
        return size + size // 10, max(0, capacity - usage)

    def warm_block_cache(self, stop: threading.Event) -> int:
        """Read the whole table once through the block cache, in key order (files read ahead);
        returns the entries read. Ends early on ``stop``; ``StoreReadError`` if a read failed.

        A cold read whose block is not cached reads it from the file, checks and decompresses it:
        most of its cost at 10M records (``docs/benchmarks.md``, "Scale"). About 0.4 µs of CPU a
        record, holding the interpreter lock in steps (other threads run between them).
        """
        options = rocksdict.ReadOptions()
        options.fill_cache(True)
        options.set_readahead_size(2 * 1024 * 1024)
        entries = 0
        try:
            iterator = self._db.iter(options)
            iterator.seek_to_first()
            step, valid = iterator.next, iterator.valid
            while valid():
                step()
                entries += 1
                if not entries & 0xFFFF and stop.is_set():
                    return entries
        except StoreError:
            raise
        except Exception as exc:
            raise read_error(exc) from exc
        check_status(iterator)
        return entries

    def compact_leftover_level0(self) -> int:
        """Merge the table's level-0 files into its sorted levels if RocksDB would leave them there;
        returns how many level-0 files there were.

        A bulk restore ingests one file per chunk, and files whose keys overlap stay in level 0,
        where a point read searches every one of them. From ``LEVEL0_COMPACTION_TRIGGER`` files on,
        RocksDB compacts them in the background; fewer (a bulk restore of up to about a million
        records) would stay until later writes add more, doubling the cost of a cold read for good.
        Blocks the calling thread (not the GIL) while it runs: about a second per million records.
        """
        try:
            files = self._level0_files()
            if 0 < files < LEVEL0_COMPACTION_TRIGGER:
                self._db.compact_range(None, None, rocksdict.CompactOptions())
        except Exception as exc:
            raise self._write_error(exc) from exc
        return files

    def write(self, batch: rocksdict.WriteBatch) -> None:
        """Apply ``batch`` atomically (WAL disabled: the topic is the log)."""
        try:
            self._db.write(batch, self._write_options)
        except Exception as exc:
            raise self._write_error(exc) from exc

    def _write_error(self, exc: Exception) -> StoreWriteError:
        return write_error(self.path, exc, closed=self._db is None)

    def check_writable(self) -> None:
        """Write the format version again (a change of nothing, and no file is created): raises the
        write error while RocksDB refuses writes after a background error, returns once it takes
        them again."""
        batch = self.new_batch()
        batch.put(_FORMAT_KEY, FORMAT_VERSION, self._meta_handle)
        self.write(batch)

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
        last = (families.DEFAULT, families.META)
        try:
            self._restore_write_triggers()
            for name in [*(name for name in families.ALL if name not in last), *last]:
                self._families[name].flush(True)
        except Exception as exc:
            raise self._write_error(exc) from exc

    # -- reads ------------------------------------------------------------------------------

    def snapshot(self) -> rocksdict.Snapshot:
        return self._db.snapshot()

    def index_snapshot(self) -> rocksdict.Snapshot:
        return self._families[families.INDEX].snapshot()

    def history_snapshot(self) -> rocksdict.Snapshot:
        return self._families[families.HISTORY].snapshot()

    def changes_snapshot(self) -> rocksdict.Snapshot:
        return self._families[families.CHANGES].snapshot()

    @property
    def column_families(self) -> tuple[str, ...]:
        """The names of every column family of the database."""
        return families.ALL

    def verify_page(
        self, family: str, start: bytes | None, max_entries: int
    ) -> tuple[bytes | None, int, int]:
        """Read up to ``max_entries`` entries of column family ``family`` from ``start`` on.

        Every block read from a file has its checksum verified; blocks read do not enter the block
        cache, so verifying does not push the hot blocks out. Returns ``(where the next page starts
        or None at the family's end, entries read, bytes read)``; ``StoreReadError`` on a failure.
        """
        handle = self._families[family]
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
            for family in self._families.values()
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
        self._families.clear()
        self._handles.clear()
        self._meta = self._meta_handle = self._db = None


def directory_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += (Path(root) / name).stat().st_size
            except FileNotFoundError:  # compaction removed it while we walked
                continue
    return total


def free_bytes(directory: Path) -> int:
    """Bytes free for an unprivileged writer on the volume of ``directory`` (0 if unknown)."""
    try:
        stats = os.statvfs(directory)
    except OSError:
        return 0
    return stats.f_bavail * stats.f_frsize


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
