"""Planned reads a driver keeps: a lookup planned again at the same copy and position reuses its read.

A job that calls ``lookup_join`` for every run (a scheduled or streaming driver) plans the same lookup
again and again. What the planning checks on the service (the sample of values, an exact read at the
pinned position) and what the tasks read (a store read whole, kept by the Python workers and shared
through a file, both keyed by the planned read: ``LookupSpec.lookup_id``) are the same for as long as
the store's served copy (``copy_id``, which a rebuild, a reopen or a restart of the service renews)
and its position are the same: one copy at one position always answers the same rows. So a lookup
planned again, with the same options, while the store is at the very position its last plan pinned
in the same copy, is given that plan's read; any change (a record applied, a new copy, other
options) plans afresh. The store's info is still asked on every plan: that is what tells.

Only key lookups of one service are kept (no index, no reads as of a time, no shards): what they read
is a function of the copy and the position alone.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import threading
from typing import Any

from pyspark.sql.types import DataType, StructType

from clients.lookup import LookupSpec
from clients.spark.broadcast import Dimension
from clients.spark.options import LookupOptions
from clients.wire import StoreInfo
from wire.position import Position

KEPT_PLANS = 64
"""Planned reads a driver keeps, the least recently used dropped first."""

KEPT_DIMENSION_BYTES = 256 * 1024 * 1024
"""Bytes of broadcast stores (``KeptRead.dimension``) the kept reads hold at most, the least
recently used dropped first."""


@dataclasses.dataclass(frozen=True)
class KeptRead:
    """A planned read: the spec the tasks run (its ``lookup_id`` names the read) and the output type."""

    spec: LookupSpec
    value_type: DataType
    dimension: Dimension | None = None  # the store read whole by the driver, for Spark to broadcast


@dataclasses.dataclass(frozen=True)
class _Entry:
    copy_id: str
    position: str
    read: KeptRead


def reads_key(url: str, token: str | None, verify: bool | str, cert: Any, options: LookupOptions) -> str:
    """What a planned read depends on besides the store's copy and position: the service, the
    credentials (hashed) and every option but the planning deadline."""
    schema = options.value_schema
    described = dataclasses.replace(
        options,
        url=None,
        token=None,
        verify=True,
        cert=None,
        planning_deadline=0.0,
        value_schema=schema.json() if isinstance(schema, StructType) else schema,
    )
    secret = hashlib.sha256((token or "").encode()).hexdigest()
    return repr((url, secret, verify, cert, described))


def _copy_of(info: StoreInfo, pinned: Position, options: LookupOptions) -> str | None:
    """The copy a read of ``info``'s store at ``pinned`` may be kept for; ``None``: not kept."""
    copy_id = info.raw.get("copy_id")
    if (
        not isinstance(copy_id, str)
        or not copy_id
        or options.index is not None
        or options.at_times
        or info.sharding.shards > 1
        or pinned != info.position
    ):
        return None
    return copy_id


class PlanCache:
    """Planned reads by :func:`reads_key`, each valid for one copy of the store at one position."""

    def __init__(self, size: int = KEPT_PLANS, dimension_bytes: int = KEPT_DIMENSION_BYTES) -> None:
        self._size = size
        self._dimension_bytes = dimension_bytes
        self._entries: collections.OrderedDict[str, _Entry] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, info: StoreInfo, pinned: Position, options: LookupOptions) -> KeptRead | None:
        """The read planned under ``key`` when the store is still at its copy and position."""
        copy_id = _copy_of(info, pinned, options)
        if copy_id is None:
            return None
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or (entry.copy_id, entry.position) != (copy_id, str(pinned)):
                return None
            self._entries.move_to_end(key)
            return entry.read

    def put(
        self, key: str, info: StoreInfo, pinned: Position, options: LookupOptions, read: KeptRead
    ) -> None:
        """Keep ``read``, planned at ``pinned`` for ``info``'s copy (when such a read may be kept)."""
        copy_id = _copy_of(info, pinned, options)
        if copy_id is None or read.spec.options.sharded:
            return
        with self._lock:
            self._entries[key] = _Entry(copy_id, str(pinned), read)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size or self._held() > self._dimension_bytes:
                self._entries.popitem(last=False)

    def _held(self) -> int:
        return sum(e.read.dimension.nbytes for e in self._entries.values() if e.read.dimension is not None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


plans = PlanCache()
"""The planned reads of this driver."""
