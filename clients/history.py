"""A point-in-time lookup that needs most of a store's keys reads its history whole and answers
every row locally.

A Spark task of a large fact table asks nearly every key of a dimension, each row at its own time.
Asked row by row (batch gets with one time per key), that is one random history read on the
service per row; read whole (:mod:`clients.history_scan`: the history in key order, page by page,
at the lookup's pinned position), it is one sequential read, kept by the Python worker for the
lookup's next tasks. Each row is then answered by a binary search: a key's rows run newest first,
and its value as of time ``T`` is its first row at or below ``T`` (the service settled everything
else, as its per-row read does: ``store.table.history_scan``). A row time below the store's time
floor, or one answered by an unsettled row, raises ``HistoryExpiredError`` as the per-row read's
``410 history-expired`` does. Memory is bounded as for :mod:`clients.whole_store`: a history whose
pages pass ``scan_bytes``, or whose decoded values pass ``cache_bytes``, is not kept, and the rows
go by batch gets.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import logging
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from clients.client import StatestoreClient
from clients.exceptions import (
    AnswerTooLargeError,
    HistoryExpiredError,
    PageTooLargeError,
    UnexpectedResponseError,
)
from clients.history_scan import HistoryPage
from clients.store_files import StoreFile
from clients.whole_store import SCAN_PAGE, Decoded, SharedStores, worth_scanning
from wire import problems


class PlannedLookup(Hashable, Protocol):
    """What :class:`HistoryReads` needs of a lookup's spec (``clients.lookup.LookupSpec``), which
    also keys the histories kept (a hashable, frozen value)."""

    @property
    def store(self) -> str: ...
    @property
    def position(self) -> str: ...
    @property
    def exact(self) -> bool: ...
    @property
    def store_keys(self) -> int | None: ...
    @property
    def scan_bytes(self) -> int: ...
    @property
    def cache_bytes(self) -> int: ...
    @property
    def output_type(self) -> pa.DataType: ...


log = logging.getLogger("clients.lookup")

EVERY_TIME = -(2**63)
"""A row without a time counts for every time."""


@dataclasses.dataclass(frozen=True, slots=True)
class KnownHistory:
    """Every key's rows as read whole, ready for answers as of any time (never changed once built).

    The rows of the key at place ``i`` of ``keys`` are ``starts[i]`` to ``starts[i + 1]``, their
    ``times`` non-increasing (newest first): the first one at or below a time is a binary search
    within them away, done for every row of a batch at once.
    """

    store: str
    keys: pa.Array  # each key once, in the rows' order
    starts: npt.NDArray[np.int64]  # each key's first row, then the number of rows
    times: npt.NDArray[np.int64]  # each row's time (``EVERY_TIME``: every time)
    unsettled: npt.NDArray[np.bool_]
    decoded: Decoded  # each row's value: decoded, found, misfit
    time_floor: int | None

    @property
    def rows(self) -> int:
        return len(self.times)

    @property
    def nbytes(self) -> int:
        arrays = (self.starts, self.times, self.unsettled)
        return int(self.keys.nbytes + sum(a.nbytes for a in arrays) + sum(d.nbytes for d in self.decoded))

    def rows_at(self, keys: pa.Array, times: pa.Array) -> npt.NDArray[np.int64]:
        """For each ``(key, time)`` (``binary``, ``int64`` epoch ms), the row holding its value,
        -1 for none (absent, or a null key or time); ``HistoryExpiredError`` as the service's
        per-row read answers it (a time below the floor, or an unsettled row)."""
        asked = pc.and_(pc.is_valid(keys), pc.is_valid(times)).to_numpy(zero_copy_only=False)
        stamps = pc.fill_null(times, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        if asked.any():
            earliest = int(stamps[asked].min())
            if self.time_floor is None or earliest < self.time_floor:
                raise self._expired(earliest, None)
        places = pc.fill_null(pc.index_in(keys, value_set=self.keys), -1).to_numpy(zero_copy_only=False)
        wanted = asked & (places >= 0)
        places = np.where(wanted, places, 0).astype(np.int64)
        if not self.rows:
            return np.full(len(keys), -1, np.int64)
        low, high = self.starts[places], self.starts[places + 1]
        end = high.copy()
        # The first row of the key at or below the time: rows run newest first within a key.
        for _ in range(int(np.max(high - low, initial=0)).bit_length()):
            middle = (low + high) // 2
            newer = (middle < high) & (self.times[np.minimum(middle, self.rows - 1)] > stamps)
            low = np.where(newer, middle + 1, low)
            high = np.where(newer, high, middle)
        found = wanted & (low < end)
        refused = np.nonzero(found & self.unsettled[np.minimum(low, self.rows - 1)])[0]
        if len(refused):
            row = int(refused[0])
            raise self._expired(int(stamps[row]), keys[row].as_py())
        return np.where(found, low, -1).astype(np.int64)

    def _expired(self, at: int, key: bytes | None) -> HistoryExpiredError:
        """The error the service answers a per-row read of ``key`` at ``at`` with."""
        problem: dict[str, Any] = {
            "type": problems.HISTORY_EXPIRED.uri,
            "title": problems.HISTORY_EXPIRED.title,
            "status": problems.HISTORY_EXPIRED.status,
            "store": self.store,
            "as_of_time": at,
            "time_floor": self.time_floor,
        }
        if key is None:
            since = "no time" if self.time_floor is None else f"time {self.time_floor}"
            problem["detail"] = f'store "{self.store}" answers as_of_time from {since} on; {at} is older'
        else:
            problem["key"] = base64.b64encode(key).decode()
            problem["detail"] = (
                f'store "{self.store}": the versions of key {key[:64]!r} do not settle as_of_time {at}'
                " (a record applied after history began is stamped before the value history began with)"
            )
        return HistoryExpiredError(problem, problems.HISTORY_EXPIRED.status)


whole_histories: SharedStores[KnownHistory] = SharedStores()
"""Histories read whole by this process's point-in-time lookups, for its next tasks of the same
lookups (as ``clients.lookup.whole_stores`` keeps whole stores)."""


class HistoryReads:
    """One lookup's history read whole: by an earlier task of the lookup in this process, by another
    worker of the machine (through ``file``, as :mod:`clients.store_files` shares stores), or by
    this one once a batch asks for most of the store's keys (tried once a lookup)."""

    def __init__(self, spec: PlannedLookup, file: StoreFile | None = None) -> None:
        self.spec = spec
        self.known = whole_histories.get(spec) if spec.store_keys is not None else None
        self._may_read = spec.store_keys is not None and spec.exact and self.known is None
        self._file = file
        self.versions_scanned = 0
        self.versions_loaded = 0  # of a history another worker of this machine read whole

    def known_for(
        self,
        keys: pa.Array,
        times: pa.Array,
        client: StatestoreClient,
        decode: Callable[[pa.Array], Decoded],
        threads: Callable[[], ThreadPoolExecutor],
    ) -> KnownHistory | None:
        """The history to answer ``keys`` (binary) at ``times`` (int64) from; ``None``: rows go by
        batch gets."""
        spec = self.spec
        if self.known is not None or not self._may_read:
            return self.known
        asked = pc.and_(pc.is_valid(keys), pc.is_valid(times))
        if not worth_scanning(len(pc.unique(keys.filter(asked))), spec.store_keys):
            return None
        self._may_read = False
        read = functools.partial(self._read, client, pc.min(times.filter(asked)).as_py(), decode, threads)
        known = read() if self._file is None else self._shared(read, self._file)
        if known is None:
            return None
        self.known = known
        whole_histories.put(spec, known, known.nbytes, spec.cache_bytes)
        return known

    def _read(
        self,
        client: StatestoreClient,
        earliest: int,
        decode: Callable[[pa.Array], Decoded],
        threads: Callable[[], ThreadPoolExecutor],
    ) -> KnownHistory | None:
        """The history read whole from the service; ``None`` past ``scan_bytes`` or ``cache_bytes``."""
        spec = self.spec
        known = read_history(client, spec.store, spec.position, earliest, spec.scan_bytes, decode, threads())
        if known is None or known.nbytes > spec.cache_bytes:  # decoded, more than a lookup keeps
            return None
        self.versions_scanned += known.rows
        return known

    def _shared(self, read: Callable[[], KnownHistory | None], file: StoreFile) -> KnownHistory | None:
        """The history another worker of the machine read whole, else ``read()`` and shared (or that
        it is too large). Workers starting together wait for the one reading it: the service
        answers it once, not once a worker."""
        with file.claimed(wait=True) as held:
            loaded = file.load(history_columns(self.spec.output_type)) if held else None
            if loaded is False:  # too large, as another worker found
                return None
            if isinstance(loaded, pa.Table):
                shared = loaded_history(self.spec.store, loaded)
                self.versions_loaded += shared.rows
                return shared
            known = read()
            if held:
                file.save(None if known is None else history_table(known), self.spec.cache_bytes)
            return known


