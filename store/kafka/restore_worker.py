"""A bulk restore's worker processes, started as ``python -m store.kafka.restore_worker``.

Each worker consumes its share of a topic's partitions itself, from the offsets it is given until
it has caught up with them, and writes what it read as SST files, one per chunk of records: the
last record of each key in the chunk, in byte order (tombstones as deletes). The parent ingests
the files in the order each worker wrote them, recording each chunk's offsets with it.

The process started reads a pickled list of jobs (dicts, see ``store.lifecycle.bulkload``) from stdin,
imports what the workers need once, and forks one worker per job: importing numpy and
confluent-kafka in every worker cost as much CPU as restoring a few hundred thousand records. It is
single-threaded when it forks (no consumer exists in it yet). Workers write their events
(``store.kafka.frames``: a chunk written, a Kafka error for the parent to decide about, caught up,
failed) to stdout as frames, each in one atomic write, so frames of different workers never
interleave.

A plain child process rather than ``multiprocessing``: it never re-imports the embedding
application's ``__main__``. It imports only ``store.kafka`` and the store's shared leaves (the SST
table format of ``store.table_format``), never the table nor the lifecycle; a store whose values are
decoded at ingest puts a copy of its codec in each job (``store.formats``, loaded with the jobs),
and the worker decodes the values it keeps (the last of each key in a chunk) before writing them.
Workers stop when their parent goes away, which stops when the store's process does.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import rocksdict
from confluent_kafka import Consumer, KafkaError, TopicPartition

from store.exceptions import RebuildNeededError
from store.json_values import checked_json
from store.kafka.batch import KafkaErrorReport, RecordBatch
from store.kafka.calls import cached_high_watermarks, list_offsets, poll
from store.kafka.catchup import CatchUp, PartitionCatchUp
from store.kafka.frames import ChunkWritten, WorkerCaughtUp, WorkerEvent, WorkerFailed, WorkerLog, write_frame
from store.table_format import compression, table_options

# Longer keys are ordered by Python's sort: padding every key of a chunk to the longest would
# cost more than it saves.
_NUMPY_MAX_KEY_BYTES = 64


def _sst_options() -> rocksdict.Options:
    # The database's own compression and table format (store.table_format): ingested files need
    # no rewrite to match, and reads skip them by their filters.
    options = rocksdict.Options(raw_mode=True)
    options.set_compression_type(compression())
    options.set_block_based_table_factory(table_options())
    return options


_SST_OPTIONS = _sst_options()


def last_per_key_order(keys: Sequence[bytes]) -> list[int]:
    """Indexes into ``keys`` of the last occurrence of each distinct key, in byte order of the keys."""
    if not keys:
        return []
    longest = max(map(len, keys))
    if longest > _NUMPY_MAX_KEY_BYTES:
        last = dict(zip(keys, range(len(keys)), strict=True))
        return [last[key] for key in sorted(last)]
    return _numpy_last_per_key_order(keys, longest)


def _numpy_last_per_key_order(keys: Sequence[bytes], longest: int) -> list[int]:
    """Keys as rows of big-endian 64-bit words, zero-padded, sorted with a stable ``lexsort``.

    Zero padding alone would tie a key with the same key plus trailing zero bytes, so keys of
    different lengths add their length as the last tie-breaker: a key that is a prefix of another
    then sorts first, exactly as in byte order.
    """
    count = len(keys)
    words = max(1, (longest + 7) // 8)
    uniform = min(map(len, keys)) == longest
    if uniform and longest == words * 8:
        rows = np.frombuffer(b"".join(keys), dtype=">u8").reshape(count, words)
    else:
        padded = np.zeros((count, words * 8), dtype=np.uint8)
        if longest:
            padded[:, :longest] = np.array(keys, dtype=f"S{longest}").view(np.uint8).reshape(count, longest)
        rows = padded.view(">u8")
    # lexsort's last key is its primary one: the first word, then the next, ..., then the length.
    sort_keys: list[Any] = [rows[:, word].astype(np.uint64) for word in reversed(range(words))]
    lengths = None
    if not uniform:
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=count)
        sort_keys.insert(0, lengths)
    order = np.lexsort(sort_keys)  # stable: the last occurrence of a key ends its run
    ordered = rows[order]
    run_ends = np.ones(count, dtype=bool)
    run_ends[:-1] = (ordered[1:] != ordered[:-1]).any(axis=1)
    if lengths is not None:
        ordered_lengths = lengths[order]
        run_ends[:-1] |= ordered_lengths[1:] != ordered_lengths[:-1]
    kept: list[int] = order[run_ends].tolist()
    return kept


class Decoder(Protocol):
    """A store's value codec, copied into the worker (``store.formats.ValueCodec.worker_codec``)."""

    @property
    def undecodable_count(self) -> int: ...

    @property
    def last_undecodable(self) -> str | None: ...

    def decode(self, values: Sequence[bytes | None]) -> list[bytes | None]: ...


