"""How producers chose a record's partition from its key, reproduced to route keys to shards.

A sharded store holds the partitions ``p`` with ``p % shards == shard``; a key is found on the shard
of the partition its producer wrote it to. These are the producers' own rules, bit for bit:

``murmur2``
    Java clients and Kafka Streams (``DefaultPartitioner`` / ``BuiltInPartitioner``):
    ``Utils.toPositive(Utils.murmur2(key)) % n``; also librdkafka's ``murmur2`` / ``murmur2_random``.
``crc32``
    librdkafka's ``consistent`` / ``consistent_random`` (its default, so confluent-kafka's):
    ``crc32(key) % n`` over the unsigned 32-bit CRC.
``fnv1a``
    Go clients and librdkafka's ``fnv1a`` / ``fnv1a_random``: sarama's default
    ``NewHashPartitioner`` and kafka-go's ``Hash`` balancer cast the 32-bit FNV-1a hash to ``int32``
    and take the absolute value of the remainder, ``abs(int32(fnv1a(key)) % n)``; librdkafka's
    ``rd_fnv1a`` returns ``abs(int32(hash))`` to match them, and ``abs(h) % n == abs(h % n)``.
    sarama's ``NewReferenceHashPartitioner`` (``(hash & 0x7fffffff) % n``) is another rule: a topic
    written with it is not routable by this name (the store counts such records as misplaced).

Records without a key (``None``) and, under ``consistent_random``, records with an empty key are
placed at random by every producer: they cannot be routed, and the store counts them as misplaced
when they land off their key's partition.

:meth:`Partitioner.partition` places one key in plain Python (a few µs a key for murmur2 and
FNV-1a); :meth:`Partitioner.partitions` places an Arrow array of keys with Arrow kernels over every
key at once (about 0.1 µs a key; ``python -m bench shard`` measures both).
"""

from __future__ import annotations

import dataclasses
import functools
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

PartitionerName = Literal["murmur2", "crc32", "fnv1a"]
PARTITIONER_NAMES: tuple[PartitionerName, ...] = ("murmur2", "crc32", "fnv1a")

_M32 = 0xFFFFFFFF
_MURMUR_M = 0x5BD1E995
_MURMUR_SEED = 0x9747B28C
_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193

_SMALL_BATCH = 32
"""Fewer keys than this are placed one by one: the kernels' fixed cost would outweigh them."""
_LONG_KEY = 256
"""Keys longer than this are placed one by one, so padding never makes every key that long."""


@functools.lru_cache(maxsize=256)
def _words(count: int) -> struct.Struct:
    """Unpacks ``count`` little-endian unsigned 32-bit words (one compiled struct per count)."""
    return struct.Struct(f"<{count}I")


def murmur2(key: bytes) -> int:
    """Kafka's ``Utils.murmur2(key)`` (MurmurHash2, seed ``0x9747b28c``) as an unsigned 32-bit int."""
    length = len(key)
    h = _MURMUR_SEED ^ length
    words = length >> 2
    if words:
        for word in _words(words).unpack_from(key):
            k = (word * _MURMUR_M) & _M32
            k ^= k >> 24
            # (h * m) ^ (k * m), masked once: masking commutes with xor.
            h = ((h * _MURMUR_M) ^ (k * _MURMUR_M)) & _M32
    if length & 3:
        h ^= int.from_bytes(key[words << 2 :], "little")
        h = (h * _MURMUR_M) & _M32
    h ^= h >> 13
    h = (h * _MURMUR_M) & _M32
    return h ^ (h >> 15)


def fnv1a(key: bytes) -> int:
    """The 32-bit FNV-1a hash of ``key`` (Go's ``hash/fnv.New32a``, librdkafka's ``rd_fnv1a``)."""
    h = _FNV_OFFSET
    for byte in key:
        h = ((h ^ byte) * _FNV_PRIME) & _M32
    return h


def murmur2_partition(key: bytes, partitions: int) -> int:
    """Java's ``Utils.toPositive(Utils.murmur2(key)) % partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def crc32_partition(key: bytes, partitions: int) -> int:
    """librdkafka's ``consistent`` partitioner: ``rd_crc32(key) % partitions``."""
    return zlib.crc32(key) % partitions


def fnv1a_partition(key: bytes, partitions: int) -> int:
    """sarama's / kafka-go's hash partitioner: ``abs(int32(fnv1a(key)) % partitions)``.

    Go's ``%`` truncates towards zero, so the absolute value of the remainder is the remainder of
    the absolute value.
    """
    h = fnv1a(key)
    return (h if h < 0x80000000 else 0x100000000 - h) % partitions


