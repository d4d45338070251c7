"""How a store is spread over shards, as the client sees it: which shard holds a key, a position's parts.

A sharded deployment runs ``shards`` services; shard ``s`` materializes the topic's partitions ``p``
with ``p % shards == s``. A key lives on the partition its producer chose (the store's
``partitioner`` over the topic's ``topic_partitions``), hence on that partition's shard. Every shard
reports this in ``GET /v1/stores/{store}`` (``"sharding"``); an unsharded service is one shard
holding every partition. A store whose keys were written through the Schema Registry reports
``"routing": "natural_key"``: each of its shards reads every partition and keeps the natural keys
whose own bytes hash to it (one natural key is a producer's key per key schema id, on as many
partitions), so the same rule over the natural key's bytes finds its one shard.

Positions name partitions, so they compose across shards: the table's position is the union of the
shards' positions, and each shard is sent its part of a ``min_position`` / ``as_of``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from clients.exceptions import UnexpectedResponseError
from clients.partitioners import PARTITIONERS, Partitioner
from wire.position import Position, PositionLike

SHARD_PLACEHOLDER = "{shard}"
"""What a URL template holds where the shard number goes: ``http://statestore-{shard}.statestore:8080``."""


@dataclasses.dataclass(frozen=True, slots=True)
class Sharding:
    """One store's sharding: ``shards`` services, the ``partitioner`` and the topic's partition count.

    ``topic_partitions`` is ``None`` when the store reports no count (a service without sharding,
    or one that has not read the topic's metadata yet): then only one shard can be routed to.
    """

    shards: int = 1
    partitioner: Partitioner = PARTITIONERS["murmur2"]
    topic_partitions: int | None = None
    # Keys written through the Schema Registry: every shard reads every partition and keeps the
    # natural keys whose own bytes hash to it, so a position is sent whole to each shard.
    by_natural_key: bool = False

    @classmethod
    def from_info(cls, raw: Mapping[str, Any]) -> Sharding:
        """The sharding a ``StoreInfo`` document reports (one shard when it reports none)."""
        member = raw.get("sharding")
        if member is None:
            return cls()
        try:
            shards = int(member["shards"])
            count = member.get("topic_partitions")
            sharding = cls(
                shards=shards,
                partitioner=PARTITIONERS[str(member.get("partitioner", "murmur2"))],
                topic_partitions=None if count is None else int(count),
                by_natural_key=member.get("routing") == "natural_key",
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UnexpectedResponseError(
                f"the service sent a sharding the client cannot read: {exc}"
            ) from exc
        if shards < 1 or (sharding.topic_partitions is not None and sharding.topic_partitions < 1):
            raise UnexpectedResponseError(f"the service sent an impossible sharding: {dict(member)}")
        return sharding

    @property
    def routable(self) -> bool:
        """Whether keys can be routed: one shard, or a known partition count."""
        return self.shards == 1 or self.topic_partitions is not None

    def shard_of(self, key: bytes) -> int:
        """The shard holding ``key``."""
        if self.shards == 1:
            return 0
        assert self.topic_partitions is not None, "route only a routable sharding"
        return self.partitioner(key, self.topic_partitions) % self.shards

    def shards_of(self, keys: pa.Array) -> pa.Array:
        """The shard of every key of a ``binary`` array, as ``int32``."""
        if self.shards == 1:
            return pa.repeat(pa.scalar(0, pa.int32()), len(keys))
        assert self.topic_partitions is not None, "route only a routable sharding"
        partitions = self.partitioner.partitions(keys, self.topic_partitions)
        shards = pa.scalar(self.shards, pa.int32())
        return pc.subtract(partitions, pc.multiply(pc.divide(partitions, shards), shards))

    def part(self, position: PositionLike | None, shard: int) -> PositionLike | None:
        """The entries of ``position`` that name partitions of ``shard`` (one shard, or a store of
        natural keys whose shards read every partition: all, as given)."""
        if position is None or self.shards == 1 or self.by_natural_key:
            return position
        return Position({p: o for p, o in Position.of(position).items() if p % self.shards == shard})

    def knows_partition(self, partition: int) -> bool:
        """Whether ``partition`` exists in the topic as this sharding knows it (for noticing growth)."""
        return self.topic_partitions is None or partition < self.topic_partitions


def is_template(url: str) -> bool:
    """Whether ``url`` holds the ``{shard}`` placeholder."""
    return SHARD_PLACEHOLDER in url


def shard_url(template: str, shard: int | None) -> str:
    """The base URL of ``shard`` (the template itself when it holds no placeholder)."""
    base = template.rstrip("/")
    if shard is None or not is_template(base):
        return base
    return base.replace(SHARD_PLACEHOLDER, str(shard))


def grouped_by_shard(shards: pa.Array, count: int) -> list[tuple[int, pa.Array]]:
    """``(shard, row indices)`` for every shard that has rows, in shard order."""
    groups: list[tuple[int, pa.Array]] = []
    for shard in range(count):
        rows = pc.indices_nonzero(pc.equal(shards, pa.scalar(shard, pa.int32())))
        if len(rows):
            groups.append((shard, rows))
    return groups


def in_request_order(parts: list[pa.Array], rows: list[pa.Array]) -> pa.Array:
    """The answers of every shard's ``parts`` put back at their ``rows``, in request order."""
    if len(parts) == 1:
        return parts[0]
    order = pc.sort_indices(pa.concat_arrays([r.cast(pa.int64()) for r in rows]))
    return pa.concat_arrays(parts).take(order)
