"""One poll's messages into a chunk: records, tombstones, null keys, events, next offsets."""

from __future__ import annotations

from confluent_kafka import KafkaError, Message

from store.materializer import _Chunk, _collect


def record(partition: int, offset: int, key: bytes | None, value: bytes | None = b"v") -> Message:
    return Message(topic="t", partition=partition, offset=offset, key=key, value=value)


def test_records_in_order_and_each_partitions_next_offset() -> None:
    # Runs of partitions interleaved, as polls deliver them; partition 2 appears only early.
    messages = [
        record(0, 10, b"a"),
        record(2, 7, b"b"),
        record(0, 11, b"c", None),
        record(1, 3, b"d"),
        record(1, 4, b"e"),
        record(0, 12, b"f"),
    ]
    chunk = _Chunk()
    assert _collect(messages, chunk, with_metas=False) == []
    assert chunk.keys == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert chunk.values == [b"v", b"v", None, b"v", b"v", b"v"]
    assert chunk.offsets == {0: 13, 1: 5, 2: 8}


def test_offsets_only_move_forward_across_polls() -> None:
    chunk = _Chunk()
    _collect([record(0, 5, b"a"), record(1, 9, b"b")], chunk, with_metas=False)
    _collect([record(0, 6, b"c")], chunk, with_metas=False)
    assert chunk.offsets == {0: 7, 1: 10}


def test_events_are_returned_and_null_keys_counted_but_offsets_kept() -> None:
    end = Message(topic="t", partition=1, offset=4, error=KafkaError(KafkaError._PARTITION_EOF))
    messages = [record(0, 1, b"a"), end, record(0, 2, None), record(1, 3, b"b", b"w")]
    chunk = _Chunk()
    events = _collect(messages, chunk, with_metas=True)
    assert events == [end]
    assert chunk.keys == [b"a", b"b"]
    assert chunk.values == [b"v", b"w"]
    assert chunk.null_keys == 1
    assert chunk.offsets == {0: 3, 1: 4}
    assert [(p, o) for p, o, _ts in chunk.metas] == [(0, 1), (1, 3)]


def test_a_poll_of_events_only_adds_nothing() -> None:
    end = Message(topic="t", partition=0, offset=4, error=KafkaError(KafkaError._PARTITION_EOF))
    chunk = _Chunk()
    assert _collect([end], chunk, with_metas=False) == [end]
    assert chunk.keys == []
    assert chunk.offsets == {}
