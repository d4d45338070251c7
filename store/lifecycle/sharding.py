"""A store's shard of its topic, and the check that its records sit where their keys hash to.

A sharded deployment runs ``shards`` processes; the store of shard ``shard`` materializes the
partitions ``p`` with ``p % shards == shard`` (one shard: every partition). Its clients find a key
on the shard of the partition the key hashes to under the producers' rule (``placer``, given by
whoever configures the store: ``clients.partitioners`` in the service). A record whose key hashes
elsewhere would be missed by them: :class:`PlacementCheck` counts such records (on a sample of
each batch, see ``store.kafka.batch.PLACEMENT_SAMPLE``) and logs the first one of each store once.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Sequence
from typing import Protocol

from store.kafka.batch import Placement, Placer, RecordBatch
from store.protocol import ShardingStatus


@dataclasses.dataclass(frozen=True, slots=True)
class StoreSharding:
    """Which partitions of its topic a store materializes, and how the producers placed keys.

    ``placer`` maps keys to their partitions among ``n`` (``None``: records are not checked); it
    must pickle (a module-level function or a ``functools.partial`` of one): bulk restore workers
    check the records they read too.
    """

    shards: int = 1
    shard: int = 0
    partitioner: str = "murmur2"
    placer: Placer | None = dataclasses.field(default=None, repr=False, compare=False)
    # Keys stored by natural value (keys written through the Schema Registry): one natural key is
    # several producers' keys, one per key schema id, so possibly on several shards' partitions.
    # Such a store reads every partition and keeps the natural keys that hash to its shard.
    by_natural_key: bool = False

    def __post_init__(self) -> None:
        if self.shards < 1 or not 0 <= self.shard < self.shards:
            raise ValueError(
                f"shard {self.shard} of {self.shards}: shards are numbered 0 to shards - 1, at least one"
            )

    @property
    def sharded(self) -> bool:
        return self.shards > 1

    def holds(self, partition: int) -> bool:
        return self.by_natural_key or partition % self.shards == self.shard

    def own(self, topic_partitions: int) -> list[int]:
        """This shard's partitions of a topic with ``topic_partitions`` partitions (all of them when
        it keeps natural keys by their own hash)."""
        return [p for p in range(topic_partitions) if self.holds(p)]

    def natural_layout(self, natural_keys: bool) -> bytes | None:
        """How a store keeps its keys, as recorded with its data: ``None`` as read; by natural value
        with one entry per key schema id (``store.table.winners``), and for a shard keeping natural
        keys by their own hash, which share of them. A copy kept otherwise is rebuilt."""
        if not natural_keys:
            return None
        if not (self.by_natural_key and self.sharded):
            return b"winners"
        return f"winners; shard {self.shard} of {self.shards} by {self.partitioner}".encode()

    def kept(self, natural_keys: Sequence[bytes], topic_partitions: int) -> list[int] | None:
        """The positions of the natural keys this shard keeps, or ``None`` when it keeps every key:
        those whose bytes hash (``placer``, over ``topic_partitions``) to a partition of this shard,
        as if a plain serializer had written them, which is how clients route them."""
        if not (self.by_natural_key and self.sharded):
            return None
        assert self.placer is not None, "a store sharded by natural key needs the producers' placer"
        partitions = self.placer(natural_keys, topic_partitions)
        return [i for i, p in enumerate(partitions) if p % self.shards == self.shard]


class NaturalKeysRecord(Protocol):
    """Where a copy records how its keys were kept (``store.table.engine.Engine``)."""

    def natural_keys(self) -> bytes | None: ...

    def set_natural_keys(self, layout: bytes | None) -> None: ...


def natural_keys_reason(record: NaturalKeysRecord, holds_data: bool, wanted: bytes | None) -> str | None:
    """Why a copy about to be written must first be rebuilt from the topic, or ``None``; records
    how its keys are kept from now on (``StoreSharding.natural_layout``).

    A copy whose keys were kept otherwise (as read; by natural value without the entries of their
    key schema ids; or for another shard's share of natural keys) would answer wrongly: rebuilt."""
    recorded = record.natural_keys()
    if recorded == wanted:
        return None
    if holds_data:
        return f"its keys were kept {_layout_text(recorded)} and are now kept {_layout_text(wanted)}"
    record.set_natural_keys(wanted)
    return None


def _layout_text(layout: bytes | None) -> str:
    return "as read" if layout is None else f"by natural value ({layout.decode(errors='replace')})"


class PlacementCheck:
    """Counts a store's records checked against their key's partition, and those misplaced.

    ``topic_partitions`` is the count the keys are hashed over: set by the materializer from the
    topic's metadata. Updated by the materializer's thread, read by ``status()`` from any other.
    """

    def __init__(
        self, store: str, sharding: StoreSharding, log: logging.LoggerAdapter[logging.Logger]
    ) -> None:
        self._store = store
        self.sharding = sharding
        self._log = log
        self.topic_partitions: int | None = None
        self.checked = 0
        self.misplaced = 0
        self._logged = False
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Start counting again (the store rebuilds: every record is read, and checked, again)."""
        with self._lock:
            self.checked = 0
            self.misplaced = 0

    @property
    def active(self) -> bool:
        """Whether records are checked (a placer was given and the partition count is known)."""
        return self.sharding.placer is not None and self.topic_partitions is not None

    def batch(self, records: RecordBatch) -> None:
        """Check (a sample of) a batch collected with its records' partitions."""
        placer, count = self.sharding.placer, self.topic_partitions
        if placer is None or count is None or not records.partitions:
            return
        self.take(records.placement(placer, count))

    def take(self, placement: Placement) -> None:
        """Count a placement found here or by a restore worker; log the first misplaced record."""
        with self._lock:
            self.checked += placement.checked
            self.misplaced += placement.misplaced
            first = placement.misplaced > 0 and not self._logged
            self._logged = self._logged or first
        if first:
            sharding = self.sharding
            self._log.warning(
                'store "%s": a record is not on the partition its key hashes to under partitioner %s: %s.'
                " Clients routing keys to shards would not find such records; set stores[].partitioner to"
                " the rule the topic's producers use (murmur2: Java clients; crc32: librdkafka's default;"
                " fnv1a: Go clients), or do not shard this store%s. Further ones are counted in"
                " sharding.misplaced_records, not logged",
                self._store,
                sharding.partitioner,
                placement.example,
                "" if sharding.sharded else " (it is not sharded now: nothing is missed yet)",
            )

    def status(self) -> ShardingStatus:
        sharding = self.sharding
        return ShardingStatus(
            shards=sharding.shards,
            shard=sharding.shard,
            partitioner=sharding.partitioner,
            topic_partitions=self.topic_partitions,
            by_natural_key=sharding.by_natural_key and sharding.sharded,
            records_checked=self.checked,
            misplaced_records=self.misplaced,
        )
