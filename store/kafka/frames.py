"""A restore worker's events (a chunk written, a Kafka error, a log line, caught up, failed), and
their frames on the pipe the workers share with the store's process (``store.kafka.restore_worker``).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import select
import struct
from pathlib import Path
from typing import IO, Any

from store.kafka.batch import KafkaErrorReport, Placement


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkWritten:
    """A worker wrote a chunk's SST file (``None``: no record of the chunk had a key), and how many
    of its records it checked against their key's partition, and found misplaced (plain fields:
    frames carry only values both sides can read)."""

    sst_path: Path | None
    next_offsets: dict[int, int]
    records: int
    null_keys: int
    checked: int = 0
    misplaced: int = 0
    misplaced_example: str | None = None
    newest_times: dict[int, int] | None = None  # per partition, when the store keeps history
    undecodable: int = 0  # values the worker's codec stored as undecodable
    undecodable_example: str | None = None  # one's reason

    @property
    def placement(self) -> Placement:
        return Placement(self.checked, self.misplaced, self.misplaced_example)


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerCaughtUp:
    """A worker read all its partitions up to their high watermarks and exits."""

    next_offsets: dict[int, int]


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerLog:
    """A log line of a worker's Kafka client (``level``: a ``logging`` level)."""

    level: int
    facility: str
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerFailed:
    """A worker failed (or exited without a word); it is gone. ``rebuild``: what it read cannot be
    kept current (``store.exceptions.RebuildNeededError``), so the store is rebuilt."""

    text: str
    rebuild: bool = False


WorkerEvent = ChunkWritten | KafkaErrorReport | WorkerLog | WorkerCaughtUp | WorkerFailed
_EVENT_TYPES: dict[str, type[WorkerEvent]] = {
    kind.__name__: kind for kind in (ChunkWritten, KafkaErrorReport, WorkerLog, WorkerCaughtUp, WorkerFailed)
}
_FRAME_HEADER = struct.Struct(">I")  # a frame: its length, then a pickle of (worker, kind, fields)
# Writes to a pipe up to this size are atomic (POSIX guarantees at least 512; Linux has 4096).
_ATOMIC_WRITE_BYTES = getattr(select, "PIPE_BUF", 512)
_LONGEST_TEXT = 200


def write_frame(fd: int, worker: int, event: WorkerEvent) -> None:
    """Write one event of ``worker`` to the file descriptor ``fd`` in a single atomic write, so
    frames of workers sharing one pipe never interleave."""
    fields = [getattr(event, field.name) for field in dataclasses.fields(event)]
    frame = pickle.dumps((worker, type(event).__name__, fields), protocol=pickle.HIGHEST_PROTOCOL)
    if _FRAME_HEADER.size + len(frame) > _ATOMIC_WRITE_BYTES:
        # Only error texts can be long; shortened, the frame fits.
        fields = [_shorten(value) for value in fields]
        frame = pickle.dumps((worker, type(event).__name__, fields), protocol=pickle.HIGHEST_PROTOCOL)
    os.write(fd, _FRAME_HEADER.pack(len(frame)) + frame)


def read_frame(stream: IO[bytes]) -> tuple[int, WorkerEvent]:
    """The next ``(worker, event)`` from ``stream``.

    Raises ``EOFError`` at the end of the stream, ``ValueError`` for a frame that is not one.
    """
    header = stream.read(_FRAME_HEADER.size)
    if len(header) < _FRAME_HEADER.size:
        raise EOFError("the event stream ended")
    (length,) = _FRAME_HEADER.unpack(header)
    try:
        worker, kind, fields = pickle.loads(stream.read(length))
        return worker, _EVENT_TYPES[kind](*fields)
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not an event frame: {exc!r}") from exc


def _shorten(value: Any) -> Any:
    return value[:_LONGEST_TEXT] + "..." if isinstance(value, str) and len(value) > _LONGEST_TEXT else value
