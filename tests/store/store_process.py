"""A store in its own process, for the lock and crash tests: ``python -m tests.store.store_process CONFIG``.

CONFIG is JSON: ``bootstrap_servers``, ``topic``, ``state_dir``, ``name`` and optional ``tuning``
(``StoreTuning`` field names, flat), ``indexes`` (``[name, field]`` pairs) and ``history`` (``HistorySpec``
fields). The process opens the store and writes one JSON status line to stdout
every few milliseconds until it is killed or its stdin closes; then it stops the store cleanly.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from store import HistorySpec, IndexSpec, Store, StoreConfig, StoreLockedError, StoreTuning


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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
