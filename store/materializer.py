"""The materializer: one thread that keeps a store equal to its topic.

It holds a manually assigned consumer on every partition, turns each polled batch into one atomic
write (records, tombstones and the next offset of every partition touched), and decides when the
store is READY: once every partition has reported end-of-partition, i.e. reached the high
watermark that the fetch responses carry. The ListOffsets answer sampled at start is only a lower
bound for the restore target (some brokers answer it too low). A store with many records to
restore first reads them in worker processes (``store.bulkload``), then goes on from where they
stopped.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from store.bulkload import BulkRestore, ChunkIngestable, WorkerCaughtUp, WorkerKafkaError
from store.config import StoreConfig
from store.engine import can_write
from store.exceptions import StoreReadError, StoreWriteError
from store.gc_pacing import fewer_collections
from store.kafka import (
    OUT_OF_RANGE_CODES,
    TOPIC_GONE_CODES,
    RebuildRequired,
    TopicInfo,
    TransientSourceError,
    consumer_config,
    describe_topic,
    new_admin,
    new_consumer,
)
from store.position import Position
from store.restore_slots import RestoreSlots
from store.state import RestoreMode, StoreState

logger = logging.getLogger(__name__)

# The most a check for free space writes (a memtable flush needs about a write buffer).
_SPACE_PROBE_MAX_BYTES = 8 * 1024 * 1024


class MaterializerTarget(Protocol):
    """What the materializer needs from the store it feeds."""

    @property
    def state(self) -> StoreState: ...

    def set_state(self, state: StoreState) -> None: ...

    def stored_position(self) -> Position: ...

    def topic_identity(self) -> tuple[str | None, str | None]: ...

    def set_topic_identity(self, topic: str, topic_id: str | None) -> None: ...

    @property
    def keeps_history(self) -> bool: ...

    def apply(
        self,
        keys: list[bytes],
        values: list[bytes | None],
        offsets: dict[int, int],
        metas: list[tuple[int, int, int]] | None = None,
    ) -> None: ...

    def maintain_history(self) -> None: ...

    def ingest(self, sst_path: Path | None, offsets: dict[int, int]) -> None: ...

    def defer_compactions(self, deferred: bool) -> None: ...

    def rebuild(self, reason: str) -> None: ...

    def report_corruption(self, error: StoreReadError) -> None:
        """A read of the written copy on the materializer's thread failed (corruption, I/O error)."""
        ...

    def reopen(self) -> None: ...

    def ensure_writable(self) -> None:
        """Open the written copy if a full volume kept it closed (``StoreWriteError`` if it still cannot)."""
        ...

    def checkpoint(self) -> None: ...

    def build_indexes(self, stop: threading.Event) -> None: ...

    def begin_history(self, partitions: int) -> None: ...


class Backoff:
    """Exponential backoff with full jitter, waiting on an event so a stop interrupts it."""

    def __init__(self, initial: float, maximum: float) -> None:
        self._initial = initial
        self._maximum = maximum
        self._attempt = 0

    def reset(self) -> None:
        self._attempt = 0

    def wait(self, stop: threading.Event) -> None:
        ceiling = min(self._maximum, self._initial * (2**self._attempt))
        self._attempt += 1
        stop.wait(random.uniform(ceiling / 2, ceiling))


