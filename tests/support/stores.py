"""Test helpers for stores: reading a whole table, producing with known end offsets, waiting."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from store import MAX_SCAN_LIMIT, EngineTuning, Position, ReadOnlyKeyValueStore, ServableStore
from tests.support.kafka import Record

# Small, quick settings: steady-state WriteBatch path unless a test asks for bulk loading.
FAST = EngineTuning(
    bulk_load_min_records=0,
    metadata_check_interval_seconds=0.5,
    retry_backoff_initial_seconds=0.05,
    retry_backoff_max_seconds=0.5,
    progress_log_interval_seconds=0.5,
)


def bulk_tuning(min_records: int = 500, chunk_records: int = 2_000, **more: Any) -> EngineTuning:
    """Tuning that forces the SST bulk path on bootstrap, cutting it into many chunks."""
    fields: dict[str, Any] = {
        "bulk_load_min_records": min_records,
        "bulk_load_chunk_records": chunk_records,
        "poll_max_records": 500,
        "metadata_check_interval_seconds": 0.5,
        "retry_backoff_initial_seconds": 0.05,
        "retry_backoff_max_seconds": 0.5,
        **more,
    }
    return EngineTuning(**fields)


def read_table(view: ReadOnlyKeyValueStore, prefix: bytes = b"") -> dict[bytes, bytes]:
    """Every key starting with ``prefix`` and its value, paging through ``prefix_scan``."""
    table: dict[bytes, bytes] = {}
    after: bytes | None = None
    while True:
        page = view.prefix_scan(prefix, after=after, limit=MAX_SCAN_LIMIT)
        table.update(page.items)
        if page.next_after is None:
            return table
        after = page.next_after


def table_of(store: ServableStore) -> tuple[dict[bytes, bytes], Position]:
    """The whole table of ``store`` and the position it reflects, from one view."""
    with store.view() as view:
        return read_table(view), view.position()


def produce_tracked(
    producer: Producer, topic: str, records: Iterable[Record], *, partition: int | None = None
) -> Position:
    """Produce ``records`` (keyed partitioning unless ``partition``), flush, and return the next
    offset of every partition written to, taken from the delivery reports."""
    ends: dict[int, int] = {}
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            errors.append(error)
            return
        p, offset = message.partition(), message.offset()
        assert p is not None
        assert offset is not None
        ends[p] = max(ends.get(p, 0), offset + 1)

    extra: dict[str, int] = {} if partition is None else {"partition": partition}
    for key, value in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=delivered, **extra)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} records were not delivered"
    assert not errors, f"delivery failed: {errors[:3]}"
    return Position(ends)


def wait_until(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.02) -> None:
    """Poll ``condition`` until it holds; fail the test naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
