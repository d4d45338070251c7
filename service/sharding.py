"""This process's shard of every store: what it reports, the keys it refuses, the positions it reads.

With ``sharding.shards`` above one the process serves, of every store, the partitions ``p`` with
``p % shards == shard``. A key belongs to the partition it hashes to (the store's ``partitioner``
over the topic's partition count): asked of another shard, it is answered 421 ``wrong-shard``
naming the shard that holds it, never 404. Scans and index lookups need no key: every shard answers
them from its own keys, and the client merges. Entries of a ``min_position`` or ``as_of`` naming
another shard's partitions are ignored, so a client may send a whole table position to every shard.
One shard (the default) serves every partition and checks nothing.

A store whose keys were written through the Schema Registry is served by natural key: one natural
key is a producer's key per key schema id, so it may sit on several shards' partitions. Each shard
of such a store reads every partition and keeps the natural keys whose own bytes hash (the same
``partitioner``) to a partition of its shard; the check above, on the natural key, then finds it on
exactly one shard, and positions name every partition on every shard.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from clients.partitioners import PARTITIONERS
from service.registry import ServedStore, StoreRegistry
from service.store_settings import ShardingSettings
from store import Position, ShardingStatus, StoreStatus
from wire.problems import STORE_NOT_READY, WRONG_SHARD, ProblemError

STATUS_SECONDS = 1.0
"""How long a store's partition count is taken from one status: a count changes only with a rebuild."""


def sharding_of(registry: StoreRegistry, served: ServedStore, status: StoreStatus | None) -> ShardingStatus:
    """The store's sharding: as its ``status`` reports it, else as configured (count unknown)."""
    if status is not None and status.sharding is not None:
        return status.sharding
    shards, shard = registry.sharding.shards, registry.sharding.shard
    natural = served.natural_keys is not None and shards > 1
    return ShardingStatus(shards, shard, served.partitioner, None, by_natural_key=natural)


def sharding_info(registry: StoreRegistry, served: ServedStore, status: StoreStatus | None) -> dict[str, Any]:
    """The ``sharding`` member of the store's ``StoreInfo``."""
    sharding = sharding_of(registry, served, status)
    return {
        "shards": sharding.shards,
        "shard": sharding.shard,
        "partitions": list(sharding.partitions),
        "partitioner": sharding.partitioner,
        # How keys are routed: by the partition the producer's bytes hash to, or (keys written
        # through the Schema Registry) by the partition the natural key's own bytes hash to.
        "routing": "natural_key" if served.natural_keys is not None else "partition",
        "topic_partitions": sharding.topic_partitions,
        "records_checked": sharding.records_checked,
        "misplaced_records": sharding.misplaced_records,
    }


def shard_part(
    position: Position | None, sharding: ShardingSettings, every_partition: bool = False
) -> Position | None:
    """The entries of ``position`` naming this shard's partitions (the others are ignored); all of
    them when the store reads ``every_partition`` (natural keys kept by their own hash)."""
    if position is None or sharding.shards == 1 or every_partition:
        return position
    return Position({p: o for p, o in position.items() if p % sharding.shards == sharding.shard})


class KeyCheck:
    """Refuses keys of other shards (421), knowing each store's partition count from its status."""

    def __init__(self, registry: StoreRegistry) -> None:
        self.shards = registry.sharding.shards
        self.shard = registry.sharding.shard
        self.sharded = self.shards > 1
        self._registry = registry
        self._statuses: dict[str, tuple[float, ShardingStatus | None]] = {}
        self._lock = threading.Lock()

    def _topic_partitions(self, served: ServedStore) -> int | None:
        """The topic's partition count as the store last reported it (a status at most a second old)."""
        now = time.monotonic()
        with self._lock:
            cached = self._statuses.get(served.name)
        if cached is None or now - cached[0] > STATUS_SECONDS:
            status = self._registry.status_of(served)
            cached = (now, status.sharding if status is not None else None)
            with self._lock:
                self._statuses[served.name] = cached
        reported = cached[1]
        return reported.topic_partitions if reported is not None else None

    def __call__(self, served: ServedStore, keys: Sequence[bytes] | pa.Array) -> None:
        """Raise 421 ``wrong-shard`` when a key's partition belongs to another shard."""
        if not self.sharded or len(keys) == 0:
            return
        count = self._topic_partitions(served)
        if count is None:
            raise STORE_NOT_READY(
                f'store "{served.name}" has not read its topic\'s partition count yet, so it cannot tell'
                f" which keys shard {self.shard} holds; retry shortly",
                extras={"store": served.name, "state": self._registry.state_of(served).value},
                headers={"Retry-After": "1"},
            )
        placer = PARTITIONERS[served.partitioner]
        if len(keys) == 1:
            key = keys[0] if not isinstance(keys, pa.Array) else keys[0].as_py()
            partition = placer(key, count)
            if partition % self.shards != self.shard:
                raise self._wrong_shard(served, key, partition, count, 1)
            return
        partitions = placer.partitions(keys, count)
        divisor = pa.scalar(self.shards, pa.int32())
        shards = pc.subtract(partitions, pc.multiply(pc.divide(partitions, divisor), divisor))
        elsewhere = pc.not_equal(shards, pa.scalar(self.shard, pa.int32()))
        misrouted = pc.sum(elsewhere).as_py() or 0
        if misrouted:
            first = pc.index(elsewhere, True).as_py()
            key = keys[first].as_py() if isinstance(keys, pa.Array) else keys[first]
            raise self._wrong_shard(served, key, partitions[first].as_py(), count, misrouted)

    def _wrong_shard(
        self, served: ServedStore, key: bytes, partition: int, count: int, misrouted: int
    ) -> ProblemError:
        holder = partition % self.shards
        shown = key[:64].decode("utf-8", "replace")
        more = f" ({misrouted} keys of this request are on other shards)" if misrouted > 1 else ""
        return WRONG_SHARD(
            f'store "{served.name}": key "{shown}" hashes ({served.partitioner}) to partition {partition} of'
            f" {count}, which shard {holder} holds; this is shard {self.shard} of {self.shards}{more}."
            " Route keys by GET /v1/stores/{store}'s sharding (the statestore client does, given a URL"
            " template holding {shard})",
            extras={
                "store": served.name,
                "shard": holder,
                "shards": self.shards,
                "partition": partition,
                "misrouted_keys": misrouted,
            },
        )
