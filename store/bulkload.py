"""Bootstrap bulk loading: records sorted in bulk and written as SST files that RocksDB ingests.

A WriteBatch loop is bound by per-call overhead in the binding; an SST file is written in key
order with no memtable, compaction or lock work, and ingested in one call. Within a chunk the
last record per key wins; across chunks, later ingested files win. Tombstones become deletes
in the file, so they also remove keys written by earlier chunks.

Sorting and writing a chunk runs in worker processes, overlapped with consuming the next chunks
(both are bound by the interpreter, so threads would not overlap). Two workers take chunks in
turn: with keys in random order a chunk's sort and SST writes cost more than consuming it, and a
second worker uses the CPU the consuming thread leaves idle. A chunk reaches the worker as
a file of marshalled records next to the SST files: marshal writes lists of bytes several times
faster than pickle (no memo), and one file write never waits on the worker, where a pipe needed
a feeder thread contending for the GIL with the consuming one. Chunks are ingested strictly in
order, and a chunk's offsets are recorded only after its file is ingested. Re-ingesting a chunk
after a crash (its offsets had not been persisted) is harmless: replaying the same records from
the same offsets ends in the same table.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import marshal
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from store import sst_worker

Ingest = Callable[[Path | None, dict[int, int], int], None]


class BulkLoadError(RuntimeError):
    """The SST worker process failed; the materializer retries the session."""


class BulkLoader:
    """Builds SST files for consecutive chunks in ``workers`` processes and ingests them in order.

    ``submit`` hands a chunk over and returns at once, unless ``max_in_flight`` chunks are
    already being built, in which case it first ingests the oldest. ``drain`` ingests all.
    """

    def __init__(self, directory: Path, ingest: Ingest, max_in_flight: int = 3, workers: int = 2) -> None:
        self._directory = directory
        self._ingest = ingest
        self._max_in_flight = max(max_in_flight, workers)
        self._numbers = itertools.count()
        # Per chunk in flight, oldest first: its offsets, record count and the worker building it.
        self._pending: collections.deque[tuple[dict[int, int], int, subprocess.Popen[bytes]]] = (
            collections.deque()
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._workers = [
            subprocess.Popen(
                # -P: the script's own directory (this package's) stays off the worker's sys.path.
                [sys.executable, "-P", str(Path(sst_worker.__file__))],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
            for _ in range(max(1, workers))
        ]
        self._next_worker = itertools.cycle(self._workers)

    def submit(self, keys: list[bytes], values: list[bytes | None], offsets: dict[int, int]) -> None:
        while len(self._pending) >= self._max_in_flight:
            self._ingest_oldest()
        # Unique per process: a worker orphaned by a crashed store may still be finishing a file.
        stem = self._directory / f"chunk-{os.getpid()}-{next(self._numbers):08d}"
        records, sst = stem.with_suffix(".records"), stem.with_suffix(".sst")
        try:
            self._directory.mkdir(parents=True, exist_ok=True)
            records.write_bytes(marshal.dumps((keys, values)))
        except OSError as exc:
            raise BulkLoadError(f"cannot write a bulk-load chunk to {records}: {exc}") from exc
        worker = next(self._next_worker)
        stdin = worker.stdin
        assert stdin is not None
        try:
            pickle.dump((str(records), str(sst)), stdin, protocol=pickle.HIGHEST_PROTOCOL)
            stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise BulkLoadError(f"the SST worker exited with code {worker.poll()}") from exc
        self._pending.append((dict(offsets), len(keys), worker))

    def drain(self) -> None:
        while self._pending:
            self._ingest_oldest()

    def close(self) -> None:
        """Drop chunks not yet ingested (their offsets were never recorded) and stop the worker."""
        self._pending.clear()
        for worker in self._workers:
            if worker.poll() is None:
                worker.kill()
            worker.wait(timeout=30)
            for stream in (worker.stdin, worker.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        # Files of chunks never ingested; this process's worker has exited, so none is in use.
        for leftover in self._directory.glob(f"chunk-{os.getpid()}-*"):
            leftover.unlink(missing_ok=True)

    def _ingest_oldest(self) -> None:
        offsets, count, worker = self._pending.popleft()
        stdout = worker.stdout
        assert stdout is not None
        try:
            answer = pickle.load(stdout)
        except EOFError as exc:
            raise BulkLoadError(f"the SST worker exited with code {worker.poll()}") from exc
        if isinstance(answer, str):
            raise BulkLoadError(f"the SST worker failed: {answer}")
        self._ingest(answer, offsets, count)
