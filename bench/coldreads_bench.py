"""Cold point reads of the embedded engine: table layouts and formats side by side, in one run.

Every variant holds the same table (``--records`` keys of ``bench/scale_data.py``: 16-byte hex
MD5 keys, ~105-byte JSON values), built the way a bulk restore builds it: chunks of 250,000
records in random key order, each sorted and written as an SST file, ingested one after the other
with compactions deferred, then compactions resumed and waited for. Reads are 1,000-key
``get_many`` calls of ``store.table.snapshot_reader.SnapshotReader`` (the store's read path below its hot-key
cache) on keys never asked before (``FreshKeys``), after a warm-up of ``--warm`` batches that fills
the block cache as far as it goes. Variants:

- ``before``: the files as the bulk restore wrote them before issue 19 (no bloom filters), and
  level-0 files left where RocksDB leaves them (fewer than 4 stay);
- ``now``: the engine as it is (files with the table's bloom filters; leftover level-0 files
  merged after the restore: ``Engine.compact_leftover_level0``);
- ``unsettled-before`` / ``unsettled-now``: the table right at READY, before RocksDB compacted
  what the restore ingested: 17 overlapping files (what a 1M restore in 3 workers leaves), the
  chunk files without / with the table's bloom filters;
- the rest are ``now`` rewritten (a forced full compaction) in another format, to see what each
  would give: ``hash-index`` (data blocks with a hash index), ``no-compression``,
  ``<N>k-blocks`` (N KiB data blocks instead of 4: ``16k-blocks``, ``1k-blocks``), ``mmap`` (no
  compression, files read through mmap), ``cache-<N>g`` (an N GiB block cache instead of
  256 MiB, e.g. ``cache-2g``), ``multiget`` (``Rdict.get(list)``,
  RocksDB's batched MultiGet with the GIL released, instead of one snapshot lookup per key);
  ``hotkeys`` and ``hotkeys-admit-all``: ``now`` read through the store's hot-key cache
  (``store.table.hot_keys``, 200,000 entries) as the store does, with its admission of large batches'
  misses and admitting every miss: what the cache costs reads of keys it does not hold.

Reported per variant: keys/s (variants alternate, ``--rounds`` times ``--seconds`` each; median),
CPU time per key (user and system: steadier than wall time on a shared machine), level-0 files and
disk; with ``--instructions``, the instructions per key counted by ``valgrind --tool=callgrind``
(repeatable under load; user space only: the kernel's part of a read is the system time)::

    python -m bench coldreads --records 1000000 --instructions
    python -m bench coldreads --records 10000000 --variants now,multiget,no-compression,cache-2g
"""

from __future__ import annotations

import argparse
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import rocksdict

from bench.scale_data import BATCH, FreshKeys, FreshKeysExhaustedError, key, value
from bench.scale_support import MIB
from store import Position, RocksDBOptions, StoreTuning
from store.kafka.restore_worker import last_per_key_order
from store.table import (
    Engine,
    HotKeyCache,
    SnapshotReader,
    database_options,
    directory_size,
    new_block_cache,
    read_misses,
)
from store.table_format import table_options

CHUNK = 250_000
# Level-0 files of the unsettled variants: about what a restore of 1M records in 3 workers
# leaves at READY (chunks halve towards each worker's end).
UNSETTLED_FILES = 17
CFS = ("default", "meta", "index", "history", "changes")
VARIANTS = (
    "before",
    "now",
    "unsettled-before",
    "unsettled-now",
    "hash-index",
    "no-compression",
    "<N>k-blocks",
    "mmap",
    "cache-<N>g",
    "multiget",
    "hotkeys",
    "hotkeys-admit-all",
)


def _block_kib(name: str) -> int | None:
    """The data block size of a ``<N>k-blocks`` variant, in KiB."""
    digits = name.removesuffix("k-blocks")
    return int(digits) if digits != name and digits.isdigit() else None


