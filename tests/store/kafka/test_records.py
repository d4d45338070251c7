"""Reading a changelog: a poll's messages into a record batch (records, tombstones, null keys,
events, next offsets); each partition's catch-up; restore workers' event frames; and the worker
script, which loads this leaf module without the package."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, KafkaError, Message

from store.kafka.batch import KafkaErrorReport, RecordBatch
from store.kafka.catchup import CatchUp, PartitionCatchUp
from store.kafka.children import module_command
from store.kafka.frames import ChunkWritten, WorkerCaughtUp, WorkerFailed, read_frame, write_frame
from store.kafka.polls import Poll


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
    batch = RecordBatch()
    assert batch.add(messages) == []
    assert batch.keys == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert batch.values == [b"v", b"v", None, b"v", b"v", b"v"]
    assert batch.next_offsets == {0: 13, 1: 5, 2: 8}
    assert batch.metas is None


def stamped(partition: int, offset: int, timestamp_ms: int, kind: int = TIMESTAMP_CREATE_TIME) -> Message:
    return Message(
        topic="t", partition=partition, offset=offset, key=b"k", value=b"v", timestamp=(kind, timestamp_ms)
    )


def test_the_oldest_timestamp_is_the_earliest_first_record_of_a_partition_across_polls() -> None:
    batch = RecordBatch()
    assert batch.oldest_timestamp_ms is None
    batch.add([stamped(0, 1, 5_000), stamped(1, 7, 4_000, TIMESTAMP_LOG_APPEND_TIME), stamped(0, 2, 6_000)])
    assert batch.oldest_timestamp_ms == 4_000
    batch.add([stamped(2, 3, 4_500), record(0, 3, b"no-timestamp")])
    assert batch.oldest_timestamp_ms == 4_000
    batch.add([stamped(2, 4, 3_000)])
    assert batch.oldest_timestamp_ms == 3_000


def test_records_without_timestamps_give_no_oldest_and_it_crosses_a_pipe() -> None:
    untimed = Poll.of([record(0, 1, b"a"), record(1, 1, b"b")], False, {})
    assert untimed.records.oldest_timestamp_ms is None
    timed = Poll.of([stamped(0, 1, 1_700_000_000_123)], False, {})
    assert Poll.from_fields(timed.fields()).records.oldest_timestamp_ms == 1_700_000_000_123


def test_offsets_only_move_forward_across_polls() -> None:
    batch = RecordBatch()
    batch.add([record(0, 5, b"a"), record(1, 9, b"b")])
    batch.add([record(0, 6, b"c")])
    assert batch.next_offsets == {0: 7, 1: 10}


def test_events_are_returned_and_null_keys_counted_but_offsets_kept() -> None:
    end = Message(topic="t", partition=1, offset=4, error=KafkaError(KafkaError._PARTITION_EOF))
    messages = [record(0, 1, b"a"), end, record(0, 2, None), record(1, 3, b"b", b"w")]
    batch = RecordBatch.collecting(with_metas=True)
    reports = batch.add(messages)
    assert [(report.partition, report.end_of_partition) for report in reports] == [(1, True)]
    assert batch.keys == [b"a", b"b"]
    assert batch.values == [b"v", b"w"]
    assert batch.null_keys == 1
    assert batch.next_offsets == {0: 3, 1: 4}
    assert batch.metas is not None
    assert [(p, o) for p, o, _ts in batch.metas] == [(0, 1), (1, 3)]


def test_null_keys_add_up_across_polls() -> None:
    batch = RecordBatch()
    batch.add([record(0, 1, None)])
    batch.add([record(0, 2, None), record(0, 3, b"k")])
    assert (batch.null_keys, batch.keys, batch.next_offsets) == (2, [b"k"], {0: 4})


def test_a_poll_of_events_only_adds_nothing() -> None:
    end = Message(topic="t", partition=0, offset=4, error=KafkaError(KafkaError._PARTITION_EOF))
    batch = RecordBatch()
    assert batch.add([end]) == [KafkaErrorReport(KafkaError._PARTITION_EOF, end.error().str(), False, 0)]
    assert batch.keys == []
    assert batch.next_offsets == {}


def test_a_partition_is_caught_up_once_read_to_a_fetched_high_watermark_or_ended() -> None:
    catch_up = CatchUp([PartitionCatchUp(0, target=10), PartitionCatchUp(1, target=10), PartitionCatchUp(2)])
    catch_up.read({0: 8})
    # The broker's ListOffsets answer was too low for partition 0: the first fetch raises the target.
    assert catch_up.saw_high_watermarks({0: 12, 1: 10})
    assert catch_up.targets() == {0: 12, 1: 10, 2: 0}
    assert not catch_up.done
    assert catch_up.unread == 4
    catch_up.read({0: 12})
    catch_up.ended([1])
    assert not catch_up.saw_high_watermarks({0: 12})
    assert catch_up.partitions[0].caught_up
    # Later high watermarks move the end, never the target again; caught up once is for good.
    assert not catch_up.saw_high_watermarks({0: 15})
    assert catch_up.partitions[0].caught_up
    assert catch_up.targets()[0] == 12
    assert not catch_up.refined  # partition 2 has had no fetch response yet
    catch_up.saw_high_watermarks({2: 0})
    assert not catch_up.done  # nothing read from partition 2: its end event decides
    catch_up.ended([2])
    assert catch_up.done
    assert catch_up.refined
    assert catch_up.next_offsets() == {0: 12}
    assert catch_up.high_watermarks() == {0: 15, 1: 10, 2: 0}


def test_a_partition_started_at_its_end_is_caught_up_by_the_first_high_watermark() -> None:
    catch_up = CatchUp([PartitionCatchUp(0, next_offset=7)])
    catch_up.saw_high_watermarks({0: 7})
    assert catch_up.done


def test_worker_events_go_through_frames_unchanged(tmp_path: Path) -> None:
    events = [
        ChunkWritten(tmp_path / "chunk-1.sst", {0: 10, 2: 7}, 17, 1),
        ChunkWritten(None, {1: 3}, 0, 3),
        KafkaErrorReport(KafkaError._TRANSPORT, "broker down", False, None),
        WorkerCaughtUp({0: 10, 1: 3, 2: 7}),
        WorkerFailed("KafkaException: no"),
    ]
    read, write = os.pipe()
    with os.fdopen(read, "rb") as stream:
        try:
            for number, event in enumerate(events):
                write_frame(write, number, event)
        finally:
            os.close(write)
        assert [read_frame(stream) for _ in events] == list(enumerate(events))


def test_a_long_error_text_is_shortened_so_the_frame_is_one_atomic_write() -> None:
    read, write = os.pipe()
    with os.fdopen(read, "rb") as stream:
        try:
            write_frame(write, 1, WorkerFailed("x" * 100_000))
        finally:
            os.close(write)
        worker, event = read_frame(stream)
    assert worker == 1
    assert isinstance(event, WorkerFailed)
    assert event.text == "x" * 200 + "..."


def test_a_cut_stream_is_an_end_not_an_event() -> None:
    try:
        read_frame(io.BytesIO(b"\x00\x00"))
    except EOFError:
        return
    raise AssertionError("a cut header read as an event")


@pytest.mark.parametrize("module", ["store.kafka.restore_worker", "store.kafka.consumer_process"])
def test_the_child_processes_import_nothing_of_the_table_or_the_lifecycle(module: str) -> None:
    """The child processes start cheaply: their module, as the child imports it, loads the Kafka
    side and the store's shared leaves only; neither the table, nor the store, nor (for the
    consumer process) RocksDB."""
    probe = (
        f"import sys, {module}\n"
        "rooms = (['store', 'table'], ['store', 'lifecycle'])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[:2] in rooms))\n"
        "print('rocksdict' in sys.modules)\n"
    )
    command = [*module_command(module)[:2], "-c", probe]
    run = subprocess.run(command, capture_output=True, text=True, check=True)
    assert run.stdout.split("\n")[:2] == ["[]", str(module.endswith("restore_worker"))]