# -- the same over Arrow arrays -------------------------------------------------------------------
#
# Every key is padded with zero bytes to the longest key's length rounded up to a word, so word j
# of every key is one contiguous slice; a key shorter than that keeps its hash where its own bytes
# end (``if_else`` on a mask). Kernels on uint32 wrap around, as the 32-bit hashes do.


def _u32(value: int) -> pa.Scalar:
    return pa.scalar(value, pa.uint32())


def _padded(keys: pa.Array, width: int) -> pa.Array:
    """Every key right-padded with zero bytes to exactly ``width`` bytes."""
    zeros = pa.scalar(bytes(width), pa.binary())
    return pc.binary_slice(pc.binary_join_element_wise(keys, zeros, pa.scalar(b"", pa.binary())), 0, width)


def _slice_u32(keys: pa.Array, start: int, width: int) -> pa.Array:
    """Bytes ``[start, start + width)`` of keys that are all longer, as little-endian uint32.

    ``width`` is 4 (a whole word) or 1 (a single byte).
    """
    data = pc.binary_slice(keys, start, start + width).buffers()[2]
    if width == 1:
        return pa.Array.from_buffers(pa.uint8(), len(keys), [None, data]).cast(pa.uint32())
    # A fresh binary array: zero-based offsets and 4 contiguous bytes per key.
    return pa.Array.from_buffers(pa.uint32(), len(keys), [None, data])


def _murmur2_vector(keys: pa.Array, lengths: pa.Array, longest: int, same: bool) -> pa.Array:
    """murmur2 of every key as uint32; ``same`` when every key is ``longest`` bytes long."""
    m = _u32(_MURMUR_M)
    padded = keys if same and longest % 4 == 0 else _padded(keys, (longest + 3) & ~3)
    u_lengths = lengths.cast(pa.uint32())
    h = pc.bit_wise_xor(u_lengths, _u32(_MURMUR_SEED))
    words = pc.shift_right(u_lengths, _u32(2))
    tail = pa.repeat(_u32(0), len(keys))
    for word in range((longest + 3) >> 2):
        value = _slice_u32(padded, word * 4, 4)
        if same and word == longest >> 2:
            tail = value
            break
        k = pc.multiply(value, m)
        k = pc.multiply(pc.bit_wise_xor(k, pc.shift_right(k, _u32(24))), m)
        mixed = pc.bit_wise_xor(pc.multiply(h, m), k)
        h = mixed if same else pc.if_else(pc.greater(words, _u32(word)), mixed, h)
        if not same:
            # The zero padding makes the word after the last whole one the tail, zero-filled.
            tail = pc.if_else(pc.equal(words, _u32(word)), value, tail)
    has_tail = pc.not_equal(pc.bit_wise_and(u_lengths, _u32(3)), _u32(0))
    h = pc.if_else(has_tail, pc.multiply(pc.bit_wise_xor(h, tail), m), h)
    h = pc.multiply(pc.bit_wise_xor(h, pc.shift_right(h, _u32(13))), m)
    return pc.bit_wise_xor(h, pc.shift_right(h, _u32(15)))


def _fnv1a_vector(keys: pa.Array, lengths: pa.Array, longest: int, same: bool) -> pa.Array:
    """FNV-1a of every key as uint32; ``same`` when every key is ``longest`` bytes long."""
    prime = _u32(_FNV_PRIME)
    padded = _padded(keys, longest) if not same else keys
    h = pa.repeat(_u32(_FNV_OFFSET), len(keys))
    for byte in range(longest):
        mixed = pc.multiply(pc.bit_wise_xor(h, _slice_u32(padded, byte, 1)), prime)
        h = mixed if same else pc.if_else(pc.greater(lengths, pa.scalar(byte, lengths.type)), mixed, h)
    return h


def _remainder(values: pa.Array, partitions: int) -> pa.Array:
    """``values % partitions`` for non-negative integers (Arrow has no modulo kernel)."""
    divisor = pa.scalar(partitions, values.type)
    return pc.subtract(values, pc.multiply(pc.divide(values, divisor), divisor))


def _murmur2_partitions(keys: pa.Array, lengths: pa.Array, longest: int, same: bool, n: int) -> pa.Array:
    positive = pc.bit_wise_and(_murmur2_vector(keys, lengths, longest, same), _u32(0x7FFFFFFF))
    return _remainder(positive, n)


