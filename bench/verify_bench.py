"""Corruption checks: what telling absence from failure costs reads, and what verification costs.

One RocksDB table of ``--keys`` keys (100-byte values, compacted), no broker::

    python -m bench verify --keys 1000000 --reads 200000 --repeat 5

1. ``get_many`` in batches of 1,000 (half the keys absent) through the store's reader, against
   the loop it replaced (every exception taken for "absent"), alternating on the same snapshot.
2. One verification pass unpaced: entries and MiB read per second.
3. ``get_many`` (all keys present) while a verification pass runs at the default pace
   (``engine.verify_bytes_per_second``), against no verification, alternating.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from store import MaintenanceTuning, Position, RocksDBOptions
from store.table import Engine, SnapshotReader, Verifier, VerifyStep


def _unchecked_get_many(snapshot: Any, keys: Sequence[bytes]) -> list[bytes | None]:
    """The lookup loop before the fix: any exception meant "absent"."""
    values: list[bytes | None] = []
    for key in keys:
        try:
            values.append(snapshot[key])
        except Exception:
            values.append(None)
    return values


def _rate(read: Any, keys: list[bytes], batch: int = 1000) -> float:
    start = time.perf_counter()
    for i in range(0, len(keys), batch):
        read(keys[i : i + batch])
    return len(keys) / (time.perf_counter() - start)


class _EngineTarget:
    """Verifies an engine directly (the store does the same through its served copy)."""

    name = "bench"

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.column_families = engine.column_families
        self.entries = 0

    def verify_step(self, family: str, start: bytes | None, max_entries: int) -> VerifyStep | None:
        next_start, entries, size = self._engine.verify_page(family, start, max_entries)
        self.entries += entries
        return VerifyStep(self._engine, next_start, entries, size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--reads", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    rng = random.Random(5)
    tuning = MaintenanceTuning()

    with tempfile.TemporaryDirectory() as directory:
        engine = Engine(Path(directory) / "db", RocksDBOptions())
        for start in range(0, args.keys, 10_000):
            batch = engine.new_batch()
            for i in range(start, min(start + 10_000, args.keys)):
                batch.put(b"key-%010d" % i, os.urandom(100))
            engine.write(batch)
        engine.flush()
        engine._db.compact_range(None, None)  # one sorted run, as a settled store
        snapshot = engine.snapshot()
        reader = SnapshotReader(snapshot, Position())
        mixed = [b"key-%010d" % rng.randrange(args.keys * 2) for _ in range(args.reads)]
        present = [b"key-%010d" % rng.randrange(args.keys) for _ in range(args.reads)]

        checked: list[float] = []
        unchecked: list[float] = []
        for _ in range(args.repeat):
            unchecked.append(_rate(lambda keys: _unchecked_get_many(snapshot, keys), mixed))
            checked.append(_rate(reader.get_many, mixed))

        target = _EngineTarget(engine)
        unpaced = Verifier(target, 3600, 1 << 40)
        started = time.perf_counter()
        assert unpaced.verify_once()  # one pass, on this thread
        pass_seconds = time.perf_counter() - started
        size = engine.size_on_disk_bytes()

        quiet: list[float] = []
        verifying: list[float] = []
        for _ in range(args.repeat):
            quiet.append(_rate(reader.get_many, present))
            paced = Verifier(_EngineTarget(engine), 3600, tuning.verify_bytes_per_second)
            thread = threading.Thread(target=paced.verify_once)
            thread.start()
            verifying.append(_rate(reader.get_many, present))
            paced.stop()
            thread.join()
        reader.release()
        engine.close()

    median = statistics.median
    print()
    print(f"table: {args.keys:,} keys, 100-byte values, {size / 2**20:.0f} MiB on disk")
    print("| measure | figure |")
    print("|---|---|")
    print(f"| get_many, half absent, loop before the fix | {median(unchecked):,.0f} keys/s |")
    print(
        f"| get_many, half absent, absence told from failure | {median(checked):,.0f} keys/s"
        f" ({median(checked) / median(unchecked):.0%}) |"
    )
    print(
        f"| one verification pass, unpaced | {target.entries / pass_seconds:,.0f} entries/s,"
        f" {size / 2**20 / pass_seconds:,.0f} MiB/s of files, {pass_seconds:.2f} s |"
    )
    print(f"| get_many, no verification running | {median(quiet):,.0f} keys/s |")
    print(
        f"| get_many, verification at {tuning.verify_bytes_per_second / 2**20:.0f} MiB/s running |"
        f" {median(verifying):,.0f} keys/s ({median(verifying) / median(quiet):.0%}) |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