def _cache_bytes(name: str) -> int:
    """The block cache of a variant: N GiB for ``cache-<N>g``, else the engine's default."""
    if name.startswith("cache-") and name.endswith("g") and name[6:-1].isdigit():
        return int(name[6:-1]) << 30
    return RocksDBOptions().block_cache_bytes


def _variant_options(name: str) -> rocksdict.Options:
    """The engine's options, changed as the variant says."""
    cache = _cache_bytes(name)
    options = database_options(RocksDBOptions(block_cache_bytes=cache), RocksDBOptions().write_buffer_bytes)
    table = table_options(new_block_cache(cache))
    if name == "hash-index":
        table.set_data_block_index_type(rocksdict.DataBlockIndexType.binary_and_hash())
    if (kib := _block_kib(name)) is not None:
        table.set_block_size(kib * 1024)
    options.set_block_based_table_factory(table)
    if name in ("no-compression", "mmap"):
        options.set_compression_type(rocksdict.DBCompressionType.none())
    if name == "mmap":
        options.set_allow_mmap_reads(True)
    return options


def _sst_options(name: str) -> rocksdict.Options:
    options = rocksdict.Options(raw_mode=True)
    options.set_compression_type(rocksdict.DBCompressionType.lz4())
    if name not in ("before", "unsettled-before"):
        options.set_block_based_table_factory(table_options())
    return options


def _build(path: Path, records: int, name: str) -> None:
    """The table as a bulk restore leaves it (``before`` / ``now``), or rewritten in a format."""
    engine = Engine(path, RocksDBOptions())
    engine.defer_compactions(True)
    order = list(range(records))
    random.Random(1).shuffle(order)
    sst_options = _sst_options(name)
    unsettled = name.startswith("unsettled-")
    chunk = max(1, records // UNSETTLED_FILES) if unsettled else CHUNK
    for start in range(0, records, chunk):
        numbers = order[start : start + chunk]
        keys = [key(i) for i in numbers]
        sst = path.parent / f"chunk-{start}.sst"
        writer = rocksdict.SstFileWriter(sst_options)
        writer.open(str(sst))
        for i in last_per_key_order(keys):
            writer[keys[i]] = value(numbers[i])
        writer.finish()
        engine.ingest([sst])
    if unsettled:
        engine.close()  # as at READY, before RocksDB compacted the files (readers open them so)
        return
    engine.defer_compactions(False)
    if name != "before":
        engine.compact_leftover_level0()
    while _compacting(engine):
        time.sleep(0.5)
    engine.close()
    if name not in ("before", "now", "unsettled-before", "unsettled-now"):
        db = rocksdict.Rdict(
            str(path), _variant_options(name), column_families=dict.fromkeys(CFS, _variant_options(name))
        )
        compact = rocksdict.CompactOptions()
        compact.set_bottommost_level_compaction(rocksdict.BottommostLevelCompaction.force())
        db.compact_range(None, None, compact)
        db.close()


def _compacting(engine: Engine) -> bool:
    db = engine._db
    return bool(db.property_int_value("rocksdb.compaction-pending")) or bool(
        db.property_int_value("rocksdb.num-running-compactions")
    )


def _built(name: str) -> str:
    """The database a variant reads: ``multiget`` and ``hotkeys*`` read ``now``'s another way."""
    return "now" if name == "multiget" or name.startswith("hotkeys") else name


def _open(path: Path, name: str) -> rocksdict.Rdict:
    """A variant's database, open for reads (compactions off: nothing moves while measured)."""
    options = _variant_options(name)
    options.set_disable_auto_compactions(True)
    return rocksdict.Rdict(str(path), options, column_families=dict.fromkeys(CFS, options))


class _Reader:
    """How a variant reads 1,000 keys from its database."""

    def __init__(self, db: rocksdict.Rdict, name: str) -> None:
        self.level0 = int(db.property_int_value("rocksdb.num-files-at-level0") or 0)
        if name == "multiget":
            self.read: Callable[[list[bytes]], list[bytes | None]] = db.get
        elif name.startswith("hotkeys"):
            self.read = _through_hot_keys(db, admit_all=name == "hotkeys-admit-all")
        else:

            def read(keys: list[bytes]) -> list[bytes | None]:
                return SnapshotReader(db.snapshot(), Position()).get_many(keys)

            self.read = read


def _snapshot_read(db: rocksdict.Rdict) -> Callable[[Sequence[bytes]], list[bytes | None]]:
    """Reads of ``keys`` from a snapshot taken when they are asked (only when some missed)."""
    return lambda keys: SnapshotReader(db.snapshot(), Position()).get_many(keys)


def _through_hot_keys(db: rocksdict.Rdict, admit_all: bool) -> Callable[[list[bytes]], list[bytes | None]]:
    """Reads as ``store.table.cached_reader`` makes them: the hot-key cache under a lock, then a snapshot."""
    lock = threading.Condition()
    capacity = StoreTuning().read_cache_entries
    cache = HotKeyCache(capacity, admit_all_up_to=capacity) if admit_all else HotKeyCache(capacity)

    def read(keys: list[bytes]) -> list[bytes | None]:
        with lock:
            cached = cache.lookup(keys)
        values, missing_keys, fetched = read_misses(keys, cached, _snapshot_read(db))
        if missing_keys:
            with lock:
                cache.offer(missing_keys, fetched, len(keys))
        return values

    return read


def _measure(reader: _Reader, stream: FreshKeys, seconds: float) -> tuple[int, float, float, float]:
    """(keys read, read seconds, user CPU seconds, system CPU seconds); key making not counted.
    Ends early once ``stream`` has no key left that its database was not asked before."""
    keys_read, spent, user, system = 0, 0.0, 0.0, 0.0
    while spent < seconds:
        try:
            keys = stream.batch()
        except FreshKeysExhaustedError:
            break
        before = resource.getrusage(resource.RUSAGE_THREAD)
        started = time.perf_counter()
        values = reader.read(keys)
        spent += time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_THREAD)
        user += after.ru_utime - before.ru_utime
        system += after.ru_stime - before.ru_stime
        keys_read += len(values)
        if None in values:
            raise SystemExit("a key of the table was not found")
    return keys_read, spent, user, system


