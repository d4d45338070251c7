"""A lookup that needs most of a store reads all of it: Arrow scan pages instead of batch gets.

A Spark task of a large fact table asks for nearly every key of a small dimension (500,000 random
keys among 100,000 find ~93,000 of them). Answering those by batch gets costs the service a random
read per key; reading the store in key order, page by page (:mod:`clients.arrow_scan`), costs it a
sequential read, and the task then finds every key locally. Pages are read at the lookup's pinned
position (exactly ``as_of`` it, or at least at it, as the batch gets would be), so the answers are
the same as the batch gets'. Memory is bounded: a store whose keys and stored values pass the
lookup's ``scan_bytes`` is not read whole (the scan stops there, and the keys go by batch gets).

A store read whole is kept by the process (:class:`SharedStores`) for the next task of the same
lookup at the same pinned position: Spark runs the tasks of a job, and of the jobs after it, in
reused Python workers. The workers of a machine share it through a file (:mod:`clients.store_files`).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

import pyarrow as pa

from clients.client import StatestoreClient
from clients.exceptions import AnswerTooLargeError, PageTooLargeError

log = logging.getLogger("clients.lookup")

T = TypeVar("T")

DEFAULT_SCAN_BYTES = 64 * 1024 * 1024
"""Bytes of stored keys and values a lookup reads a whole store into at most (``scan_bytes``)."""

SCAN_SHARE = 0.5
"""A lookup reads the whole store once the distinct keys it still has to fetch reach this share of
the store's keys (:func:`store_keys`). Reading a key in a scan costs the service
less than a random read of it in a batch get, but the task then decodes every value: measured on a
100,000-key store, a task fetching 50,000 keys took about as long either way, and 10,000 to 25,000
took 1.5-4x longer by scan."""

SCAN_PAGE = 10_000
"""Keys per scan page (the service's default ``limits.max_scan_limit``)."""

Decoded = tuple[pa.Array, pa.Array, pa.Array]
"""Values as a lookup keeps them: decoded values, found, misfit."""


def store_keys(info: Mapping[str, Any]) -> int | None:
    """The number of keys of a store, from the service's store info: ``counted_keys`` (counted
    exactly, at a recent position), else ``approximate_num_keys`` (RocksDB's estimate, several times
    the keys while overwrites wait for compaction: from a service that does not count, or before
    its first count); ``None`` when it says neither."""
    for field in ("counted_keys", "approximate_num_keys"):
        keys = info.get(field)
        if isinstance(keys, int) and not isinstance(keys, bool):
            return keys
    return None


def worth_scanning(missing: int, store_keys: int | None) -> bool:
    """Whether ``missing`` distinct keys to fetch make reading the whole store the cheaper way."""
    return store_keys is not None and missing > 0 and missing >= SCAN_SHARE * store_keys


def read_whole(
    client: StatestoreClient,
    store: str,
    min_position: str | None,
    as_of: str | None,
    max_bytes: int,
    decode: Callable[[pa.Array], Decoded],
    threads: ThreadPoolExecutor,
) -> tuple[pa.Array, Decoded] | None:
    """Every key of ``store`` and its decoded value, read by Arrow scan pages at least at
    ``min_position`` or exactly ``as_of``; ``None`` (nothing kept, the reason logged) once the pages
    pass ``max_bytes`` (at most one page read past the bound), or when the service refuses pages
    this large (``limits.max_scan_limit`` below ``SCAN_PAGE``, or a page of large values past
    ``limits.max_answer_bytes``): the keys then go by batch gets.

    Each page is decoded on ``threads`` while the next one is read.
    """
    keys: list[pa.Array] = []
    decoding: list[Future[Decoded]] = []
    size = 0
    try:
        for page in client.scan_arrow(store, page_size=SCAN_PAGE, min_position=min_position, as_of=as_of):
            size += page.nbytes
            if size > max_bytes:
                log.info("store %r is above scan_bytes=%d: its keys go by batch gets", store, max_bytes)
                _drop(decoding)
                return None
            keys.append(page.column(0))
            decoding.append(threads.submit(decode, page.column(1)))
    except (PageTooLargeError, AnswerTooLargeError) as exc:
        log.warning("store %r cannot be read whole (%s): its keys go by batch gets", store, exc)
        _drop(decoding)
        return None
    parts = [future.result() for future in decoding] or [decode(pa.array([], pa.binary()))]
    found_keys = pa.concat_arrays(keys) if keys else pa.array([], pa.binary())
    values, found, misfit = (pa.concat_arrays([part[i] for part in parts]) for i in range(3))
    return found_keys, (values, found, misfit)


def _drop(decoding: list[Future[Decoded]]) -> None:
    for future in decoding:
        future.cancel()


class SharedStores(Generic[T]):
    """Whole stores read by lookups of this process, by lookup (service, store, pinned position,
    value type, ...), the least recently used dropped first beyond the bytes the newest allows.

    What is kept is never changed: a lookup that uses it only reads it.
    """

    def __init__(self) -> None:
        self._held: collections.OrderedDict[Hashable, tuple[T, int]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> T | None:
        with self._lock:
            held = self._held.get(key)
            if held is None:
                return None
            self._held.move_to_end(key)
            return held[0]

    def put(self, key: Hashable, value: T, size: int, max_bytes: int) -> None:
        """Keep ``value`` (``size`` bytes) under ``key``, and at most ``max_bytes`` in all."""
        with self._lock:
            self._held[key] = (value, size)
            self._held.move_to_end(key)
            total = sum(size for _, size in self._held.values())
            while total > max_bytes and self._held:
                _, (_, dropped) = self._held.popitem(last=False)
                total -= dropped

    def clear(self) -> None:
        with self._lock:
            self._held.clear()