HISTORY_COLUMNS = ("key", "time", "unsettled", "value", "found", "misfit")
"""The columns of a history read whole as workers share it: one row a row of :class:`KnownHistory`."""


def history_columns(value_type: pa.DataType) -> list[tuple[str, pa.DataType]]:
    types = (pa.binary(), pa.int64(), pa.bool_(), value_type, pa.bool_(), pa.bool_())
    return list(zip(HISTORY_COLUMNS, types, strict=True))


def history_table(known: KnownHistory) -> pa.Table:
    """``known`` as a table of :data:`HISTORY_COLUMNS` (each row with its key), its time floor in
    the schema's metadata."""
    places = pa.array(np.repeat(np.arange(len(known.keys)), np.diff(known.starts)), pa.int64())
    columns = [known.keys.take(places), pa.array(known.times, pa.int64()), pa.array(known.unsettled)]
    table = pa.Table.from_arrays([*columns, *known.decoded], names=list(HISTORY_COLUMNS))
    floor = "" if known.time_floor is None else str(known.time_floor)
    return table.replace_schema_metadata({"time_floor": floor})


def loaded_history(store: str, table: pa.Table) -> KnownHistory:
    """The history a worker shared as :func:`history_table` wrote it (checked as read)."""
    floor = (table.schema.metadata or {}).get(b"time_floor", b"")
    decoded = tuple(table.column(name).combine_chunks() for name in HISTORY_COLUMNS[3:])
    return _known(store, table.select(list(HISTORY_COLUMNS[:3])), decoded, int(floor) if floor else None)


