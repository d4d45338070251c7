"""Batched lookups of Arrow key columns: dedupe, a per-task cache, one request per batch, vectorized decoding.

The executor side of the Spark lookup join and lookup UDF, written against pyarrow only (Spark
hands these functions Arrow batches), so it is tested without Spark.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc

from clients.client import StatestoreClient
from clients.history import HistoryReads, key_time_pairs, whole_histories
from clients.natural_keys import PENDING_KEY_FORMATS, stored_key_array
from clients.options import ClientOptions
from clients.store_files import COLUMNS, StoreFile, file_name, share_dir, store_columns
from clients.value_decoding import decode
from clients.whole_store import DEFAULT_SCAN_BYTES, SharedStores, read_whole, worth_scanning
from clients.wire import ValueFormat

log = logging.getLogger("clients.lookup")

DEFAULT_CACHE_BYTES = 256 * 1024 * 1024
"""Bytes of keys and decoded values one task keeps, so keys repeated across batches are asked once."""

REQUESTS_IN_FLIGHT = 4
"""Batch-get requests one lookup keeps in flight: the service answers one while the task sends the
next and decodes the last (one at a time, the task and the service mostly waited on each other)."""


@dataclasses.dataclass(frozen=True, slots=True)
class LookupSpec:
    """Everything a task needs to look keys up; built on the driver, shipped (pickled) to executors.

    ``value_type`` is the Arrow struct type of a JSON store's values when the caller gave a schema;
    otherwise values come out as ``binary`` (bytes stores) or ``string`` (string and JSON stores).
    With ``exact`` every read is ``as_of`` the position (the same answer on every retry), else it
    demands at least the position. With ``index`` the lookup finds the rows whose indexed field
    equals the looked-up value (one-to-many) instead of the row with that key.
    """

    options: ClientOptions
    store: str
    position: str  # the pinned position every read demands (or reads exactly, if ``exact``)
    value_format: ValueFormat
    value_type: pa.StructType | None = None
    cache_bytes: int = DEFAULT_CACHE_BYTES
    exact: bool = False
    index: str | None = None
    key_format: str = "bytes"  # how the store's producers wrote keys (clients.natural_keys)
    # Only these fields of each value are fetched (the ones the output needs), when known.
    fields: tuple[str, ...] | None = None
    # The store's approximate key count, when a lookup may read it whole by Arrow scan pages
    # (clients.whole_store: values stored as a batch get answers them, one shard, no ``fields``);
    # ``None``: always by batch gets. ``scan_bytes`` bounds the stored bytes read so.
    store_keys: int | None = None
    scan_bytes: int = DEFAULT_SCAN_BYTES
    # Names the planned read: a store read whole is kept for the process's next tasks of the same
    # spec only. A lookup planned again reads afresh, unless the driver gives it the read planned
    # before at the same copy and position of the store (``clients.spark.plan_cache``).
    lookup_id: str = ""

    @property
    def min_position(self) -> str | None:
        return None if self.exact else self.position

    @property
    def as_of(self) -> str | None:
        return self.position if self.exact else None

    @property
    def output_type(self) -> pa.DataType:
        if self.value_type is not None:
            return self.value_type
        return pa.binary() if self.value_format == "bytes" else pa.string()


@dataclasses.dataclass(frozen=True, slots=True)
class LookupResult:
    """Looked-up values row for row: ``values`` typed per the spec, ``found`` whether the key exists."""

    values: pa.Array
    found: pa.BooleanArray
    mismatched: int  # rows whose stored value does not fit the value type (they hold null)
    misfit: pa.BooleanArray  # which rows those are


class KnownValues:
    """The decoded values of every key one task has looked up, as Arrow arrays, bounded in bytes.

    Keys repeat across the batches of a task (a dimension is much smaller than the facts), so each
    key is fetched and decoded once per task; once the arrays pass ``max_bytes`` they start over.
    ``complete``: the keys are every key of the store (read whole), so a key not among them is absent.
    """

    def __init__(self, value_type: pa.DataType, max_bytes: int) -> None:
        self.value_type = value_type
        self.max_bytes = max_bytes
        self.reset()

    def reset(self) -> None:
        self.complete = False
        self.keys: pa.Array = pa.array([], pa.binary())
        self.values: pa.Array = pa.array([], self.value_type)
        self.found: pa.Array = pa.array([], pa.bool_())
        self.misfit: pa.Array = pa.array([], pa.bool_())

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.values.nbytes)

    @property
    def full(self) -> bool:
        return self.nbytes > self.max_bytes

    def index(self, keys: pa.Array) -> pa.Array:
        """For every key its place among the known keys, null when unknown (or a null key)."""
        return pc.index_in(keys, value_set=self.keys)

    def add(self, keys: pa.Array, values: pa.Array, found: pa.Array, misfit: pa.Array) -> None:
        self.keys = pa.concat_arrays([self.keys, keys])
        self.values = pa.concat_arrays([self.values, values])
        self.found = pa.concat_arrays([self.found, found])
        self.misfit = pa.concat_arrays([self.misfit, misfit])

    def table(self) -> pa.Table:
        """The known keys and values as a table (``clients.store_files.COLUMNS``)."""
        return pa.Table.from_arrays([self.keys, self.values, self.found, self.misfit], names=list(COLUMNS))

    @classmethod
    def whole(cls, table: pa.Table, max_bytes: int) -> KnownValues:
        """Every key of a store and its values, as :meth:`table` gave them (nothing copied)."""
        columns = [
            column.chunk(0) if column.num_chunks == 1 else column.combine_chunks() for column in table.columns
        ]
        known = cls(columns[1].type, max_bytes)
        known.keys, known.values, known.found, known.misfit = columns
        known.complete = True
        return known


whole_stores: SharedStores[KnownValues] = SharedStores()
"""Stores read whole by this process's lookups, for its next tasks of the same lookups."""