def _fnv1a_partitions(keys: pa.Array, lengths: pa.Array, longest: int, same: bool, n: int) -> pa.Array:
    h = _fnv1a_vector(keys, lengths, longest, same).cast(pa.int64())
    # abs(int32(h)): a hash with the top bit set is negative as int32, 2**32 - h in magnitude.
    negative = pc.greater_equal(h, pa.scalar(0x80000000, pa.int64()))
    magnitude = pc.if_else(negative, pc.subtract(pa.scalar(0x100000000, pa.int64()), h), h)
    return _remainder(magnitude, n)


VectorPlace = Callable[[pa.Array, pa.Array, int, bool, int], pa.Array]
"""Places keys at once: ``(keys, their lengths, the longest, all that long, partitions)``."""


@dataclasses.dataclass(frozen=True, slots=True)
class Partitioner:
    """One producer's rule: ``partition(key, n)`` for one key, ``partitions(keys, n)`` for many."""

    name: PartitionerName
    partition: Callable[[bytes, int], int]
    _vector: VectorPlace | None = dataclasses.field(default=None, repr=False)

    def __call__(self, key: bytes, partitions: int) -> int:
        return self.partition(key, partitions)

    def partitions(self, keys: pa.Array | Sequence[bytes], partitions: int) -> pa.Int32Array:
        """The partition of every key (``binary`` or ``string`` array, or bytes), as ``int32``.

        Keys must not be null: a record without a key has no partition to find it by.
        """
        if partitions < 1:
            raise ValueError(f"a topic has at least one partition, got {partitions}")
        array = keys if isinstance(keys, pa.Array) else pa.array(keys, pa.binary())
        if not pa.types.is_binary(array.type):
            array = array.cast(pa.binary())
        if array.null_count:
            raise ValueError("a null key has no partition; drop null keys before routing")
        if self._vector is None or len(array) < _SMALL_BATCH:
            return self._one_by_one(array, partitions)
        lengths = pc.binary_length(array)
        bounds = pc.min_max(lengths)
        shortest, longest = int(bounds["min"].as_py()), int(bounds["max"].as_py())
        if longest <= _LONG_KEY:
            placed = self._vector(array, lengths, longest, shortest == longest, partitions)
            return placed.cast(pa.int32())
        # A few long keys would make every key that long when padded: place them one by one.
        is_long = pc.greater(lengths, pa.scalar(_LONG_KEY, lengths.type))
        is_short = pc.invert(is_long)
        short_lengths = lengths.filter(is_short)
        longest_short = int(pc.max(short_lengths).as_py() or 0)
        short = self._vector(array.filter(is_short), short_lengths, longest_short, False, partitions)
        placed = pc.replace_with_mask(
            pa.repeat(pa.scalar(0, pa.int32()), len(array)), is_short, short.cast(pa.int32())
        )
        found: pa.Int32Array = pc.replace_with_mask(
            placed, is_long, self._one_by_one(array.filter(is_long), partitions)
        )
        return found

    def _one_by_one(self, keys: pa.Array, partitions: int) -> pa.Int32Array:
        place = self.partition
        found: pa.Int32Array = pa.array([place(k, partitions) for k in keys.to_pylist()], pa.int32())
        return found


PARTITIONERS: dict[str, Partitioner] = {
    "murmur2": Partitioner("murmur2", murmur2_partition, _murmur2_partitions),
    "crc32": Partitioner("crc32", crc32_partition),
    "fnv1a": Partitioner("fnv1a", fnv1a_partition, _fnv1a_partitions),
}
"""The partitioners a store may name (``stores[].partitioner``), by name."""


def partitioner(name: str) -> Partitioner:
    """The partitioner called ``name`` (``murmur2``, ``crc32`` or ``fnv1a``)."""
    try:
        return PARTITIONERS[name]
    except KeyError:
        raise ValueError(f"unknown partitioner {name!r}; use one of {', '.join(PARTITIONER_NAMES)}") from None


_PLACE_ONE_BY_ONE = 4096
"""Up to this many keys, ``place`` hashes them one by one: a store checks samples of about a
thousand keys (a few milliseconds so), and an Arrow array built from a list would make pyarrow
import pandas, about a second of CPU in each restore worker process."""


def place(name: str, keys: Sequence[bytes], partitions: int) -> list[int]:
    """The partition of every key under the partitioner ``name``, as a list.

    What a store is given to check its records (``functools.partial(place, name)``): a plain
    module-level function, so it pickles by reference into a store's restore worker processes.
    """
    chosen = partitioner(name)
    if len(keys) > _PLACE_ONE_BY_ONE:
        placed: list[int] = chosen.partitions(keys, partitions).to_pylist()
        return placed
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, got {partitions}")
    if any(key is None for key in keys):
        raise ValueError("a null key has no partition; drop null keys before routing")
    return [chosen.partition(key, partitions) for key in keys]