class Progress:
    """Counters shared with readers of the store's status (updated by the materializer only)."""

    def __init__(self) -> None:
        self.end_offsets: dict[int, int] = {}
        self.restore_target: dict[int, int] = {}
        self.restore_started_at = time.monotonic()
        self.restore_applied = 0
        self.applied_total = 0
        self.null_keys = 0
        self.restore_mode = RestoreMode.RECORDS
        self.last_error: str | None = None
        self.last_error_at = 0.0
        self.last_contact: float | None = None
        self._rate_window: list[tuple[float, int]] = []

    def note_error(self, message: str) -> None:
        """Record the problem the store has now (shown in its status until it goes away)."""
        self.last_error = message
        self.last_error_at = time.monotonic()

    def note_healthy(self, since: float) -> None:
        """Work begun at ``since`` went through: an error noted before then no longer holds."""
        if self.last_error is not None and self.last_error_at < since:
            self.last_error = None

    def begin_restore(self, target: dict[int, int]) -> None:
        self.restore_target = dict(target)
        self.restore_started_at = time.monotonic()
        self.restore_applied = 0
        self._rate_window = [(self.restore_started_at, self.applied_total)]

    def count(self, applied: int) -> None:
        self.applied_total += applied
        self.restore_applied += applied
        now = time.monotonic()
        window = self._rate_window
        window.append((now, self.applied_total))
        while len(window) > 2 and now - window[0][0] > 10:
            window.pop(0)

    def rate(self) -> float:
        window = self._rate_window
        if len(window) < 2:
            return 0.0
        (t0, n0), (t1, n1) = window[0], window[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0

    def remaining(self, position: Position) -> int:
        return sum(max(0, target - position.get(p, 0)) for p, target in self.restore_target.items())


class _Chunk:
    """One poll's records: keys, values (None: tombstone), next offsets."""

    __slots__ = ("keys", "metas", "null_keys", "offsets", "values")

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.values: list[bytes | None] = []
        self.offsets: dict[int, int] = {}
        self.metas: list[tuple[int, int, int]] = []  # (partition, offset, timestamp), history only
        self.null_keys = 0  # records skipped by the last poll because their key was null


def _collect(messages: list[Any], chunk: _Chunk, with_metas: bool) -> list[Any]:
    """Append one poll's records to ``chunk``; return the error events (end of partition, ...).

    This is the hottest loop of a bootstrap: mapping an unbound method over the messages costs
    one C call per message and field, with no bytecode run per message.
    """
    # Truth values only: a KafkaError compared with None raises.
    if any(map(Message.error, messages)):
        events = [message for message in messages if message.error() is not None]
        records = [message for message in messages if message.error() is None]
    else:
        events = []
        records = messages
    if not records:
        return events
    keys: list[bytes | None] = list(map(Message.key, records))
    values = list(map(Message.value, records))
    metas = (
        [(message.partition(), message.offset(), message.timestamp()[1]) for message in records]
        if with_metas
        else None
    )
    # The last record of each partition carries its next offset. A poll mostly holds one or two
    # partitions' runs, so a scan back until every partition is seen would often walk the whole
    # poll in bytecode; searching a reversed list of partitions stays in C.
    backwards = list(map(Message.partition, reversed(records)))
    offsets: dict[int, int] = {}
    for partition in set(backwards):
        if partition is not None:  # a record always has one; the type allows None
            offsets[partition] = records[len(records) - 1 - backwards.index(partition)].offset() + 1
    for partition, next_offset in offsets.items():
        if next_offset > chunk.offsets.get(partition, -1):
            chunk.offsets[partition] = next_offset
    if None in keys:
        kept = [i for i, key in enumerate(keys) if key is not None]
        chunk.null_keys = len(keys) - len(kept)
        keys = [keys[i] for i in kept]
        values = [values[i] for i in kept]
        metas = [metas[i] for i in kept] if metas is not None else None
    chunk.keys.extend(keys)  # type: ignore[arg-type]  # the null keys were dropped above
    chunk.values.extend(values)
    if metas is not None:
        chunk.metas.extend(metas)
    return events


class Materializer:
    """Runs the consume-apply loop on its own thread until ``stop()``; never dies on broker errors."""

    def __init__(
        self,
        config: StoreConfig,
        target: MaterializerTarget,
        position: Callable[[], Position],
        restore_slots: RestoreSlots,
    ) -> None:
        self._config = config
        self._target = target
        self._position = position
        self._tuning = config.tuning
        self._restore_slots = restore_slots
        self.progress = Progress()
        self._stop = threading.Event()
        self._rebuild_reason: str | None = None  # a rebuild asked for by another thread
        self._thread = threading.Thread(target=self._run, name=f"materializer-{config.name}", daemon=True)
        self._log = logging.LoggerAdapter(logger, {"store": config.name})

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def request_rebuild(self, reason: str) -> None:
        """Rebuild from the earliest offsets (callable from any thread): the materializer's thread
        does it before its next batch, so no write is under way on the copy it replaces."""
        self._rebuild_reason = reason

    def _check_rebuild_request(self) -> None:
        reason, self._rebuild_reason = self._rebuild_reason, None
        if reason is not None:
            raise RebuildRequired(reason)

    # -- the loop ---------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = Backoff(self._tuning.retry_backoff_initial_seconds, self._tuning.retry_backoff_max_seconds)
        while not self._stop.is_set():
            try:
                self._check_rebuild_request()
                self._target.ensure_writable()
                self._session(backoff)
            except RebuildRequired as signal:
                self._log.warning(
                    'store "%s": %s; rebuilding from the earliest offsets',
                    self._config.name,
                    signal.reason,
                )
                self.progress.note_error(signal.reason)
                self._target.rebuild(signal.reason)
            except StoreWriteError as exc:
                self._pause_until_writable(exc, backoff)
            except StoreReadError as exc:
                # The store marks the copy corrupt, logs it and asks for the rebuild the next turn does.
                self.progress.note_error(str(exc))
                self._target.report_corruption(exc)
                if self._rebuild_reason is None:  # nothing to rebuild (the store is stopping)
                    backoff.wait(self._stop)
            except TransientSourceError as exc:
                self.progress.note_error(str(exc))
                self._log.warning('store "%s": %s; retrying', self._config.name, exc)
                backoff.wait(self._stop)
            except Exception as exc:
                self.progress.note_error(f"{type(exc).__name__}: {exc}")
                self._log.exception('store "%s": materializer error; retrying', self._config.name)
                backoff.wait(self._stop)

    def _pause_until_writable(self, error: StoreWriteError, backoff: Backoff) -> None:
        """Stop applying until the store's volume takes writes again, then reopen the database.

        Reads go on meanwhile from what was applied. A probe file sized like a memtable flush
        tells when space is back, so a still-full disk is not reopened and refilled in a loop.
        """
        self.progress.note_error(str(error))
        self._log.error(
            'store "%s": %s. Materializing is paused; reads go on at position %s',
            self._config.name,
            error,
            self._position() or "none (nothing is served until the store can open)",
        )
        probe_bytes = min(self._tuning.write_buffer_bytes, _SPACE_PROBE_MAX_BYTES)
        while not self._stop.is_set():
            backoff.wait(self._stop)
            if self._stop.is_set() or not can_write(self._config.path, probe_bytes):
                continue
            try:
                self._target.reopen()
            except StoreWriteError as exc:  # the probe fitted, RocksDB's files did not yet
                self.progress.note_error(str(exc))
                self._log.warning('store "%s": still cannot write: %s', self._config.name, exc)
                continue
            self._log.warning(
                'store "%s": its volume takes writes again; materializing resumes', self._config.name
            )
            return

    def _on_client_error(self, error: KafkaError) -> None:
        self._note_client_error(error.str(), error.fatal())

    def _note_client_error(self, text: str, fatal: bool) -> None:
        self.progress.note_error(f"kafka: {text}")
        if fatal:
            self._log.error('store "%s": fatal Kafka client error: %s', self._config.name, text)
        else:
            self._log.info('store "%s": Kafka client: %s', self._config.name, text)

    def _session(self, backoff: Backoff) -> None:
        """One consumer's life: from validating the stored offsets to a stop or a topology change."""
        config = self._config
        admin = new_admin(config.kafka)
        timeout = 10.0
        info = describe_topic(admin, config.topic, timeout)
        if info is None:
            raise TransientSourceError(
                f'topic "{config.topic}" does not exist; waiting for it (create it, or fix stores[].topic)'
            )
        stored = self._validate_identity(info)
        consumer = new_consumer(config.name, config.kafka, self._on_client_error)
        try:
            starts, lows, targets = self._sample(consumer, info, stored)
            self.progress.end_offsets = dict(targets)
            if self._target.state is not StoreState.READY:
                if self._target.state is not StoreState.REBUILDING:
                    self._target.set_state(StoreState.RESTORING)
                self.progress.begin_restore(targets)
                self._log.info(
                    'store "%s" restoring topic "%s" (%d partitions) from %s towards at least %s',
                    config.name,
                    config.topic,
                    info.partitions,
                    Position(starts) if stored else "the earliest offsets",
                    Position(targets),
                )
            bulk_caught_up: set[int] | None = None  # None: no bulk restore in this session yet
            while not self._stop.is_set():
                if bulk_caught_up is None and self._wants_bulk():
                    if not self._wait_for_bulk_slot():
                        return
                    try:
                        bulk_caught_up = self._bulk_restore(info, lows, targets)
                    finally:
                        self._restore_slots.release()
                    if self._stop.is_set():
                        return
                position = self._position()
                consumer.assign(
                    [
                        TopicPartition(config.topic, p, position.get(p, OFFSET_BEGINNING))
                        for p in range(info.partitions)
                    ]
                )
                backoff.reset()
                if not self._consume(consumer, admin, info, targets, bulk_caught_up):
                    return
        finally:
            consumer.close()

    def _validate_identity(self, info: TopicInfo) -> Position:
        stored = self._target.stored_position()
        stored_topic, stored_id = self._target.topic_identity()
        if stored:
            if stored_topic is not None and stored_topic != info.name:
                raise RebuildRequired(
                    f'the store was built from topic "{stored_topic}", now configured "{info.name}"'
                )
            if stored_id is not None and info.topic_id is not None and stored_id != info.topic_id:
                raise RebuildRequired(
                    f'topic "{info.name}" was deleted and recreated'
                    f" (topic id {stored_id} is now {info.topic_id})"
                )
            if max(stored) >= info.partitions:
                raise RebuildRequired(
                    f'topic "{info.name}" has {info.partitions} partitions but the store has offsets for'
                    f" {max(stored) + 1}"
                )
        if (stored_topic, stored_id) != (info.name, info.topic_id):
            self._target.set_topic_identity(info.name, info.topic_id)
        return stored

    def _sample(
        self, consumer: Consumer, info: TopicInfo, stored: Position
    ) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
        """Stored start offsets, first offsets and (lower bounds of) end offsets per partition;
        checks the stored offsets."""
        starts: dict[int, int] = {}
        lows: dict[int, int] = {}
        targets: dict[int, int] = {}
        for partition in range(info.partitions):
            try:
                low, high = consumer.get_watermark_offsets(TopicPartition(info.name, partition), timeout=10)
            except KafkaException as exc:
                raise TransientSourceError(
                    f"cannot read the offsets of {info.name}[{partition}]: {exc}"
                ) from exc
            if partition in stored:
                next_offset = stored[partition]
                if next_offset < low:
                    raise RebuildRequired(
                        f"partition {partition} starts at offset {low} but the store stopped at {next_offset}"
                        " (retention removed records the store never saw)"
                    )
                starts[partition] = next_offset
            lows[partition] = low
            targets[partition] = max(high, starts.get(partition, 0))
        return starts, lows, targets

    def _wants_bulk(self) -> bool:
        minimum = self._tuning.bulk_load_min_records
        return (
            self._target.state is not StoreState.READY
            and minimum > 0
            and self.progress.remaining(self._position()) >= minimum
        )

    def _wait_for_bulk_slot(self) -> bool:
        """Take a bulk restore slot, waiting while other stores hold them all; ``False`` on a stop."""
        slots = self._restore_slots
        if slots.try_acquire():
            return True
        waiting_since = time.monotonic()
        self.progress.restore_mode = RestoreMode.WAITING
        self._log.info(
            'store "%s": %d records to restore; waiting for another store\'s bulk restore to end'
            " (engine.max_concurrent_bulk_restores: %d at once)",
            self._config.name,
            self.progress.remaining(self._position()),
            slots.limit,
        )
        try:
            if not slots.acquire(self._stop):
                return False
        finally:
            self.progress.restore_mode = RestoreMode.RECORDS
        self._log.info(
            'store "%s": bulk restore slot free after %.1fs of waiting',
            self._config.name,
            time.monotonic() - waiting_since,
        )
        return True

    def _bulk_restore(self, info: TopicInfo, lows: dict[int, int], targets: dict[int, int]) -> set[int]:
        """Restore in worker processes (``store.bulkload``) from the stored position until every
        partition is caught up, or a stop; return the partitions caught up. Each chunk is ingested
        with its offsets as it comes."""
        config, tuning, progress, target = self._config, self._tuning, self.progress, self._target
        position = self._position()
        remaining = {p: targets[p] - position.get(p, lows[p]) for p in range(info.partitions)}
        self._log.info(
            'store "%s": bulk restore of %d records in up to %d worker processes',
            config.name,
            sum(max(0, n) for n in remaining.values()),
            tuning.bulk_load_workers,
        )
        caught_up: set[int] = set()
        next_progress_log = time.monotonic() + tuning.progress_log_interval_seconds
        with fewer_collections(tuning.restore_gc_threshold):
            restore = BulkRestore(
                config.path / "bulk",
                consumer_config(config.name, config.kafka),
                config.topic,
                {p: position.get(p, OFFSET_BEGINNING) for p in range(info.partitions)},
                {p: position.get(p, lows[p]) for p in range(info.partitions)},
                remaining,
                tuning,
            )
            try:
                progress.restore_mode = RestoreMode.BULK
                target.defer_compactions(True)
                running = restore.workers
                while running and not self._stop.is_set():
                    self._check_rebuild_request()
                    event = restore.next_event(timeout=tuning.poll_timeout_seconds)
                    if isinstance(event, ChunkIngestable):
                        received_at = time.monotonic()
                        target.ingest(event.sst_path, event.next_offsets)
                        progress.count(event.records)
                        progress.last_contact = received_at
                        progress.note_healthy(received_at)
                        self._note_null_keys(event.null_keys)
                    elif isinstance(event, WorkerKafkaError):
                        if event.partition is None:
                            self._note_client_error(event.text, event.fatal)
                        else:
                            self._on_fetch_error(
                                event.code, event.text, event.fatal, event.partition, caught_up
                            )
                    elif isinstance(event, WorkerCaughtUp):
                        running -= 1
                        caught_up.update(event.next_offsets)
                        progress.last_contact = time.monotonic()
                    now = time.monotonic()
                    if now >= next_progress_log:
                        next_progress_log = now + tuning.progress_log_interval_seconds
                        self._log_restore_progress()
            finally:
                progress.restore_mode = RestoreMode.RECORDS
                restore.close()
                with contextlib.suppress(StoreWriteError):  # a closed copy compacts once reopened
                    target.defer_compactions(False)
        return caught_up

    def _note_null_keys(self, count: int) -> None:
        if count:
            self.progress.null_keys += count
            self._log.warning(
                'store "%s": skipped %d records with a null key (total %d); a table needs keys',
                self._config.name,
                count,
                self.progress.null_keys,
            )

    def _log_restore_progress(self) -> None:
        progress = self.progress
        self._log.info(
            'store "%s" restoring: %d records applied, %d remaining, %.0f records/s',
            self._config.name,
            progress.restore_applied,
            progress.remaining(self._position()),
            progress.rate(),
        )

    def _consume(
        self,
        consumer: Consumer,
        admin: Any,
        info: TopicInfo,
        targets: dict[int, int],
        bulk_caught_up: set[int] | None,
    ) -> bool:
        """Poll and apply until stopped (``False``), or until the first fetches tell that enough
        records are left for a bulk restore (``True``).

        ``bulk_caught_up``: the partitions a bulk restore just read to their ends, ``None`` if none
        ran in this session (the end offsets sampled before are only lower bounds).
        """
        config, tuning, progress, target = self._config, self._tuning, self.progress, self._target
        topic = config.topic
        partitions = info.partitions
        caught_up: set[int] = set(bulk_caught_up or ())
        consumed: dict[int, int] = {}  # next offset after the last record read, per partition
        refined: set[int] = set()
        restoring = target.state is not StoreState.READY
        # Nothing was served yet: READY comes with every index built.
        build_indexes_first = restoring and (not self._position() or bool(bulk_caught_up))
        next_metadata_check = time.monotonic() + tuning.metadata_check_interval_seconds
        next_progress_log = time.monotonic() + tuning.progress_log_interval_seconds
        next_checkpoint = time.monotonic() + tuning.checkpoint_interval_seconds
        next_history_prune = time.monotonic() + tuning.history_prune_interval_seconds

        pacing = contextlib.ExitStack()
        if restoring:
            pacing.enter_context(fewer_collections(tuning.restore_gc_threshold))

        def finish_restore() -> None:
            nonlocal restoring
            if build_indexes_first:
                target.build_indexes(self._stop)
            target.checkpoint()
            restoring = False
            pacing.close()
            self._become_ready(partitions)
            # An index added to an existing store is built from the READY table, so reads of the
            # store go on meanwhile (that index answers IndexNotReadyError).
            target.build_indexes(self._stop)

        try:
            if restoring and len(caught_up) >= partitions:
                finish_restore()  # a bulk restore read everything: no poll to wait for
            while not self._stop.is_set():
                self._check_rebuild_request()
                polled_at = time.monotonic()
                messages = consumer.consume(tuning.poll_max_records, 0)
                if not messages:
                    # A batch call waits until its batch is full or its timeout passes, which
                    # would add the timeout to every partial batch (a restore's last one, each
                    # one of a trickle); waiting for one message returns as soon as any arrives.
                    messages = consumer.consume(1, tuning.poll_timeout_seconds)
                chunk = _Chunk()
                with_metas = target.keeps_history
                for message in _collect(messages, chunk, with_metas):
                    error = message.error()
                    self._on_fetch_error(
                        error.code(), error.str(), error.fatal(), message.partition(), caught_up
                    )
                consumed.update(chunk.offsets)
                if messages:
                    progress.last_contact = time.monotonic()
                self._note_null_keys(chunk.null_keys)
                if chunk.offsets:
                    target.apply(chunk.keys, chunk.values, chunk.offsets, chunk.metas if with_metas else None)
                    progress.count(len(chunk.keys))
                if messages:
                    # Records (or an end of partition) arrived and were taken: earlier errors are over.
                    progress.note_healthy(polled_at)
                self._refresh_end_offsets(consumer, topic, partitions, targets, refined, consumed, caught_up)
                if restoring and len(caught_up) >= partitions:
                    finish_restore()
                elif restoring and bulk_caught_up is None and self._wants_bulk():
                    return True
                now = time.monotonic()
                if restoring and now >= next_progress_log:
                    next_progress_log = now + tuning.progress_log_interval_seconds
                    self._log_restore_progress()
                if not restoring and now >= next_history_prune:
                    next_history_prune = now + tuning.history_prune_interval_seconds
                    target.maintain_history()
                if not restoring and now >= next_checkpoint:
                    next_checkpoint = now + tuning.checkpoint_interval_seconds
                    target.checkpoint()
                if now >= next_metadata_check:
                    next_metadata_check = now + tuning.metadata_check_interval_seconds
                    partitions = self._check_metadata(consumer, admin, info, partitions, targets)
                    # The broker answered: an idle topic is not a lost broker.
                    progress.last_contact = time.monotonic()
                    progress.note_healthy(now)
        finally:
            pacing.close()
        return False

    def _become_ready(self, partitions: int) -> None:
        progress = self.progress
        elapsed = time.monotonic() - progress.restore_started_at
        self._target.begin_history(partitions)
        self._target.set_state(StoreState.READY)
        self._log.info(
            'store "%s" READY at position %s: %d records applied in %.1fs (%.0f records/s)',
            self._config.name,
            self._position(),
            progress.restore_applied,
            elapsed,
            progress.restore_applied / elapsed if elapsed > 0 else 0.0,
        )

    def _on_fetch_error(
        self, code: int, text: str, fatal: bool, partition: int | None, caught_up: set[int]
    ) -> None:
        if code == KafkaError._PARTITION_EOF:
            if partition is not None:
                caught_up.add(partition)
            self.progress.last_contact = time.monotonic()
            return
        where = f"{self._config.topic}[{partition}]" if partition is not None else "the topic"
        if code in OUT_OF_RANGE_CODES:
            raise RebuildRequired(
                f"the stored offset of {where} is out of range ({text}): the topic was truncated,"
                " recreated, or its retention passed the store"
            )
        if code in TOPIC_GONE_CODES:
            raise TransientSourceError(f"{where} is gone ({text}); waiting for the topic")
        if fatal:
            raise TransientSourceError(f"fatal consumer error on {where}: {text}; recreating the consumer")
        self.progress.note_error(f"kafka: {text}")

    def _refresh_end_offsets(
        self,
        consumer: Consumer,
        topic: str,
        partitions: int,
        targets: dict[int, int],
        refined: set[int],
        consumed: dict[int, int],
        caught_up: set[int],
    ) -> None:
        """Learn the true high watermarks from the last fetch responses (no network round trip).

        A partition whose records were read up to that watermark is caught up at once: its
        end-of-partition event comes only with the answer to a further fetch, which the broker
        holds for up to ``fetch.wait.max.ms`` since it has nothing to return.
        """
        progress = self.progress
        for partition in range(partitions):
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            if high < 0:
                continue
            progress.end_offsets[partition] = high
            if partition not in refined:
                refined.add(partition)
                if high > targets.get(partition, 0):
                    targets[partition] = high
                    progress.restore_target[partition] = max(progress.restore_target.get(partition, 0), high)
            if partition in consumed and consumed[partition] >= high:
                caught_up.add(partition)

    def _check_metadata(
        self, consumer: Consumer, admin: Any, info: TopicInfo, partitions: int, targets: dict[int, int]
    ) -> int:
        """Pick up new partitions; end the session when the topic was deleted or recreated."""
        current = describe_topic(admin, info.name, 10.0)
        if current is None:
            raise TransientSourceError(f'topic "{info.name}" was deleted; waiting for it to come back')
        if info.topic_id is not None and current.topic_id is not None and current.topic_id != info.topic_id:
            raise RebuildRequired(
                f'topic "{info.name}" was deleted and recreated'
                f" (topic id {info.topic_id} is now {current.topic_id})"
            )
        if current.partitions < partitions:
            raise RebuildRequired(
                f'topic "{info.name}" shrank from {partitions} to {current.partitions} partitions'
            )
        if current.partitions > partitions:
            added = [
                TopicPartition(info.name, p, OFFSET_BEGINNING) for p in range(partitions, current.partitions)
            ]
            consumer.incremental_assign(added)
            for tp in added:
                targets[tp.partition] = 0
            self._log.info(
                'store "%s": topic "%s" grew from %d to %d partitions; reading the new ones from the start',
                self._config.name,
                info.name,
                partitions,
                current.partitions,
            )
        return current.partitions
