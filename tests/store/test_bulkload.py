"""The bulk loader: one chunk reduced to its last record per key, in byte order; chunks ingested in order."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from store import EngineTuning
from store.bulkload import BulkLoader
from store.engine import Engine
from store.sst_worker import sorted_last_per_key, write_sst

records = st.lists(st.tuples(st.binary(max_size=3), st.one_of(st.none(), st.binary(max_size=4))), max_size=60)


def test_last_occurrence_wins_and_tombstones_are_kept_as_none() -> None:
    keys, values = sorted_last_per_key([b"b", b"a", b"b", b"c", b"a"], [b"1", b"2", b"3", None, None])
    assert keys == [b"a", b"b", b"c"]
    assert values == [None, b"3", None]


def test_empty_chunk() -> None:
    assert sorted_last_per_key([], []) == ([], [])


@given(records)
def test_equals_a_dict_model(chunk: list[tuple[bytes, bytes | None]]) -> None:
    model: dict[bytes, bytes | None] = {}
    for key, value in chunk:
        model[key] = value
    keys, values = sorted_last_per_key([k for k, _ in chunk], [v for _, v in chunk])
    assert keys == sorted(model)
    assert len(set(keys)) == len(keys)
    assert dict(zip(keys, values, strict=True)) == model


def test_chunks_built_by_several_workers_are_ingested_in_submission_order(tmp_path: Path) -> None:
    engine = Engine(tmp_path / "db", EngineTuning())
    ingested: list[tuple[dict[int, int], int]] = []

    def ingest(path: Path | None, offsets: dict[int, int], count: int) -> None:
        if path is not None:
            engine.ingest([path])
        ingested.append((offsets, count))

    model: dict[bytes, bytes] = {}
    loader = BulkLoader(tmp_path / "bulk", ingest, max_in_flight=3, workers=2)
    try:
        for chunk in range(12):
            # Every chunk rewrites the same keys; a later chunk must win whichever worker is faster.
            size = 4000 if chunk % 2 == 0 else 50  # uneven chunks: the workers finish out of order
            keys = [b"k%05d" % (i % 300) for i in range(size)]
            values: list[bytes | None] = [
                None if (i + chunk) % 7 == 0 else b"%d-%d" % (chunk, i) for i in range(size)
            ]
            for key, value in zip(keys, values, strict=True):
                if value is None:
                    model.pop(key, None)
                else:
                    model[key] = value
            loader.submit(keys, values, {0: chunk + 1})
        loader.drain()
    finally:
        loader.close()
    assert [offsets for offsets, _ in ingested] == [{0: n + 1} for n in range(12)]
    table = dict(engine.snapshot().items())
    engine.close()
    assert table == model
    assert not list((tmp_path / "bulk").glob("chunk-*"))


def test_sst_files_are_compressed_like_the_database(tmp_path: Path) -> None:
    path = write_sst(tmp_path / "chunk.sst", [b"k%04d" % i for i in range(1000)], [b"v" * 100] * 1000)
    assert path is not None
    # The file's properties block names its compression.
    data = path.read_bytes()
    assert b"LZ4" in data
    assert b"Snappy" not in data
