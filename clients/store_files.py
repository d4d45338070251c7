"""A store read whole, shared by every Python worker of a machine: one Arrow file per planned lookup.

Spark runs a job's tasks side by side in several Python workers of one machine, and each of them
that needs most of a store would read it whole from the service and decode every value
(:mod:`clients.whole_store`). Instead, the first one takes the lookup's file lock, reads the store
and writes what it decoded (keys, values, found, misfit) as an Arrow IPC file, renamed into place
whole; the others wait on the lock and map that file into memory (the pages are shared, nothing is
copied or decoded again). The file is named by the planned lookup (its ``lookup_id``, store,
pinned position, exactness and output type, hashed), so only tasks of the same lookup at the same
pinned position share it; a lookup planned again reads afresh (unless the driver gives it the
same planned read: ``clients.spark.plan_cache``).

Everything here only saves work: a file that cannot be written, read or locked, or that is gone,
makes the task read the store itself. A lock is released by the kernel when its holder dies, and a
file is never changed once renamed into place, so a retried task reads the same answers.

The directory is ``$STATESTORE_LOOKUP_DIR``, else ``statestore-lookups-<uid>`` in the temporary
directory, private to its user (mode 0700; a directory another user owns or can read is not used).
Files are removed once older than ``FILE_TTL``, and the oldest ones whenever the directory's files
pass the ``cache_bytes`` of the lookup writing one.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa

log = logging.getLogger("clients.lookup")

try:
    import fcntl
except ImportError:  # not on Windows: no sharing there, every task reads for itself
    fcntl = None  # type: ignore[assignment]

DIR_VARIABLE = "STATESTORE_LOOKUP_DIR"
"""The environment variable naming the directory of shared store files (default: see module doc)."""

FILE_TTL = 3600.0
"""Seconds a shared store file (or lock, or leftover of a failed write) is kept at most."""

COLUMNS = ("key", "value", "found", "misfit")


def store_columns(value_type: pa.DataType) -> list[tuple[str, pa.DataType]]:
    """The columns of a store read whole, its values of ``value_type``."""
    return list(zip(COLUMNS, (pa.binary(), value_type, pa.bool_(), pa.bool_()), strict=True))


_TOO_LARGE = b"too large"


def share_dir() -> Path | None:
    """The directory of shared store files, created private to this user; ``None`` (logged) when it
    cannot be, or when another user could read or write it."""
    if fcntl is None:
        return None
    named = os.environ.get(DIR_VARIABLE, "").strip()
    path = Path(named) if named else Path(tempfile.gettempdir()) / f"statestore-lookups-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.stat()
    except OSError as exc:
        log.warning("stores read whole are not shared between workers: %s (set %s)", exc, DIR_VARIABLE)
        return None
    if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        log.warning(
            "stores read whole are not shared between workers: %s is not private to this user "
            "(owner and mode 0700 needed; set %s)", path, DIR_VARIABLE,
        )  # fmt: skip
        return None
    return path


def file_name(*identity: object) -> str:
    """The file stem of a planned lookup's store: a hash of what identifies its answers."""
    return hashlib.sha256(repr(identity).encode()).hexdigest()[:40]


class StoreFile:
    """The shared file of one lookup's store: locked while one worker reads it, then only read."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.path = directory / f"{name}.arrow"
        self._lock_path = directory / f"{name}.lock"

    @contextlib.contextmanager
    def claimed(self, wait: bool) -> Iterator[bool]:
        """Hold the file's lock (True), waiting for it when ``wait``; False when another worker holds
        it and not ``wait``, or the lock cannot be taken at all (then nothing is shared)."""
        try:
            descriptor = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            log.warning("cannot lock %s, reading for this worker only: %s", self._lock_path, exc)
            yield False
            return
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except OSError:
                yield False
                return
            yield True
        finally:
            os.close(descriptor)  # releases the lock

    def load(self, columns: Sequence[tuple[str, pa.DataType]]) -> pa.Table | bool | None:
        """The store as a worker wrote it (its ``columns``, names and types, mapped, not copied);
        False when a worker found it too large to read whole; None when there is no usable file."""
        try:
            source = pa.memory_map(str(self.path))
        except FileNotFoundError:
            return None
        except (OSError, pa.ArrowException) as exc:
            log.warning("shared store file %s unusable, reading the store again: %s", self.path, exc)
            return None
        try:
            if source.size() == len(_TOO_LARGE) and source.read() == _TOO_LARGE:
                return False
            source.seek(0)
            table = pa.ipc.open_file(source).read_all()
        except (OSError, pa.ArrowException) as exc:
            log.warning("shared store file %s unusable, reading the store again: %s", self.path, exc)
            return None
        if list(zip(table.schema.names, table.schema.types, strict=True)) != list(columns):
            log.warning("shared store file %s holds other columns, reading the store again", self.path)
            return None
        return table

    def save(self, table: pa.Table | None, max_bytes: int) -> None:
        """Write ``table`` (``None``: too large to read whole) into place whole, then remove files
        past ``FILE_TTL`` and the oldest ones beyond ``max_bytes`` in all. Failing only logs."""
        partial = self.directory / f"{self.path.stem}.{os.getpid()}.partial"
        try:
            if table is None:
                partial.write_bytes(_TOO_LARGE)
            else:
                with pa.OSFile(str(partial), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                    writer.write_table(table)
            os.chmod(partial, 0o600)
            os.replace(partial, self.path)
        except (OSError, pa.ArrowException) as exc:
            log.warning("cannot share the store read whole through %s: %s", self.path, exc)
            with contextlib.suppress(OSError):
                partial.unlink()
            return
        prune(self.directory, max_bytes, keep=self.path)


def prune(directory: Path, max_bytes: int, keep: Path) -> None:
    """Remove files older than ``FILE_TTL``, then the least recently written store files until
    those left hold at most ``max_bytes`` (``keep`` stays). A worker that mapped a removed file
    still reads it; one that had not yet reads the store itself."""
    now = time.time()
    stores: list[tuple[float, int, Path]] = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            try:
                info = entry.stat()
            except OSError:
                continue
            path = Path(entry.path)
            if now - info.st_mtime > FILE_TTL:
                with contextlib.suppress(OSError):
                    path.unlink()
            elif path.suffix == ".arrow" and path != keep:
                stores.append((info.st_mtime, info.st_size, path))
    total = sum(size for _, size, _ in stores) + (keep.stat().st_size if keep.exists() else 0)
    for _, size, path in sorted(stores):
        if total <= max_bytes:
            break
        with contextlib.suppress(OSError):
            path.unlink()
        total -= size