def read_history(
    client: StatestoreClient,
    store: str,
    as_of: str,
    earliest: int,
    max_bytes: int,
    decode: Callable[[pa.Array], Decoded],
    threads: ThreadPoolExecutor,
) -> KnownHistory | None:
    """The whole history of ``store`` exactly ``as_of``, read to answer times from ``earliest`` on
    (below the floor: ``HistoryExpiredError``); ``None`` (the reason logged) once the pages pass
    ``max_bytes``, or when the service refuses pages this large. Each page is decoded on
    ``threads`` while the next one is read."""
    pages: list[pa.RecordBatch] = []
    decoding: list[Future[Decoded]] = []
    floors: list[int | None] = []
    size = 0
    try:
        for page in client.history_arrow(store, earliest, page_size=SCAN_PAGE, as_of=as_of):
            assert isinstance(page, HistoryPage)
            size += page.rows.nbytes
            if size > max_bytes:
                log.info(
                    "the history of store %r is above scan_bytes=%d: rows go by batch gets", store, max_bytes
                )
                _drop(decoding)
                return None
            pages.append(page.rows)
            floors.append(page.time_floor)
            decoding.append(threads.submit(decode, page.rows.column(2)))
    except (PageTooLargeError, AnswerTooLargeError) as exc:
        log.warning("the history of store %r cannot be read whole (%s): rows go by batch gets", store, exc)
        _drop(decoding)
        return None
    parts = [future.result() for future in decoding] or [decode(pa.array([], pa.binary()))]
    decoded = tuple(pa.concat_arrays([part[i] for part in parts]) for i in range(3))
    rows = pa.Table.from_batches(pages) if pages else None
    # Pruning between two pages can only raise the floor: the highest one said holds for all.
    known = [floor for floor in floors if floor is not None]
    return _known(store, rows, decoded, max(known) if len(known) == len(floors) and known else None)


def _known(
    store: str, rows: pa.Table | None, decoded: tuple[pa.Array, ...], floor: int | None
) -> KnownHistory:
    """The pages' rows, checked and indexed (:class:`KnownHistory`)."""
    if rows is None or rows.num_rows == 0:
        return KnownHistory(
            store, pa.array([], pa.binary()), np.zeros(1, np.int64), np.zeros(0, np.int64),
            np.zeros(0, np.bool_), (decoded[0], decoded[1], decoded[2]), floor,
        )  # fmt: skip
    keys = rows.column("key").combine_chunks()
    new_key = np.ones(len(keys), np.bool_)
    new_key[1:] = pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1)).to_numpy(zero_copy_only=False)
    starts = np.append(np.nonzero(new_key)[0], len(keys)).astype(np.int64)
    distinct = keys.filter(pa.array(new_key))
    times = rows.column("time").combine_chunks().cast(pa.int64())
    stamps = pc.fill_null(times, EVERY_TIME).to_numpy(zero_copy_only=False).astype(np.int64)
    # An error, never a wrong answer: rows out of the order the search needs are refused.
    if np.any((stamps[1:] > stamps[:-1]) & ~new_key[1:]) or len(pc.unique(distinct)) != len(distinct):
        raise UnexpectedResponseError(
            f"the history of store {store!r} came with a key's rows apart or out of time order"
        )
    unsettled = pc.fill_null(rows.column("unsettled").combine_chunks(), False)
    unsettled = unsettled.to_numpy(zero_copy_only=False).astype(np.bool_)
    return KnownHistory(
        store, distinct, starts, stamps, unsettled, (decoded[0], decoded[1], decoded[2]), floor
    )


def key_time_pairs(keys: pa.Array, times: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """The distinct ``(key, time)`` pairs of rows with both (keys, times, in first-seen order), and
    each row's pair index (null for a row without key or time), all in Arrow: no row in Python."""
    # One bytes value a pair: the time's decimal digits, a NUL, the key. Digits hold no NUL, so the
    # first NUL ends the time and distinct pairs stay distinct; a null key or time gives null.
    joined = pc.binary_join_element_wise(
        pc.cast(times, pa.string()).cast(pa.binary()), keys.cast(pa.binary()), pa.scalar(b"\x00", pa.binary())
    )
    encoded = pc.dictionary_encode(joined)
    # A pair's first row (index_in answers the first of equal values): its key and time.
    first = pc.index_in(encoded.dictionary, value_set=joined)
    return keys.take(first), times.take(first), encoded.indices


def _drop(decoding: list[Future[Decoded]]) -> None:
    for future in decoding:
        future.cancel()