def write_sst(
    path: Path,
    keys: Sequence[bytes],
    values: Sequence[bytes | None],
    json_values: bool = False,
    decoder: Decoder | None = None,
) -> Path | None:
    """Write one chunk to the SST file ``path``; ``None`` (and no file) if the chunk is empty.
    ``json_values``: each value kept is checked as JSON first (``store.json_values``); ``decoder``:
    each value kept is decoded first (``store.formats``)."""
    order = last_per_key_order(keys)
    if not order:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = rocksdict.SstFileWriter(_SST_OPTIONS)
    writer.open(str(path))
    if json_values or decoder is not None:
        kept = [values[i] for i in order]  # only the values kept: a key's older values are never stored
        if json_values:
            kept = checked_json(kept)
        if decoder is not None:
            kept = decoder.decode(kept)
        _write_in_order(writer, keys, order, kept)
    else:
        # Values are taken in key order straight from the chunk, in one pass: each is a cache miss
        # (they lie where they were read), and a list of them walked again cost ~0.3 µs a record.
        for i in order:
            value = values[i]
            if value is None:
                del writer[keys[i]]
            else:
                writer[keys[i]] = value
    writer.finish()
    return path


def _write_in_order(
    writer: rocksdict.SstFileWriter, keys: Sequence[bytes], order: list[int], kept: list[bytes | None]
) -> None:
    """Write ``keys[order[n]]`` with ``kept[n]`` (a delete for ``None``) for each ``n``."""
    for i, value in zip(order, kept, strict=True):
        if value is None:
            del writer[keys[i]]
        else:
            writer[keys[i]] = value


class _Restore:
    """One worker's consume loop: a chunk is written when full, or as soon as it holds as many
    records as are left to read, so chunks halve towards the end and the last one is small."""

    def __init__(self, number: int, job: dict[str, Any], events: int) -> None:
        self.number = number
        self.job = job
        self.events = events
        self.topic: str = job["topic"]
        self.starts: dict[int, int] = job["starts"]
        self.catch_up = CatchUp(
            PartitionCatchUp(partition, next_offset) for partition, next_offset in job["next_offsets"].items()
        )
        self.placement = job.get("placement")  # (the producers' partitioner, the partition count)
        self.decoder: Decoder | None = job.get("value_codec")
        self.batch = self._new_batch()
        self.parent = os.getppid()
        self.chunks = 0
        config = dict(job["consumer_config"])
        config["error_cb"] = self._on_client_error
        config["logger"] = self  # librdkafka's lines go to the store (store.kafka.log), never raw to stderr
        self.consumer = Consumer(config)

    def emit(self, event: WorkerEvent) -> None:
        write_frame(self.events, self.number, event)

    def _on_client_error(self, error: KafkaError) -> None:
        self.emit(KafkaErrorReport.of(error, None))

    def log(self, level: int, _format: str, facility: str, _client: str, text: str, *_rest: Any) -> None:
        """The ``logger`` interface confluent-kafka calls."""
        self.emit(WorkerLog(level, facility, text))

    def run(self) -> None:
        consumer, topic, catch_up = self.consumer, self.topic, self.catch_up
        partitions = sorted(self.starts)
        list_offsets(consumer, topic, partitions, timeout=10)  # looks the leaders up first
        consumer.assign([TopicPartition(topic, p, self.starts[p]) for p in partitions])
        poll_max, poll_timeout = self.job["poll_max_records"], self.job["poll_timeout_seconds"]
        while not catch_up.done:
            if os.getppid() != self.parent:
                return  # the parent is gone: nobody will ingest what this worker writes
            for report in self.batch.add(poll(consumer, poll_max, poll_timeout)):
                if report.end_of_partition:
                    catch_up.ended([report.partition])  # type: ignore[list-item]  # a fetch event has one
                else:
                    self.emit(report)
            catch_up.read(self.batch.next_offsets)
            catch_up.saw_high_watermarks(cached_high_watermarks(consumer, topic, partitions))
            if self._chunk_due(poll_max):
                self._write_chunk()
        self.emit(WorkerCaughtUp(catch_up.next_offsets()))

    def _chunk_due(self, poll_max: int) -> bool:
        """Whether the chunk is full, or holds at least as many records as are left to read."""
        batch, catch_up = self.batch, self.catch_up
        if not batch.next_offsets:
            return False
        size = len(batch)
        unread = catch_up.unread
        return size >= self.job["chunk_records"] or catch_up.done or (size >= poll_max and 0 < unread <= size)

    def _new_batch(self) -> RecordBatch:
        # A store keeping history bounds the times of what it restores (``store.table.timed``).
        with_times = bool(self.job.get("with_times"))
        return RecordBatch.collecting(with_times, with_partitions=self.placement is not None)

    def _write_chunk(self) -> None:
        batch, self.batch = self.batch, self._new_batch()
        path = Path(self.job["directory"]) / f"{self.job['file_prefix']}-{self.chunks:06d}.sst"
        self.chunks += 1
        placement = batch.placement(*self.placement) if self.placement is not None else None
        decoder = self.decoder
        bad_before = decoder.undecodable_count if decoder is not None else 0
        written = write_sst(path, batch.keys, batch.values, bool(self.job.get("json_values")), decoder)
        checked = (placement.checked, placement.misplaced, placement.example) if placement else (0, 0, None)
        bad = decoder.undecodable_count - bad_before if decoder is not None else 0
        self.emit(
            ChunkWritten(
                written,
                dict(batch.next_offsets),
                len(batch),
                batch.null_keys,
                *checked,
                batch.newest_times(),
                bad,
                decoder.last_undecodable if decoder is not None and bad else None,
            )
        )

    def close(self) -> None:
        self.consumer.close()