class Lookup:
    """Looks up Arrow key columns for one task: one client (one connection pool), known values kept."""

    def __init__(self, spec: LookupSpec, client: StatestoreClient | None = None) -> None:
        self.spec = spec
        self._own_client = client is None
        self.client = client or StatestoreClient(spec.options)
        # A store read whole by an earlier task of this lookup in this process (see clients.whole_store).
        shared = whole_stores.get(spec) if spec.store_keys is not None else None
        self.known = shared or KnownValues(spec.output_type, spec.cache_bytes)
        self.keys_fetched = 0
        self.keys_scanned = 0
        self.keys_loaded = 0  # of a store another worker of this machine read whole (clients.store_files)
        self._may_scan = spec.store_keys is not None and shared is None
        self._threads: ThreadPoolExecutor | None = None
        self._file = self._store_file() if self._may_scan else None
        if self._file is not None:  # read whole by a worker before: files are only ever renamed into place
            self._loaded(self._file.load(store_columns(spec.output_type)))
        # Reads as of a time, of the history read whole (shared by the workers through its own file).
        timed = spec.store_keys is not None and spec.exact and whole_histories.get(spec) is None
        self.history = HistoryReads(spec, self._store_file("history") if timed else None)

    @property
    def key_format(self) -> str:
        """The store's key format; asked of the service while it is pending (keys written through
        the Schema Registry, none decoded yet), since the first key decoded decides it."""
        if self.spec.key_format in PENDING_KEY_FORMATS:
            return self.client.store(self.spec.store).key_format
        return self.spec.key_format

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=True, cancel_futures=True)
        if self._own_client:
            self.client.close()

    def __enter__(self) -> Lookup:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _pool(self) -> ThreadPoolExecutor:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(REQUESTS_IN_FLIGHT, thread_name_prefix="statestore-lookup")
        return self._threads

    def _decoded(self, stored: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
        return decoded(self.spec, stored)

    def _fetched(self, keys: pa.Array, deadline: float) -> tuple[pa.Array, pa.Array, pa.Array]:
        """One batch of keys fetched and decoded: values, found, misfit."""
        spec = self.spec
        stored = self.client.get_arrow(
            spec.store, keys, min_position=spec.min_position, as_of=spec.as_of, fields=spec.fields,
            deadline=max(deadline - time.monotonic(), 1e-3),
        )  # fmt: skip
        return self._decoded(stored)

    def _store_file(self, *kind: str) -> StoreFile | None:
        """The file the workers of this machine share this lookup's store (or, of ``kind``
        ``"history"``, its history) read whole through, if any."""
        spec = self.spec
        directory = share_dir() if spec.lookup_id else None
        if directory is None:
            return None
        identity = (spec.lookup_id, spec.options.url, spec.store, spec.position, spec.exact, *kind)
        return StoreFile(directory, file_name(*identity, spec.value_format, str(spec.output_type)))

    def _loaded(self, loaded: pa.Table | bool | None) -> bool:
        """Take a store another worker read whole (True); False when it found it too large (this
        lookup then never reads it whole), or there is none."""
        if loaded is False:
            self._may_scan = False
        if not isinstance(loaded, pa.Table):
            return False
        self._keep(KnownValues.whole(loaded, self.spec.cache_bytes))
        self.keys_loaded += loaded.num_rows
        return True

    def _keep(self, known: KnownValues) -> None:
        self._may_scan = False
        self.known = known
        whole_stores.put(self.spec, known, known.nbytes, self.spec.cache_bytes)

    def prefetch(self, keys: pa.Array) -> None:
        """Read the store whole now, if ``keys`` (a task's first keys) make that worth it and no
        other worker of this machine is reading it; else :meth:`lookup` decides when it gets there
        (by then, that worker's file may be there to load). A task of chained lookups thus reads
        one store while another task reads the next."""
        if self._may_scan and self._file is not None:
            keys = stored_key_array(keys, self.key_format)
            if worth_scanning(pc.count_distinct(keys).as_py(), self.spec.store_keys):
                self._read_whole(wait=False)

    def _read_whole(self, wait: bool = True) -> bool:
        """Read the whole store into the known values (kept for the process's next tasks of this
        lookup, and shared with the other workers of the machine through a file); False, and never
        tried again by this lookup, when it passes ``scan_bytes``. Without ``wait``, False (and
        nothing decided) while another worker reads it."""
        if self._file is None:
            return self._scan_whole() is not None
        with self._file.claimed(wait) as held:
            if not held and not wait:
                return False
            if held and self._loaded(self._file.load(store_columns(self.spec.output_type))):
                return True
            if not self._may_scan:  # too large, as another worker found
                return False
            known = self._scan_whole()
            if held:
                self._file.save(None if known is None else known.table(), self.spec.cache_bytes)
            return known is not None

    def _scan_whole(self) -> KnownValues | None:
        """The store read whole by scan pages, kept as the known values; None past the bounds."""
        spec = self.spec
        self._may_scan = False
        whole = read_whole(
            self.client, spec.store, spec.min_position, spec.as_of, spec.scan_bytes, self._decoded,
            self._pool(),
        )  # fmt: skip
        if whole is None:
            return None
        keys, (values, found, misfit) = whole
        known = KnownValues(spec.output_type, spec.cache_bytes)
        known.add(keys, values, found, misfit)
        if known.full:  # decoded, more than the lookup keeps: the batch gets it is
            return None
        known.complete = True
        self.keys_scanned += len(keys)
        self._keep(known)
        return known

    def _learn(self, keys: pa.Array) -> None:
        """Fetch and decode distinct keys not known yet, ``REQUESTS_IN_FLIGHT`` batches at a time,
        within one deadline for them all."""
        deadline = time.monotonic() + self.spec.options.deadline
        size = self.spec.options.batch_size
        batches = [keys.slice(start, size) for start in range(0, len(keys), size)]
        if len(batches) == 1:
            answers = [self._fetched(batches[0], deadline)]
        else:
            answers = list(self._pool().map(lambda batch: self._fetched(batch, deadline), batches))
        self.keys_fetched += len(keys)
        values, found, misfit = (pa.concat_arrays([answer[i] for answer in answers]) for i in range(3))
        self.known.add(keys, values, found, misfit)

    def lookup_at(self, keys: pa.Array, times: pa.Array) -> LookupResult:
        """Values for a key column, each row's as of its time (epoch ms, ``int64``), row for row.

        Answered from the store's history read whole when the lookup needs most of its keys
        (``clients.history``); else each distinct ``(key, time)`` of the batch is asked once, no
        cache across batches (a key's value depends on the time asked). Rows with a null key or
        time find nothing.
        """
        spec = self.spec
        keys, times = key_bytes_array(keys), times.cast(pa.int64())
        history = self.history.known_for(keys, times, self.client, self._decoded, self._pool)
        if history is not None:
            chosen = history.rows_at(keys, times)
            rows = pa.array(chosen, pa.int64(), mask=chosen < 0)
            values, found, misfit = (part.take(rows) for part in history.decoded)
            found, misfit = pc.fill_null(found, False), pc.fill_null(misfit, False)
            return LookupResult(values, found, pc.sum(misfit).as_py() or 0, misfit)
        unique_keys, unique_times, rows = key_time_pairs(keys, times)
        stored = self.client.get_arrow(
            spec.store, unique_keys, unique_times, min_position=spec.min_position, as_of=spec.as_of
        )
        self.keys_fetched += len(unique_keys)
        values, misfit = decode(stored, spec.value_format, spec.value_type)
        found = pc.fill_null(pc.is_valid(stored).take(rows), False)
        misfit = pc.fill_null(misfit.take(rows), False)
        return LookupResult(values.take(rows), found, pc.sum(misfit).as_py() or 0, misfit)

    def lookup(self, keys: pa.Array) -> LookupResult:
        """Values for a key column (see :func:`clients.natural_keys.stored_key_array`; nulls never
        match), row for row."""
        keys = stored_key_array(keys, self.key_format)
        if self.known.full:
            self.known = KnownValues(self.spec.output_type, self.spec.cache_bytes)
        rows = self.known.index(keys)
        unknown = pc.and_(pc.is_null(rows), pc.is_valid(keys))
        if not self.known.complete and pc.any(unknown).as_py():
            before = len(self.known)
            missing = pc.unique(keys.filter(unknown))
            if self._may_scan and worth_scanning(len(missing), self.spec.store_keys) and self._read_whole():
                rows = self.known.index(keys)
            else:
                self._learn(missing)
                rows = pc.coalesce(rows, pc.add(pc.index_in(keys, value_set=missing), before))
        values = self.known.values.take(rows)
        found = pc.fill_null(self.known.found.take(rows), False)
        misfit = pc.fill_null(self.known.misfit.take(rows), False)
        return LookupResult(values, found, pc.sum(misfit).as_py() or 0, misfit)


def decoded(spec: LookupSpec, stored: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """``spec``'s stored values (null: absent) decoded with its value format and type: the values,
    whether each was found, whether each did not fit the type."""
    values, misfit = decode(stored, spec.value_format, spec.value_type)
    return values, pc.is_valid(stored), misfit


def key_bytes_array(keys: pa.Array) -> pa.Array:
    """A key column of a ``bytes`` or ``string`` store as ``binary``: binary kept, text as UTF-8,
    anything else via its text form."""
    return stored_key_array(keys, "bytes")
