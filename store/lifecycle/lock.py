"""One process per store directory: an advisory lock file next to the database.

:class:`LockWatch` checks now and then that the lock file is still the one held: a store directory
removed while the store runs (an operator's ``rm -rf``, a volume cleanup) would otherwise leave no
lock, and a second process could take the directory while this one still writes its own files.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from store.exceptions import StoreLockedError

logger = logging.getLogger(__name__)


class DirectoryLock:
    """An exclusive, non-blocking ``flock`` on ``<store dir>/statestore.lock``.

    The kernel releases it when the holder dies, so a ``kill -9`` never leaves a stale lock.
    """

    def __init__(self, store_name: str, directory: Path) -> None:
        self._name = store_name
        self._path = directory / "statestore.lock"
        self._fd: int | None = None
        self._guard = threading.Lock()  # acquire, release and recreate run on different threads

    @property
    def path(self) -> Path:
        return self._path

    def acquire(self) -> None:
        with self._guard:
            self._fd = self._locked()

    def _locked(self) -> int:
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
        return fd

    def release(self) -> None:
        with self._guard:
            fd, self._fd = self._fd, None
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def still_held(self) -> bool:
        """Whether the lock file on disk is the one held (``True`` when none is held)."""
        with self._guard:
            if self._fd is None:
                return True
            try:
                on_disk = os.stat(self._path)
            except FileNotFoundError:
                return False
            held = os.fstat(self._fd)
            return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)

    def recreate(self) -> None:
        """Lock a new lock file in place of one that was removed (the directory made again if
        needed); ``StoreLockedError`` if another process locked it first. Does nothing when no
        lock is held (the store stopped meanwhile)."""
        with self._guard:
            if self._fd is None:
                return
            fd = self._locked()
            os.close(self._fd)
            self._fd = fd


class LockWatch:
    """A thread that checks a held :class:`DirectoryLock` every ``interval`` seconds, recreates it
    when its file was removed, and tells ``on_problem`` what happened (``None`` while all is well)."""

    def __init__(
        self, store_name: str, lock: DirectoryLock, interval: float, on_problem: Callable[[str], None]
    ) -> None:
        self._name = store_name
        self._lock = lock
        self._interval = interval
        self._on_problem = on_problem
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lock-watch-{store_name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            if not self._lock.still_held():
                self._recreate()

    def _recreate(self) -> None:
        directory = self._lock.path.parent
        try:
            self._lock.recreate()
        except (StoreLockedError, OSError) as exc:
            problem = (
                f"the store directory {directory} was removed while the store was serving, and its lock"
                f" could not be taken again ({exc}); another process may be using the directory: stop"
                " it, then restart this service"
            )
        else:
            problem = (
                f"the store directory {directory} (or its lock file) was removed while the store was"
                " serving; its lock is taken again so no other process uses the directory. Reads go on"
                " from the files the store holds open; restart the service to rebuild the store from"
                " its topic"
            )
        logger.error('store "%s": %s', self._name, problem)
        self._on_problem(problem)
