"""Finding the store's child processes in ``/proc`` (Linux), for tests that kill or watch them."""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from pathlib import Path


def children(parent: int, script: str) -> list[int]:
    """Pids of the live processes whose parent is ``parent`` and whose command line names ``script``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # ended meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces, so split after its closing parenthesis.
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == parent and state != "Z" and script.encode() in command:
            found.append(int(entry.name))
    return sorted(found)


def consumer_processes(parent: int | None = None) -> list[int]:
    """The store consumer processes (``store.kafka.consumer_process``) of ``parent`` (default: this one)."""
    return children(os.getpid() if parent is None else parent, "store.kafka.consumer_process")


def wait_for_consumer_process(
    parent: int | None = None, other_than: Collection[int] = (), timeout: float = 60
) -> int:
    """The pid of a consumer process of ``parent`` that is none of ``other_than`` (killed ones may
    take a moment to end), once there is one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [pid for pid in consumer_processes(parent) if pid not in other_than]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no consumer process other than {sorted(other_than)} within {timeout}s")


def ended(pid: int) -> bool:
    """Whether process ``pid`` is gone or a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"