def run_worker(number: int, job: dict[str, Any], events: int) -> int:
    """One worker's life, in the forked process: restore its partitions, report, return the exit code."""
    if job.get("gc_threshold"):
        gc.set_threshold(max(job["gc_threshold"], gc.get_threshold()[0]), *gc.get_threshold()[1:])
    restore: _Restore | None = None
    try:
        restore = _Restore(number, job, events)
        restore.run()
    except BrokenPipeError:
        return 1  # the parent stopped reading
    except Exception as exc:  # reported to the parent, which retries the session (or rebuilds)
        rebuild = isinstance(exc, RebuildNeededError)
        with contextlib.suppress(OSError):
            write_frame(events, number, WorkerFailed(f"{type(exc).__name__}: {exc}", rebuild))
        return 1
    finally:
        if restore is not None:
            restore.close()
    return 0


class _Stop(Exception):
    """SIGTERM: the parent no longer wants the workers."""


def _on_sigterm(_signal: int, _frame: object) -> None:
    raise _Stop


def main() -> int:
    """Fork a worker per job read from stdin and wait for them. On SIGTERM, or when the parent goes
    away, kill them and reap them: their parent may be a container's init that reaps nobody."""
    jobs: list[dict[str, Any]] = pickle.load(sys.stdin.buffer)
    events = sys.stdout.fileno()
    parent = os.getppid()
    workers: dict[int, int] = {}  # pid -> worker number
    signal.signal(signal.SIGTERM, _on_sigterm)
    with contextlib.suppress(_Stop):
        _fork_and_wait(jobs, events, parent, workers)
    if not workers:
        return 0
    for pid in workers:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for pid in workers:
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
    return 1


def _fork_and_wait(jobs: list[dict[str, Any]], events: int, parent: int, workers: dict[int, int]) -> None:
    # Held back while forking, so that every worker forked is in ``workers`` when it comes.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    for number, job in enumerate(jobs):
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            code = 1
            try:
                code = run_worker(number, job, events)
            finally:
                os._exit(code)  # never back into this loop, whatever happened
        workers[pid] = number
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    while workers:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid:
            number = workers.pop(pid)
            if status != 0:
                # A worker that reported its failure says so again here: the first word counts.
                with contextlib.suppress(OSError):
                    write_frame(events, number, WorkerFailed(f"the worker exited with status {status}"))
            continue
        if os.getppid() != parent:  # the store's process is gone: nobody ingests these files
            return
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
