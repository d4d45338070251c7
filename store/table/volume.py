"""The volume under a store's database: its size, its free space, and what a refused write means."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import rocksdict

from store.exceptions import (
    StoreCorruptWriteError,
    StoreFullError,
    StoreIOError,
    StoreWriteError,
    StoreWriterClosedError,
)
from store.table.corruption import named_file

# What RocksDB reports when the volume, a quota or a file size limit refuses a write: the store's
# files are fine, so opening must wait for space rather than rebuild.
_SPACE_ERRORS = ("no space left on device", "file too large", "disk quota exceeded")


def is_space_error(error: Exception | str) -> bool:
    """Whether RocksDB's (or the OS's) message says the volume, a quota or a file size limit
    refused a write."""
    text = str(error).lower()
    return any(marker in text for marker in _SPACE_ERRORS)


def write_error(path: Path, exc: Exception, closed: bool = False) -> StoreWriteError:
    """The error to raise for RocksDB's refusal ``exc`` to write the database at ``path``, by kind,
    saying what to do. ``closed``: the engine was closed already.

    RocksDB names the kind at the start of its message (``IO error: No space left on device``,
    ``Corruption: block checksum mismatch``); rocksdict raises ``DbClosedError`` once closed.
    """
    text = str(exc)
    kind = text.lower()
    if closed or isinstance(exc, rocksdict.DbClosedError):
        return StoreWriterClosedError(
            f"the store at {path} was closed while being written ({text or type(exc).__name__}); nothing"
            " to do: the store is stopping, or reopening its copy"
        )
    if is_space_error(exc):
        return StoreFullError(
            f"cannot write the store at {path} ({text}); free space on its volume (or grow it):"
            " the store resumes by itself once it can write again"
        )
    if kind.startswith("corruption"):
        # A flush or compaction read a corrupt file, and RocksDB refuses writes from then on: the
        # copy is corrupt (not the volume full), and the store rebuilds it from the topic.
        return StoreCorruptWriteError(
            f"RocksDB refuses writes to the store at {path}: its background work found a corrupt file"
            f" ({text}); the store rebuilds its copy from the topic. If this recurs, check the volume"
            " (the kernel log names failing devices)",
            file=named_file(text),
            engine_message=text,
        )
    if kind.startswith("io error"):
        return StoreIOError(
            f"cannot write the store at {path}: an I/O error ({text}); check its volume (the kernel log"
            " names failing devices): the store retries by itself"
        )
    return StoreWriteError(
        f"cannot write the store at {path} ({text}); the store retries by itself. If this recurs,"
        " report it with this message"
    )


# The smallest write buffer a small volume gets (see ``write_buffer_for``).
_MIN_WRITE_BUFFER_BYTES = 1024 * 1024


def write_buffer_for(path: Path, configured: int) -> int:
    """The write buffer (memtable) size of the database at ``path``: ``configured``, but at most a
    quarter of its volume. After a full volume refused a flush, RocksDB resumes writing by itself
    only once a write buffer is free; on a volume not much larger than one it never would."""
    directory = path
    while not directory.exists() and directory != directory.parent:
        directory = directory.parent
    try:
        stats = os.statvfs(directory)
    except OSError:
        return configured
    return min(configured, max(_MIN_WRITE_BUFFER_BYTES, stats.f_blocks * stats.f_frsize // 4))


def directory_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += (Path(root) / name).stat().st_size
            except FileNotFoundError:  # compaction removed it while we walked
                continue
    return total


def free_bytes(directory: Path) -> int:
    """Bytes free for an unprivileged writer on the volume of ``directory`` (0 if unknown)."""
    try:
        stats = os.statvfs(directory)
    except OSError:
        return 0
    return stats.f_bavail * stats.f_frsize


def can_write(directory: Path, size: int) -> bool:
    """Whether ``size`` bytes can be written (and synced) under ``directory`` now."""
    probe = directory / ".space-probe"
    try:
        with open(probe, "wb") as file:
            chunk = bytes(min(size, 1 << 20))
            for _ in range(0, size, len(chunk)):
                file.write(chunk)
            file.flush()
            os.fsync(file.fileno())
        return True
    except OSError:
        return False
    finally:
        probe.unlink(missing_ok=True)


def destroy(path: Path) -> None:
    """Remove a database directory entirely."""
    shutil.rmtree(path, ignore_errors=True)
