"""Bootstrap bulk loading: records sorted in bulk and written as SST files that RocksDB ingests.

A WriteBatch loop is bound by per-call overhead in the binding; an SST file is written in key
order with no memtable, compaction or lock work, and ingested in one call. Within a chunk the
last record per key wins; across chunks, later ingested files win. Tombstones become deletes
in the file, so they also remove keys written by earlier chunks.

Sorting and writing a chunk runs in a worker process, overlapped with consuming the next chunk
(both are bound by the interpreter, so threads would not overlap). Chunks are ingested strictly
in order, and a chunk's offsets are recorded only after its file is ingested. Re-ingesting a
chunk after a crash (its offsets had not been persisted) is harmless: replaying the same records
from the same offsets ends in the same table.
"""

from __future__ import annotations

import collections
import itertools
import os
import pickle
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import rocksdict


def sorted_last_per_key(
    keys: Sequence[bytes], values: Sequence[bytes | None]
) -> tuple[list[bytes], list[bytes | None]]:
    """Keys in byte order, each once, with the value of its last occurrence (None: tombstone)."""
    last = dict(zip(keys, values, strict=True))
    ordered = sorted(last)
    return ordered, [last[key] for key in ordered]


def write_sst(path: Path, keys: Sequence[bytes], values: Sequence[bytes | None]) -> Path | None:
    """Write one chunk to the SST file ``path``; ``None`` (and no file) if the chunk is empty."""
    sorted_keys, sorted_values = sorted_last_per_key(keys, values)
    if not sorted_keys:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = rocksdict.SstFileWriter(rocksdict.Options(raw_mode=True))
    writer.open(str(path))
    for key, value in zip(sorted_keys, sorted_values, strict=True):
        if value is None:
            del writer[key]
        else:
            writer[key] = value
    writer.finish()
    return path


Ingest = Callable[[Path | None, dict[int, int], int], None]


class BulkLoadError(RuntimeError):
    """The SST worker process failed; the materializer retries the session."""


class BulkLoader:
    """Builds SST files for consecutive chunks in a worker process and ingests them in order.

    ``submit`` hands a chunk over and returns at once, unless ``max_in_flight`` chunks are
    already being built, in which case it first ingests the oldest. ``drain`` ingests all.
    """

    def __init__(self, directory: Path, ingest: Ingest, max_in_flight: int = 2) -> None:
        self._directory = directory
        self._ingest = ingest
        self._max_in_flight = max_in_flight
        self._numbers = itertools.count()
        self._pending: collections.deque[tuple[dict[int, int], int]] = collections.deque()
        self._worker = subprocess.Popen(
            [sys.executable, "-m", "store.sst_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
        # Writing a chunk into the pipe blocks until the worker reads it; a feeder thread keeps
        # that wait off the consuming thread.
        self._outbox: queue.Queue[bytes | None] = queue.Queue()
        self._feeder = threading.Thread(target=self._feed, name="sst-feeder", daemon=True)
        self._feeder.start()

    def submit(self, keys: list[bytes], values: list[bytes | None], offsets: dict[int, int]) -> None:
        while len(self._pending) >= self._max_in_flight:
            self._ingest_oldest()
        # Unique per process: a worker orphaned by a crashed store may still be finishing a file.
        path = self._directory / f"chunk-{os.getpid()}-{next(self._numbers):08d}.sst"
        self._outbox.put(pickle.dumps((str(path), keys, values), protocol=pickle.HIGHEST_PROTOCOL))
        self._pending.append((dict(offsets), len(keys)))

    def drain(self) -> None:
        while self._pending:
            self._ingest_oldest()

    def close(self) -> None:
        """Drop chunks not yet ingested (their offsets were never recorded) and stop the worker."""
        self._pending.clear()
        self._outbox.put(None)
        self._feeder.join(timeout=30)
        if self._worker.poll() is None:
            self._worker.kill()
        self._worker.wait(timeout=30)
        for stream in (self._worker.stdin, self._worker.stdout):
            if stream is not None:
                stream.close()

    def _feed(self) -> None:
        stdin = self._worker.stdin
        assert stdin is not None
        while (payload := self._outbox.get()) is not None:
            try:
                stdin.write(payload)
                stdin.flush()
            except (BrokenPipeError, ValueError):
                return

    def _ingest_oldest(self) -> None:
        offsets, count = self._pending.popleft()
        stdout = self._worker.stdout
        assert stdout is not None
        try:
            answer = pickle.load(stdout)
        except EOFError as exc:
            raise BulkLoadError(f"the SST worker exited with code {self._worker.poll()}") from exc
        if isinstance(answer, str):
            raise BulkLoadError(f"the SST worker failed: {answer}")
        self._ingest(answer, offsets, count)
