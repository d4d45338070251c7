"""Test helpers for stores: reading a whole table or index, producing with known end offsets, waiting."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from store import MAX_SCAN_LIMIT, Position, ReadOnlyKeyValueStore, ServableStore, StoreState, StoreTuning
from tests.support.kafka import Record

REPO = Path(__file__).resolve().parents[2]

# Small, quick settings: steady-state WriteBatch path unless a test asks for bulk loading.
FAST = StoreTuning().replace(
    bulk_load_min_records=0,
    metadata_check_interval_seconds=0.5,
    backoff_initial_seconds=0.05,
    backoff_max_seconds=0.5,
    progress_log_interval_seconds=0.5,
)


def bulk_tuning(min_records: int = 500, chunk_records: int = 2_000, **more: Any) -> StoreTuning:
    """Tuning that forces the SST bulk path on bootstrap, cutting it into many chunks."""
    fields: dict[str, Any] = {
        "bulk_load_min_records": min_records,
        "bulk_load_chunk_records": chunk_records,
        "poll_max_records": 500,
        "metadata_check_interval_seconds": 0.5,
        "backoff_initial_seconds": 0.05,
        "backoff_max_seconds": 0.5,
        **more,
    }
    return StoreTuning().replace(**fields)


def tuning_settings(tuning: StoreTuning) -> dict[str, Any]:
    """``tuning`` as the flat settings a child store process takes (``StoreTuning().replace(**them)``)."""
    flat: dict[str, Any] = {}
    for name, value in dataclasses.asdict(tuning).items():
        flat.update(value if isinstance(value, dict) else {name: value})
    return flat


def mixed_records(count: int, keys: int, seed: int, tombstone_every: int = 7) -> list[Record]:
    """Updates and tombstones over ``keys`` keys, in a random but reproducible order."""
    rng = random.Random(seed)
    records: list[Record] = []
    for i in range(count):
        key = b"key-%05d" % rng.randrange(keys)
        value = None if rng.randrange(tombstone_every) == 0 else b"%d:%s" % (i, key)
        records.append((key, value))
    return records


def assert_equals_model(store: ServableStore, model: dict[bytes, bytes], end: Position) -> None:
    """The store is READY, at exactly ``end``, and holds exactly ``model`` (nothing else)."""
    assert store.state is StoreState.READY
    table, position = table_of(store)
    assert position == end, (position, end, store.status())
    assert table.keys() == model.keys()
    assert table == model


def read_table(
    view: ReadOnlyKeyValueStore, prefix: bytes = b"", page_size: int = MAX_SCAN_LIMIT
) -> dict[bytes, bytes]:
    """Every key starting with ``prefix`` and its value, paging through ``prefix_scan``."""
    table: dict[bytes, bytes] = {}
    after: bytes | None = None
    while True:
        page = view.prefix_scan(prefix, after=after, limit=page_size)
        table.update(page.items)
        if page.next_after is None:
            return table
        after = page.next_after


def read_index(
    view: ReadOnlyKeyValueStore, index: str, value: bytes, page: int = MAX_SCAN_LIMIT
) -> dict[bytes, bytes]:
    """Every row ``index_scan`` finds for one indexed value, paging ``page`` rows at a time.

    Fails when the pages are not strictly byte-ordered by row key.
    """
    rows: dict[bytes, bytes] = {}
    after: bytes | None = None
    while True:
        result = view.index_scan(index, value, after=after, limit=page)
        keys = [key for key, _ in result.items]
        assert keys == sorted(set(keys)), f"index page out of order: {keys}"
        assert after is None or not keys or keys[0] > after, f"index page repeats rows before {after!r}"
        rows.update(result.items)
        if result.next_after is None:
            return rows
        after = result.next_after


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

    for key, value in records:
        while True:
            try:
                if partition is None:
                    producer.produce(topic, key=key, value=value, on_delivery=delivered)
                else:
                    producer.produce(topic, key=key, value=value, partition=partition, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} records were not delivered"
    assert not errors, f"delivery failed: {errors[:3]}"
    return Position(ends)


@dataclasses.dataclass(frozen=True, slots=True)
class Delivered:
    """One record as the broker stored it."""

    partition: int
    offset: int
    key: bytes
    value: bytes | None


def produce_logged(
    producer: Producer,
    topic: str,
    records: Iterable[Record],
    *,
    partitions: Callable[[bytes], int] | None = None,
) -> list[Delivered]:
    """Produce keyed ``records`` (to ``partitions(key)`` when given, else by key hash), flush, and
    return every record with the partition and offset the delivery reports gave it."""
    delivered: list[Delivered] = []
    errors: list[KafkaError] = []

    def report(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            errors.append(error)
            return
        partition, offset, key = message.partition(), message.offset(), message.key()
        assert partition is not None
        assert offset is not None
        assert key is not None
        delivered.append(Delivered(partition, offset, key, message.value()))

    for key, value in records:
        assert key is not None, "produce_logged writes keyed records only"
        while True:
            try:
                if partitions is None:
                    producer.produce(topic, key=key, value=value, on_delivery=report)
                else:
                    producer.produce(
                        topic, key=key, value=value, partition=partitions(key), on_delivery=report
                    )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} records were not delivered"
    assert not errors, f"delivery failed: {errors[:3]}"
    return sorted(delivered, key=lambda record: (record.partition, record.offset))


def end_of(delivered: Iterable[Delivered]) -> Position:
    """The next offset of every partition the records were written to."""
    ends: dict[int, int] = {}
    for record in delivered:
        ends[record.partition] = max(ends.get(record.partition, 0), record.offset + 1)
    return Position(ends)


def model_as_of(delivered: Iterable[Delivered], as_of: Mapping[int, int]) -> dict[bytes, bytes]:
    """Each key's value as of a position: its last record below the position on its partition
    (valid while every key is written to one partition)."""
    model: dict[bytes, bytes] = {}
    for record in sorted(delivered, key=lambda record: (record.partition, record.offset)):
        if record.offset >= as_of.get(record.partition, 0):
            continue
        if record.value is None:
            model.pop(record.key, None)
        else:
            model[record.key] = record.value
    return model


def wait_until(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.02) -> None:
    """Poll ``condition`` until it holds; fail the test naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class StoreProcess:
    """A store running in a child process (``tests.store.store_process``), in its own process group.

    Its status lines are collected on a thread; :meth:`wait_for` waits for a line matching a
    condition, :meth:`kill` ends the whole group with SIGKILL (as a crashed container would).
    """

    def __init__(self, settings: dict[str, Any]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.store.store_process", json.dumps(settings)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        self.lines: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            with self._changed:
                self.lines.append(json.loads(raw))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, condition: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        """The first status line (from now on, or already seen) that satisfies ``condition``."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:
                for line in self.lines[seen:]:
                    if condition(line):
                        return line
                seen = len(self.lines)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.process.poll() is not None and not self._reader.is_alive()):
                    last = self.lines[-1] if self.lines else None
                    raise AssertionError(
                        f"the store process (exit code {self.process.poll()}) never reported the"
                        f" awaited status in {timeout} s; last: {last}"
                    )
                self._changed.wait(min(remaining, 0.5))

    def kill(self) -> None:
        """SIGKILL the child and everything it started (its SST worker included)."""
        # A group outlives its leader while members live, so its id is never reused meanwhile.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self._reader.join(timeout=30)

    def stop(self) -> int:
        """Ask the child to stop the store cleanly; its exit code."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            return self.process.wait(timeout=60)
        finally:
            self.kill()
