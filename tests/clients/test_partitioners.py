"""The partitioners place keys exactly as the producers do: published vectors, and real producers.

The real-producer tests write keys with confluent-kafka (librdkafka) to the real broker under each
librdkafka partitioner, read every record back, and compare the partition it landed on.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clients.partitioners import (
    PARTITIONERS,
    fnv1a,
    fnv1a_partition,
    murmur2,
    murmur2_partition,
    partitioner,
    place,
)
from service.local.broker import LocalBroker
from tests.support.kafka import create_topic, landed_partitions, produce_keyed, unique_topic

# Java's Utils.murmur2 results, as librdkafka's rdmurmur2.c unit test and kafka-go's tests list them.
JAVA_MURMUR2 = {
    b"kafka": 0xD067CF64,
    b"giberish123456789": 0x8F552B0C,
    b"1234": 0x9FC97B14,
    b"234": 0xE7C009CA,
    b"34": 0x873930DA,
    b"4": 0x5A4B5CA1,
    b"PreAmbleWillBeRemoved,ThePrePartThatIs": 0x78424F1C,
    b"reAmbleWillBeRemoved,ThePrePartThatIs": 0x4A62B377,
    b"eAmbleWillBeRemoved,ThePrePartThatIs": 0xE0E4E09E,
    b"AmbleWillBeRemoved,ThePrePartThatIs": 0x62B8B43F,
    b"": 0x106E08D9,
}


def test_murmur2_matches_the_java_client() -> None:
    assert {key: murmur2(key) for key in JAVA_MURMUR2} == JAVA_MURMUR2
    # kafka-python's Murmur2Partitioner tests (1,000 partitions), which follow the Java client.
    expected = {b"": 681, b"a": 524, b"ab": 434, b"abc": 107, b"123456789": 566, b"\x00 ": 742}
    assert {key: murmur2_partition(key, 1000) for key in expected} == expected


def test_fnv1a_is_the_go_clients_hash_partitioner() -> None:
    # kafka-go's Hash balancer tests, which match sarama's default hash partitioner.
    assert fnv1a_partition(b"blah", 2) == 0
    assert fnv1a_partition(b"blah", 3) == 1
    assert fnv1a_partition(b"boop", 3) == 2
    # "hash code with MSB set": the int32 cast matters; sarama's reference rule differs here.
    assert fnv1a(b"20") >= 0x80000000
    assert fnv1a_partition(b"20", 16) == 1
    assert (fnv1a(b"20") & 0x7FFFFFFF) % 16 != 1


def test_crc32_is_librdkafkas_consistent_partitioner() -> None:
    # librdkafka's 0048-partitioner.c vectors for consistent_random (17 partitions).
    assert PARTITIONERS["crc32"](b"23456", 17) == 0xB1B451D7 % 17
    assert PARTITIONERS["crc32"](b"hejsan", 17) == 0xD077037E % 17


def test_unknown_partitioner_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="murmur2, crc32, fnv1a"):
        partitioner("djb2")


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.binary(max_size=70), min_size=0, max_size=300),
    partitions=st.integers(min_value=1, max_value=2000),
)
def test_arrays_are_placed_like_single_keys(keys: list[bytes], partitions: int) -> None:
    for placer in PARTITIONERS.values():
        placed = placer.partitions(pa.array(keys, pa.binary()), partitions).to_pylist()
        assert placed == [placer(key, partitions) for key in keys], placer.name


@pytest.mark.parametrize("name", sorted(PARTITIONERS))
def test_arrays_of_one_length_and_with_long_keys(name: str) -> None:
    placer = PARTITIONERS[name]
    rng = random.Random(7)
    same = [rng.randbytes(13) for _ in range(500)]
    mixed = [*same, os.urandom(300), b"x" * 1000, b""]
    for keys in (same, mixed, [k[:12] for k in same]):
        assert placer.partitions(keys, 6).to_pylist() == [placer(k, 6) for k in keys]
    assert placer.partitions(pa.array([k.hex() for k in same]), 6).to_pylist() == [
        placer(k.hex().encode(), 6) for k in same
    ]


def test_null_keys_have_no_partition() -> None:
    with pytest.raises(ValueError, match="null key"):
        PARTITIONERS["murmur2"].partitions(pa.array([b"a", None], pa.binary()), 3)
    with pytest.raises(ValueError, match="null key"):
        place("murmur2", [b"a", None], 3)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="at least one partition"):
        place("murmur2", [b"a"], 0)


@pytest.mark.parametrize("name", sorted(PARTITIONERS))
def test_place_puts_samples_and_large_batches_where_each_key_goes(name: str) -> None:
    rng = random.Random(11)
    for count in (1_000, 5_000):  # a store's sample, hashed one by one; more, as an Arrow array
        keys = [rng.randbytes(rng.randint(0, 40)) for _ in range(count)]
        assert place(name, keys, 7) == [PARTITIONERS[name](key, 7) for key in keys]


def test_placing_a_sample_does_not_import_pandas() -> None:
    # A restore worker checks a sample of every chunk: pyarrow would import pandas for it.
    code = (
        "import sys; from clients.partitioners import place;"
        " place('murmur2', [b'key-%d' % i for i in range(1024)], 3);"
        " print('pandas' in sys.modules)"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False"


def sample_keys() -> list[bytes]:
    rng = random.Random(17)
    text = [f"customer-{i}".encode() for i in range(150)]
    binary = [rng.randbytes(rng.randint(1, 40)) for _ in range(150)]
    return text + binary


@pytest.mark.parametrize(
    ("librdkafka", "ours", "partitions"),
    [("murmur2_random", "murmur2", 6), ("consistent_random", "crc32", 7), ("fnv1a_random", "fnv1a", 6)],
)
def test_real_producers_place_keys_as_computed(
    broker: LocalBroker, librdkafka: str, ours: str, partitions: int
) -> None:
    topic = unique_topic(f"placed-{ours}")
    create_topic(broker.bootstrap_servers, topic, partitions)
    keys = sample_keys()
    produce_keyed(broker.bootstrap_servers, topic, [(key, b"v") for key in keys], librdkafka)
    landed = landed_partitions(broker.bootstrap_servers, topic)
    assert landed == {key: {PARTITIONERS[ours](key, partitions)} for key in keys}
    placed = PARTITIONERS[ours].partitions(keys, partitions).to_pylist()
    assert placed == [min(landed[key]) for key in keys]
    if ours == "fnv1a":
        # Half the hashes have the top bit set: there the int32 rule is what the producer did.
        assert sum(fnv1a(key) >= 0x80000000 for key in keys) > 50
