"""Several stores restoring at once in one process, as a service starting on an empty volume does.

Every store restores the same topic (16-byte random keys, 100-byte values, 3 partitions) from
scratch, sharing one ``RestoreSlots``. Compared side by side in the same run: every store bulk
restoring at once (a limit as high as the stores) against the default of one bulk restore at a
time (the others wait for the slot). Reported: when each store became READY, and the peak memory
of the process and its restore workers (proportional set size, sampled every 20 ms) above what
the process held before the stores opened.

Run: ``python -m bench restores --stores 3 --records 1000000 --repeat 2``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bootstrap_bench import TOPIC
from service.local.broker import LocalBroker
from store import RestoreSlots, Store, StoreConfig, StoreState


def _children(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(parents.get(current, []))
    return found


def _pss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _memory(exclude: int | None) -> int:
    return sum(_pss_bytes(pid) for pid in _children(os.getpid()) if pid != exclude)


def _restore_all(bootstrap: str, stores: int, limit: int, broker_pid: int | None) -> tuple[list[float], int]:
    """Seconds until each store was READY (sorted), and the peak memory above the start."""
    baseline = _memory(broker_pid)
    peak = baseline
    with tempfile.TemporaryDirectory() as state_dir:
        slots = RestoreSlots(limit)
        opened = [
            Store(StoreConfig(f"s{n}", TOPIC, {"bootstrap.servers": bootstrap}, Path(state_dir)), slots)
            for n in range(stores)
        ]
        start = time.monotonic()
        for store in opened:
            store.start()
        ready: dict[str, float] = {}
        try:
            while len(ready) < stores:
                peak = max(peak, _memory(broker_pid))
                for store in opened:
                    if store.name not in ready and store.state is StoreState.READY:
                        ready[store.name] = time.monotonic() - start
                if time.monotonic() - start > 900:
                    raise SystemExit("stores did not become READY within 900 s")
                time.sleep(0.02)
        finally:
            for store in opened:
                store.stop()
    return sorted(ready.values()), peak - baseline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stores", type=int, default=3)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)

    limits = {"all at once": args.stores, "one at a time (default)": 1}
    results: dict[str, list[tuple[list[float], int]]] = {name: [] for name in limits}
    with LocalBroker() as broker:
        print(f"producing {args.records:,} records...", flush=True)
        # In a child process: the producer's buffers would otherwise count as this process's memory.
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from bench.bootstrap_bench import _produce;"
                " _produce(sys.argv[1], int(sys.argv[2]), False)",
                broker.bootstrap_servers,
                str(args.records),
            ],
            check=True,
        )
        broker_pid = broker.pid
        for round_number in range(args.repeat):
            for name, limit in limits.items():
                ready, peak = _restore_all(broker.bootstrap_servers, args.stores, limit, broker_pid)
                results[name].append((ready, peak))
                print(
                    f"round {round_number + 1} {name}: READY at "
                    f"{', '.join(f'{t:.1f}s' for t in ready)}; peak memory +{peak / 2**20:,.0f} MiB",
                    flush=True,
                )

    print()
    print(f"{args.stores} stores x {args.records:,} records, medians of {args.repeat} rounds")
    print()
    print("| bulk restores | first READY | last READY | peak memory above start |")
    print("|---|---:|---:|---:|")
    for name, rounds in results.items():
        first = statistics.median(ready[0] for ready, _ in rounds)
        last = statistics.median(ready[-1] for ready, _ in rounds)
        peak = statistics.median(peak for _, peak in rounds)
        print(f"| {name} | {first:.1f} s | {last:.1f} s | {peak / 2**20:,.0f} MiB |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
