"""Child processes of the store: modules of ``store.kafka`` run as ``python -P -m module``.

The Kafka client runs in them (the bulk restore's workers, the steady-state consumer), so that a
crash inside it ends a child, never the process that serves reads. A child gets its job on stdin,
never on the command line (the job holds credentials), and answers on stdout. It ends when the
store ends it, and by itself when its stdin ends or its parent is gone.

The service may be a container's init (PID 1): every child started here is waited for when it
ends, whatever ended it, and while this process is PID 1, :func:`reap_orphans` also waits for the
processes other children left behind (orphans are handed to PID 1).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO

_started: set[int] = set()  # pids of children started here and not yet waited for
_started_lock = threading.Lock()
_reaper_started = threading.Event()
_REAP_INTERVAL_SECONDS = 1.0


def module_command(module: str) -> list[str]:
    """The command that runs ``module`` (a module of this package, as ``store.kafka.consumer_process``)
    as a child does: ``python -P -m module``, the parent's ``sys.path`` given in ``PYTHONPATH``."""
    # -P: the current directory stays off the child's sys.path.
    return [sys.executable, "-P", "-m", module]


class ChildProcess:
    """A module of this package (``module``: its dotted name) in a child process and process group
    of its own, with pipes to its stdin and from its stdout; stderr is this process's."""

    def __init__(self, module: str) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            # numpy's BLAS needs no threads here, and none may run when a child forks.
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
        }
        with _started_lock:  # registered before the reaper can see it exit
            self.process = subprocess.Popen(
                module_command(module),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                start_new_session=True,  # its own process group: end() stops its children too
            )
            _started.add(self.process.pid)
        _start_reaper_if_init()
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None
        assert stdout is not None
        self.stdin: IO[bytes] = stdin
        self.stdout: IO[bytes] = stdout

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> int | None:
        """The exit code once it ended (negative: the signal that ended it), else ``None``."""
        return self.process.poll()

    def end(self, stop: bool = True, grace_seconds: float = 10.0) -> int:
        """Wait for the child to end (asking it to first when ``stop``: SIGTERM), killing its whole
        process group if it has not ended within ``grace_seconds``; returns its exit code."""
        process = self.process
        if stop and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        try:
            process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # the whole group, its own children included
            process.wait(timeout=30)
        finally:
            for pipe in (self.stdin, self.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()
        with _started_lock:
            _started.discard(process.pid)
        return process.returncode

    def kill(self) -> int:
        """End it at once (SIGKILL to its process group) and wait for it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        return self.end(stop=False)


def describe_exit(code: int | None) -> str:
    """How a child ended, for a log line: ``killed by SIGSEGV``, ``exited with code 1``."""
    if code is None:
        return "is still running"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with code {code}"


def reap_orphans() -> list[int]:
    """Wait for every ended process that is this process's child but was not started here (the
    orphans a container's init inherits); returns their pids. Children started here are left to
    :meth:`ChildProcess.end`."""
    reaped: list[int] = []
    while True:
        try:
            found = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return reaped
        if found is None:
            return reaped
        with _started_lock:
            if found.si_pid in _started:
                return reaped  # ours: its end() waits for it (and the next call finds the others)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(found.si_pid, 0)
        reaped.append(found.si_pid)


def _start_reaper_if_init() -> None:
    with _started_lock:
        if os.getpid() != 1 or _reaper_started.is_set():
            return
        _reaper_started.set()
    threading.Thread(target=_reap_forever, name="orphan-reaper", daemon=True).start()


def _reap_forever() -> None:
    while True:
        time.sleep(_REAP_INTERVAL_SECONDS)
        reap_orphans()
