"""A store in its own process, for the lock and crash tests: ``python -m tests.store.store_process CONFIG``.

CONFIG is JSON: ``bootstrap_servers``, ``topic``, ``state_dir``, ``name`` and optional ``tuning``
(``StoreTuning`` field names, flat), ``indexes`` (``[name, field]`` pairs) and ``history`` (``HistorySpec``
fields), and ``hold_at_applied``: once the restore has applied that many records, the store's
materializer stops before its next write and waits to be killed (a kill mid-bootstrap by
construction). The process opens the store and writes one JSON status line to stdout
every few milliseconds until it is killed or its stdin closes; then it stops the store cleanly.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from store import HistorySpec, IndexSpec, Store, StoreConfig, StoreLockedError, StoreTuning
from store.table.replica import Replica


def main(raw: str) -> int:
    settings = json.loads(raw)
    history = settings.get("history")
    store = Store(
        StoreConfig(
            name=settings["name"],
            topic=settings["topic"],
            kafka={"bootstrap.servers": settings["bootstrap_servers"]},
            state_dir=settings["state_dir"],
            tuning=StoreTuning().replace(**settings.get("tuning", {})),
            indexes=tuple(IndexSpec(name, field) for name, field in settings.get("indexes", [])),
            history=HistorySpec(**history) if history is not None else None,
        )
    )
    if settings.get("hold_at_applied") is not None:
        hold_at(store, settings["hold_at_applied"])
    try:
        store.start()
    except StoreLockedError as exc:
        print(json.dumps({"error": "locked", "message": str(exc)}), flush=True)
        return 3
    stdin_closed = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        stdin_closed.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    while not stdin_closed.is_set():
        status = store.status()
        line = {
            "state": status.state.value,
            "position": str(status.position),
            "applied": status.records_applied_total,
            "restore_applied": status.restore.records_applied if status.restore else None,
        }
        print(json.dumps(line), flush=True)
        time.sleep(0.005)
    store.stop()
    return 0


def hold_at(store: Store, applied: int) -> None:
    """Hold the materializer before any write once the restore has applied ``applied`` records."""
    never = threading.Event()

    def held(write: Callable[..., None]) -> Callable[..., None]:
        def write_unless_held(*args: Any) -> None:
            restore = store.status().restore
            if restore is not None and restore.records_applied >= applied:
                never.wait()
            write(*args)

        return write_unless_held

    Replica.apply = held(Replica.apply)  # type: ignore[method-assign]
    Replica.ingest = held(Replica.ingest)  # type: ignore[method-assign]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