def _count_instructions(path: Path, args: argparse.Namespace, name: str) -> float:
    """Instructions per key of ``--count`` batches after the warm-up, under callgrind, in a child."""
    out = path.parent / "callgrind.out"
    command = [
        "valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=map_next",
        f"--callgrind-out-file={out}", sys.executable, "-m", "bench.coldreads_bench", "--child", str(path),
        "--variants", name, "--records", str(args.records),
        "--warm", str(args.warm), "--count", str(args.count),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    collected = [line for line in result.stderr.splitlines() if "Collected :" in line]
    return int(collected[-1].split(":")[-1]) / (args.count * BATCH)


def _child(path: Path, args: argparse.Namespace) -> None:
    """Under callgrind: the warm-up in a loop, the counted batches through ``map`` (the only
    ``map_next`` calls, so ``--toggle-collect=map_next`` counts exactly them)."""
    db = _open(path, args.variants)
    reader = _Reader(db, args.variants)
    stream = FreshKeys(args.records)
    for _ in range(args.warm):
        reader.read(stream.batch())
    batches = [stream.batch() for _ in range(args.count)]
    list(map(reader.read, batches))
    db.close()


def _arguments(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """The command line, and the variants it names (checked)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench coldreads",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--variants", default="before,now,hash-index,no-compression,mmap,cache-1g,multiget")
    parser.add_argument("--seconds", type=float, default=2.0, help="read seconds per variant and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm", type=int, default=300, help="warm-up batches of 1,000 keys per variant")
    parser.add_argument("--instructions", action="store_true", help="count instructions with callgrind")
    parser.add_argument("--count", type=int, default=20, help="batches counted under callgrind")
    parser.add_argument(
        "--cold-keys-repeat",
        action="store_true",
        help="let keys start over once every key was asked (smoke runs of small tables)",
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    if args.child:
        return args, names
    default_cache = RocksDBOptions().block_cache_bytes
    unknown = {
        n for n in names if n not in VARIANTS and _block_kib(n) is None and _cache_bytes(n) == default_cache
    }
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {', '.join(VARIANTS)}")
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind (apt-get install -y valgrind)")
    return args, names


def _build_all(tmp: Path, names: list[str], records: int) -> dict[str, Path]:
    """Each distinct table the variants read, built once: its database path by build name."""
    paths: dict[str, Path] = {}
    for name in names:
        built = _built(name)
        if built not in paths:
            started = time.perf_counter()
            (tmp / built).mkdir()
            paths[built] = tmp / built / "db"
            _build(paths[built], records, built)
            print(f"built {built} in {time.perf_counter() - started:.1f} s", flush=True)
    return paths


Rounds = dict[str, list[tuple[int, float, float, float]]]


def _measure_all(readers: dict[str, _Reader], args: argparse.Namespace) -> Rounds:
    """Every variant warmed, then measured in ``args.rounds`` interleaved rounds.

    Each database has its own key stream (variants reading the same database share it), so no
    key is asked of a database twice; a round its stream ran dry in counts if it read for at least
    half of ``--seconds``.
    """
    streams = {_built(name): FreshKeys(args.records, args.cold_keys_repeat) for name in readers}
    for name, reader in readers.items():
        for _ in range(args.warm):
            reader.read(streams[_built(name)].batch())
    results: Rounds = {name: [] for name in readers}
    for round_number in range(args.rounds):
        for name, reader in readers.items():
            measured = _measure(reader, streams[_built(name)], args.seconds)
            if measured[1] >= args.seconds / 2:
                results[name].append(measured)
            elif not results[name]:
                raise SystemExit(f"{name}: keys ran out in the first round; use more --records, less --warm")
        print(f"round {round_number + 1} done", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    args, names = _arguments(argv)
    if args.child:
        _child(args.child, args)
        return 0
    with tempfile.TemporaryDirectory(prefix="coldreads-") as tmp:
        paths = _build_all(Path(tmp), names, args.records)
        opened = {built: _open(path, built) for built, path in paths.items()}
        readers = {name: _Reader(opened[_built(name)], name) for name in names}
        results = _measure_all(readers, args)
        level0 = {name: reader.level0 for name, reader in readers.items()}
        disk = {name: directory_size(paths[_built(name)]) for name in names}
        cached = {
            name: int(opened[_built(name)].property_int_value("rocksdb.block-cache-usage") or 0)
            for name in names
        }
        for db in opened.values():
            db.close()
        instructions = (
            {name: _count_instructions(paths[_built(name)], args, name) for name in names}
            if args.instructions
            else {}
        )
    _print_table(args, names, results, instructions, level0, {n: (disk[n], cached[n]) for n in names})
    return 0


def _print_table(
    args: argparse.Namespace,
    names: list[str],
    results: Rounds,
    instructions: dict[str, float],
    level0: dict[str, int],
    sizes_of: dict[str, tuple[int, int]],
) -> None:
    """The results as a Markdown table (``sizes_of``: disk and block cache bytes per variant)."""
    print(
        f"\n{args.records:,} records; 1,000-key batches of keys never asked before;"
        f" medians of {args.rounds} rounds\n"
    )
    print(
        "| variant | keys/s | CPU µs/key (user / sys) | instructions/key | level-0 files | disk (MiB)"
        " | block cache used (MiB) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in names:
        rounds = results[name]
        rate = statistics.median(keys / spent for keys, spent, _, _ in rounds)
        user = statistics.median(u / keys * 1e6 for keys, _, u, _ in rounds)
        system = statistics.median(s / keys * 1e6 for keys, _, _, s in rounds)
        counted = f"{instructions[name]:,.0f}" if name in instructions else "-"
        cpu = f"{user:.2f} / {system:.2f}"
        disk, cached = sizes_of[name]
        sizes = f"{disk / MIB:,.0f} | {cached / MIB:,.0f}"
        print(f"| {name} | {rate:,.0f} | {cpu} | {counted} | {level0[name]} | {sizes} |")


if __name__ == "__main__":
    raise SystemExit(main())
