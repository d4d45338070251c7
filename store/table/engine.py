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
import struct
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import rocksdict

from store.exceptions import (
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreLockedError,
    StoreReadError,
    StoreWriteError,
)
from store.protocol import MemoryUsage
from store.table import families
from store.table.corruption import check_status, family_get, prefixed, read_error
from store.table.options import (
    LEVEL0_COMPACTION_TRIGGER,
    LEVEL0_SLOWDOWN_WRITES_TRIGGER,
    LEVEL0_STOP_WRITES_TRIGGER,
    TARGET_FILE_BYTES,
    database_options,
    merge_file_bytes,
)
from store.table.volume import directory_size, is_space_error, write_buffer_for, write_error
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
_NATURAL_KEYS_KEY = b"natural_keys"
_OFFSET = struct.Struct(">q")
_PARTITION = struct.Struct(">i")


def _offset_key(partition: int) -> bytes:
    return _OFFSET_PREFIX + _PARTITION.pack(partition)


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
        self._merge_file_size_lowered = False
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

    def natural_keys(self) -> bytes | None:
        """How the stored keys were kept by natural value (``store.lifecycle.sharding``), or ``None``
        for keys stored as read."""
        layout: bytes | None = family_get(self._meta, _NATURAL_KEYS_KEY)
        return layout

    def set_natural_keys(self, layout: bytes | None) -> None:
        """Record how the keys written from now on are kept (``None``: as read)."""
        batch = self.new_batch()
        if layout is None:
            batch.delete(_NATURAL_KEYS_KEY, self._meta_handle)
        else:
            batch.put(_NATURAL_KEYS_KEY, layout, self._meta_handle)
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

    def get(self, key: bytes) -> bytes | None:
        """The current value of ``key`` in the table (``None``: absent), outside any snapshot:
        its caller holds the writes back for the moment it needs that value to stay current."""
        try:
            value: bytes | None = self._db.get(key)
        except Exception as exc:
            raise read_error(exc) from exc
        return value

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
        are raised above the files there are, until the next ``flush`` finds them compacted. And
        the target file size is lowered so that the merge runs in two threads even for a table
        smaller than two default files (``store.table.options.merge_file_bytes``), until a
        ``flush`` finds no compaction running or due.
        """
        changes = {"disable_auto_compactions": "true" if deferred else "false"}
        try:
            files = self._level0_files()
            if not deferred and files >= LEVEL0_SLOWDOWN_WRITES_TRIGGER:
                changes["level0_slowdown_writes_trigger"] = str(files + LEVEL0_SLOWDOWN_WRITES_TRIGGER)
                changes["level0_stop_writes_trigger"] = str(files + LEVEL0_STOP_WRITES_TRIGGER)
                self._write_triggers_raised = True
            if not deferred and files:
                table = int(self._db.property_int_value("rocksdb.total-sst-files-size") or 0)
                changes["target_file_size_base"] = str(merge_file_bytes(table))
                self._merge_file_size_lowered = True
            self._db.set_options(changes)
        except Exception as exc:
            raise self._write_error(exc) from exc

    def _restore_write_triggers(self) -> None:
        """RocksDB's write triggers again, once level 0 is below them, and its target file size
        once no compaction runs or is due (``defer_compactions``)."""
        if self._merge_file_size_lowered and self.compactions() == (0, False):
            self._db.set_options({"target_file_size_base": str(TARGET_FILE_BYTES)})
            self._merge_file_size_lowered = False
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
