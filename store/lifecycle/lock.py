"""One process per store directory: an advisory lock file next to the database."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from store.exceptions import StoreLockedError


class DirectoryLock:
    """An exclusive, non-blocking ``flock`` on ``<store dir>/statestore.lock``.

    The kernel releases it when the holder dies, so a ``kill -9`` never leaves a stale lock.
    """

    def __init__(self, store_name: str, directory: Path) -> None:
        self._name = store_name
        self._path = directory / "statestore.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise StoreLockedError(
                f'store "{self._name}" at {self._path.parent} is locked by another process or store;'
                " give each replica its own state_dir"
            ) from exc
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
