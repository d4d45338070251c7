"""Bootstrap bulk restore: partitions consumed in worker processes, written as SST files, ingested.

A WriteBatch loop is bound by per-call overhead in the binding; an SST file is written in key
order with no memtable, compaction or lock work, and ingested in one call. Consuming a record
(confluent-kafka builds a message object for each) costs about as much as sorting and writing
it, and both are bound by the interpreter, so one process cannot overlap them: each worker
process consumes its own share of the partitions and writes its own SST files, and the store's
process only ingests them. Splitting by partition keeps every key's records in one worker, in
order.

Within a chunk the last record per key wins; a worker's files are ingested in the order it wrote
them, so later files win. Tombstones become deletes in the file, so they also remove keys written
by earlier chunks. A chunk's offsets are recorded only after its file is ingested. Re-ingesting a
chunk after a crash (its offsets had not been persisted) is harmless: replaying the same records
from the same offsets ends in the same table. See ``store/kafka/restore_worker.py`` for the worker.

:class:`BulkRestore` runs the worker processes and reads their events (``store.kafka.batch``);
:class:`BulkPhase` is the materializer's side of one bulk restore: it ingests each chunk into the
copy being written and moves each partition's catch-up.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from confluent_kafka import OFFSET_BEGINNING

from store.exceptions import StoreClosedError, StoreFullError, StoreWriteError
from store.formats import ValueCodec
from store.kafka.batch import KafkaErrorReport, Placer
from store.kafka.catchup import CatchUp
from store.kafka.children import ChildProcess
from store.kafka.client import RebuildRequired, consumer_config
from store.kafka.frames import ChunkWritten, WorkerCaughtUp, WorkerFailed, WorkerLog, read_frame
from store.lifecycle.config import StoreConfig
from store.lifecycle.gc_pacing import fewer_collections
from store.lifecycle.reporter import Reporter
from store.lifecycle.timing import Every
from store.lifecycle.writer import TableWriter, check_written_copy
from store.state import RestoreMode
from store.table.volume import is_space_error
from store.tuning import ConsumerTuning, RestoreTuning

_WORKER_MODULE = "store.kafka.restore_worker"


class BulkLoadError(RuntimeError):
    """A restore worker process failed; the materializer retries the session."""


class BulkVolumeFullError(StoreFullError):
    """The volume had no room for a bulk restore's files. RocksDB may still take writes (the
    files are written beside it), so the store restores record by record from then on: those
    writes pause on a full volume as any write does, and resume by themselves."""


RestoreEvent = ChunkWritten | KafkaErrorReport | WorkerLog | WorkerCaughtUp


def split_partitions(remaining: Mapping[int, int], workers: int) -> list[list[int]]:
    """Partitions shared out so that each worker has about as many records left to read.

    Largest first, each to the worker with the fewest records so far. Partitions with nothing
    left still go to a worker (its fetches tell their true end), but never make one on their own.
    """
    busy = sorted((p for p, n in remaining.items() if n > 0), key=lambda p: (-remaining[p], p))
    idle = sorted(p for p, n in remaining.items() if n <= 0)
    count = max(1, min(workers, len(busy)))
    shares: list[list[int]] = [[] for _ in range(count)]
    loads = [0] * count
    for partition in busy + idle:
        lightest = min(range(count), key=lambda w: (loads[w], len(shares[w])))
        shares[lightest].append(partition)
        loads[lightest] += max(0, remaining[partition])
    return [sorted(share) for share in shares if share]


class BulkRestore:
    """Worker processes restoring ``starts``' partitions of ``topic``, read as a stream of events.

    ``starts`` maps each partition to the offset to read from (or ``OFFSET_BEGINNING``),
    ``next_offsets`` to that offset as a number (the partition's first offset where ``starts``
    says ``OFFSET_BEGINNING``), ``remaining`` to about how many records are left in it. Events
    of one worker come in the order it sent them. ``close`` stops every worker and removes the
    files not ingested.
    """

    def __init__(
        self,
        directory: Path,
        consumer_config: Mapping[str, Any],
        topic: str,
        starts: Mapping[int, int],
        next_offsets: Mapping[int, int],
        remaining: Mapping[int, int],
        restore: RestoreTuning,
        consumer: ConsumerTuning,
        placement: tuple[Placer, int] | None = None,
        json_values: bool = False,
        with_times: bool = False,
        value_codec: ValueCodec | None = None,
    ) -> None:
        """``placement``: the producers' partitioner and the topic's partition count, for workers
        to check a sample of each chunk's records against (``None``: no check); ``json_values``:
        the workers check each value kept as JSON (``store.json_values``); ``with_times``: chunks
        report each partition's newest record timestamp (stores keeping history); ``value_codec``:
        the store's codec, the workers decode each value kept with a copy of it
        (``ValueCodec.worker_codec``), made once their process is starting: caching its schemas
        (a registry call on a bootstrap from nothing) overlaps that process's imports."""
        self._directory = directory
        self._events: queue.Queue[RestoreEvent | BulkLoadError | BulkVolumeFullError | RebuildRequired] = (
            queue.Queue()
        )
        shares = split_partitions(remaining, restore.bulk_load_workers)
        config = dict(consumer_config)
        # Each worker's consumer buffers its own fetches: together they stay within the one limit.
        config["queued.max.messages.kbytes"] = max(
            32 * 1024, int(config.get("queued.max.messages.kbytes", 65536)) // len(shares)
        )
        jobs: list[dict[str, Any]] = [
            {
                "consumer_config": config,
                "topic": topic,
                "starts": {p: starts[p] for p in share},
                "next_offsets": {p: next_offsets[p] for p in share},
                "chunk_records": restore.bulk_load_chunk_records,
                "poll_max_records": consumer.poll_max_records,
                "poll_timeout_seconds": consumer.poll_timeout_seconds,
                "gc_threshold": restore.gc_threshold,
                "placement": placement,
                "with_times": with_times,
                "directory": str(directory),
                "json_values": json_values,
                "value_codec": None,
                # Unique per store process: a worker orphaned by a crashed store may still be
                # finishing a file.
                "file_prefix": f"chunk-{os.getpid()}-{number}",
            }
            for number, share in enumerate(shares)
        ]
        self.workers = len(jobs)
        self._caught_up = 0  # workers that reported catching up (set by the reading thread)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if is_space_error(exc):
                raise _volume_full(directory, str(exc)) from exc
            raise BulkLoadError(f"cannot create the bulk-load directory {directory}: {exc}") from exc
        self._process = ChildProcess(_WORKER_MODULE)
        try:
            if value_codec is not None:
                copy = value_codec.worker_codec()
                for job in jobs:
                    job["value_codec"] = copy
            # The jobs go through the pipe, never the command line: they hold credentials.
            pickle.dump(jobs, self._process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self._process.stdin.close()
        except OSError as exc:
            self.close()
            raise BulkLoadError(f"the restore workers exited with code {self._process.poll()}") from exc
        except BaseException:
            self.close()
            raise
        threading.Thread(
            target=self._read, args=(self._process.stdout,), name="restore-workers", daemon=True
        ).start()

    def next_event(self, timeout: float) -> RestoreEvent | None:
        """The next event of any worker, or ``None`` if none came within ``timeout`` seconds.

        Raises ``BulkLoadError`` when a worker failed or exited without catching up, and
        ``RebuildRequired`` when what a worker read cannot be kept current (a value shape changed).
        """
        try:
            event = self._events.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(event, BulkLoadError | BulkVolumeFullError | RebuildRequired):
            raise event
        return event

    def close(self) -> None:
        """Stop the workers and remove the files of chunks not ingested (their offsets were never
        recorded). Workers that all caught up are only closing their consumers: they end, and are
        reaped, in the background, so the store does not wait for them to become READY."""
        if self._caught_up >= self.workers:
            threading.Thread(target=self._end, name="restore-workers-end", daemon=True).start()
        else:
            self._end(stop=True)
        # Every worker has written its last file by now: it caught up, or it was stopped.
        for leftover in self._directory.glob(f"chunk-{os.getpid()}-*"):
            leftover.unlink(missing_ok=True)

    def _end(self, stop: bool = False) -> None:
        # On SIGTERM the worker script kills its workers and reaps them.
        self._process.end(stop=stop)

    def _read(self, stream: IO[bytes]) -> None:
        while self._caught_up < self.workers:
            try:
                worker, event = read_frame(stream)
            except (OSError, ValueError, EOFError) as exc:
                code = self._process.poll()
                self._events.put(
                    BulkLoadError(f"the restore workers exited (code {code}) before catching up ({exc})")
                )
                return
            if isinstance(event, WorkerFailed):
                self._events.put(self._failure(worker, event))
                return
            if isinstance(event, WorkerCaughtUp):
                self._caught_up += 1
            self._events.put(event)

    def _failure(
        self, worker: int, event: WorkerFailed
    ) -> BulkLoadError | BulkVolumeFullError | RebuildRequired:
        if event.rebuild:
            return RebuildRequired(f"restore worker {worker}: {event.text}")
        if is_space_error(event.text):
            return _volume_full(self._directory, event.text)
        return BulkLoadError(f"restore worker {worker} failed: {event.text}")


def _volume_full(directory: Path, reason: str) -> BulkVolumeFullError:
    return BulkVolumeFullError(
        f"the bulk restore cannot write its files in {directory} ({reason}); free space on its"
        " volume (or grow it): the store restores record by record meanwhile, pausing while the"
        " volume is full, and resumes by itself"
    )


class BulkPhase:
    """A session's bulk restore: workers read every partition from the written copy's position
    until caught up (or a stop), and each chunk is ingested with its offsets as it comes."""

    def __init__(
        self,
        config: StoreConfig,
        writer: TableWriter,
        catch_up: CatchUp,
        first_offsets: Mapping[int, int],
        reporter: Reporter,
        stop: threading.Event,
    ) -> None:
        self._config = config
        self._writer = writer
        self._catch_up = catch_up
        self._first_offsets = first_offsets
        self._reporter = reporter
        self._progress = reporter.progress
        self._stop = stop

    def run(self) -> None:
        config, tuning, writer, progress = self._config, self._config.tuning, self._writer, self._progress
        position = writer.position
        partitions = sorted(self._catch_up.partitions)
        next_offsets = {p: position.get(p, self._first_offsets.get(p, 0)) for p in partitions}
        remaining = {p: self._catch_up.partitions[p].target - next_offsets[p] for p in partitions}
        self._reporter.log.info(
            'store "%s": bulk restore of %d records in up to %d worker processes',
            config.name,
            sum(max(0, n) for n in remaining.values()),
            tuning.restore.bulk_load_workers,
        )
        check = self._reporter.placement
        placer, count = config.sharding.placer, check.topic_partitions
        with fewer_collections(tuning.restore.gc_threshold):
            restore = BulkRestore(
                config.path / "bulk",
                consumer_config(config.name, config.kafka),
                config.topic,
                {p: position.get(p, OFFSET_BEGINNING) for p in partitions},
                next_offsets,
                remaining,
                tuning.restore,
                tuning.consumer,
                (placer, count) if placer is not None and count is not None else None,
                json_values=config.json_values,
                with_times=writer.keeps_history,
                value_codec=config.value_codec,
            )
            try:
                progress.restore_mode = RestoreMode.BULK
                writer.engine.defer_compactions(True)
                self._take_events(restore)
            finally:
                progress.restore_mode = RestoreMode.RECORDS
                restore.close()
                # A closed copy compacts once reopened.
                with contextlib.suppress(StoreWriteError, StoreClosedError):
                    writer.engine.defer_compactions(False)

    def _take_events(self, restore: BulkRestore) -> None:
        running = restore.workers
        progress_log = Every(self._config.tuning.restore.progress_log_interval_seconds)
        while running and not self._stop.is_set():
            check_written_copy(self._writer)
            event = restore.next_event(timeout=self._config.tuning.consumer.poll_timeout_seconds)
            if event is not None:
                running -= self._take(event)
            now = time.monotonic()
            if progress_log.due(now):
                self._reporter.restore_progress(self._writer.position)

    def _take(self, event: RestoreEvent) -> int:
        """Take one worker event; returns 1 when a worker caught up (and exits), else 0."""
        progress, catch_up = self._progress, self._catch_up
        if isinstance(event, ChunkWritten):
            received_at = time.monotonic()
            self._writer.ingest(event.sst_path, event.next_offsets, event.newest_times)
            catch_up.read(event.next_offsets)
            progress.count(event.records)
            progress.last_contact = received_at
            progress.note_healthy(received_at)
            self._reporter.null_keys(event.null_keys)
            self._reporter.placement.take(event.placement)
            if event.undecodable and self._config.value_codec is not None:
                self._config.value_codec.count_undecodable(event.undecodable, event.undecodable_example)
        elif isinstance(event, WorkerLog):
            self._reporter.kafka_log.line(event.level, event.facility, event.text)
        elif isinstance(event, KafkaErrorReport):
            if event.partition is None:
                self._reporter.client_error(event)
            else:
                self._reporter.fetch_events([event], catch_up)
        else:
            catch_up.read(event.next_offsets)
            catch_up.ended(event.next_offsets)
            progress.last_contact = time.monotonic()
            return 1
        return 0
