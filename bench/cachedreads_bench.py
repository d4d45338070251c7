"""Cold point reads with the whole table in the block cache, at two sizes, engine variants side by
side in one run: what bounds cold reads of a large table against a small one once neither reads a
block from its file (as the service serves them: it reads a restored table into its block cache
before READY when the cache has room).

Each table (``--records``, e.g. ``1000000,10000000``; the records of ``bench/scale_data.py``) is
built once the way ``python -m bench coldreads`` builds ``now`` (a bulk restore's chunk files,
merged), then copied for every variant. Every (size, variant) runs in a child process of its own,
pinned to CPU 1: it opens its copy with a 12 GiB block cache, reads the table once in key order
(the block cache then holds all of it), and reads 1,000-key ``SnapshotReader.get_many`` batches of
keys never asked before of it (``FreshKeys``) when told. The parent alternates slices of
``--batches`` batches between every child (reversed every other round), ``--rounds`` rounds, and
reports each child's median keys/s, each variant's large / small ratio and each variant against
the first (medians of the per-round ratios). Variants:

- ``default``: the engine's options (the store's table format, its block cache: a HyperClockCache
  whose table grows as the cache fills, ``store.table.new_block_cache``);
- ``thp``: the same, the process started with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (malloc'd
  memory, the block cache's included, in transparent huge pages where the kernel's mode is
  ``madvise``);
- ``filters-for-hits``: ``optimize_filters_for_hits`` (the last level's filters not consulted);
- ``lru``: RocksDB's LRU cache (its own default) instead; ``hyper-clock``: the
  HyperClockCache with its table sized for 2 KiB blocks up front (memory for the whole capacity
  taken before any block is cached);
- ``restarts-<N>``: data blocks with a restart point every N keys instead of 16 (the copy
  rewritten; ``restarts-16`` is the default rewritten the same way, for a fair pair).

::

    python -m bench cachedreads --records 1000000,10000000 --variants default,lru,thp
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

import rocksdict

from bench.coldreads_bench import CFS, _build, _variant_options
from bench.scale_data import BATCH, FreshKeys
from store import Position, RocksDBOptions
from store.table import SnapshotReader, database_options
from store.table_format import table_options

CACHE_BYTES = 12 << 30
HYPER_CLOCK_ENTRY_BYTES = 2300  # a 2 KiB block and its handle
VARIANTS = ("default", "thp", "filters-for-hits", "lru", "hyper-clock", "restarts-<N>")


def _restarts(variant: str) -> int | None:
    digits = variant.removeprefix("restarts-")
    return int(digits) if digits != variant and digits.isdigit() else None


def _options(variant: str) -> rocksdict.Options:
    options = _variant_options(f"cache-{CACHE_BYTES >> 30}g")
    options.set_disable_auto_compactions(True)
    if variant == "filters-for-hits":
        options.set_optimize_filters_for_hits(True)
    if variant in ("lru", "hyper-clock"):
        cache = (
            rocksdict.Cache(CACHE_BYTES)
            if variant == "lru"
            else rocksdict.Cache.new_hyper_clock_cache(CACHE_BYTES, HYPER_CLOCK_ENTRY_BYTES)
        )
        options.set_block_based_table_factory(table_options(cache))
    return options


def _rewrite(path: Path, restarts: int) -> None:
    """Every file of the table rewritten with data blocks of ``restarts`` keys between restart points."""
    options = database_options(RocksDBOptions(), RocksDBOptions().write_buffer_bytes)
    table = table_options(rocksdict.Cache(RocksDBOptions().block_cache_bytes))
    table.set_block_restart_interval(restarts)
    options.set_block_based_table_factory(table)
    db = rocksdict.Rdict(str(path), options, column_families=dict.fromkeys(CFS, options))
    compact = rocksdict.CompactOptions()
    compact.set_bottommost_level_compaction(rocksdict.BottommostLevelCompaction.force())
    db.compact_range(None, None, compact)
    db.close()


def _child(path: Path, records: int, variant: str) -> None:
    """Warm the cache with the whole table, then read ``N`` fresh batches per line read; print the
    seconds each time, and at the end the cache's size and the process's huge pages."""
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})
    options = _options(variant)
    db = rocksdict.Rdict(str(path), options, column_families=dict.fromkeys(CFS, options))
    read_options = rocksdict.ReadOptions()
    read_options.fill_cache(True)
    iterator = db.iter(read_options)
    iterator.seek_to_first()
    while iterator.valid():
        iterator.next()
    del iterator
    stream = FreshKeys(records)
    print("ready", flush=True)
    for line in sys.stdin:
        batches = [stream.batch() for _ in range(int(line))]
        started = time.perf_counter()
        for keys in batches:
            if None in SnapshotReader(db.snapshot(), Position()).get_many(keys):
                raise SystemExit("a key of the table was not found")
        print(time.perf_counter() - started, flush=True)
    rollup = Path("/proc/self/smaps_rollup")
    huge = (
        [r for r in rollup.read_text().splitlines() if r.startswith("AnonHugePages")]
        if rollup.exists()
        else []
    )
    cached = int(db.property_int_value("rocksdb.block-cache-usage") or 0) >> 20
    print(f"block cache {cached:,} MiB; {huge[0] if huge else 'AnonHugePages: -'}", flush=True)
    db.close()


def _spawn(copy: Path, records: int, variant: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    if variant == "thp":
        env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"
    command = [
        sys.executable,
        "-m",
        "bench.cachedreads_bench",
        "--child",
        str(copy),
        "--records",
        str(records),
    ]
    return subprocess.Popen(
        [*command, "--variants", variant], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )


Child = tuple[int, str]
Children = dict[Child, subprocess.Popen[str]]


def _pipes(child: subprocess.Popen[str]) -> tuple[IO[str], IO[str]]:
    """A child's stdin and stdout."""
    if child.stdin is None or child.stdout is None:
        raise RuntimeError("a child without pipes")
    return child.stdin, child.stdout


def _start_children(tmp: Path, sizes: list[int], variants: list[str]) -> Children:
    children: Children = {}
    for records in sizes:
        built = tmp / f"{records}" / "db"
        built.parent.mkdir()
        started = time.perf_counter()
        _build(built, records, "now")
        print(f"built {records:,} records in {time.perf_counter() - started:.0f} s", flush=True)
        for variant in variants:
            copy = tmp / f"{records}-{variant}"
            shutil.copytree(built.parent, copy)
            if (restarts := _restarts(variant)) is not None:
                _rewrite(copy / "db", restarts)
            children[(records, variant)] = _spawn(copy / "db", records, variant)
        shutil.rmtree(built.parent)
    for child in children.values():
        if _pipes(child)[1].readline().strip() != "ready":
            raise SystemExit("a child did not start")
    return children


def _measure(
    children: dict[Child, subprocess.Popen[str]], args: argparse.Namespace
) -> dict[Child, list[float]]:
    rates: dict[Child, list[float]] = {name: [] for name in children}
    order = list(children)
    for number in range(args.rounds):
        for name in order if number % 2 == 0 else order[::-1]:
            send, answers = _pipes(children[name])
            send.write(f"{args.batches}\n")
            send.flush()
            rates[name].append(args.batches * BATCH / float(answers.readline()))
    for name, child in children.items():
        send, answers = _pipes(child)
        send.close()
        print(f"{name[0]:,} records, {name[1]}: {answers.readline().strip()}", flush=True)
        child.wait()
    return rates


def _print(rates: dict[Child, list[float]], sizes: list[int], variants: list[str]) -> None:
    def ratio(a: Child, b: Child) -> float:
        return statistics.median(x / y for x, y in zip(rates[a], rates[b], strict=True))

    print("\n| variant | " + " | ".join(f"{n:,} keys/s" for n in sizes) + " | large / small |")
    print("|---|" + "---:|" * (len(sizes) + 1))
    for variant in variants:
        cells = [f"{statistics.median(rates[(n, variant)]):,.0f}" for n in sizes]
        if variant != variants[0]:
            cells = [
                f"{c} ({ratio((n, variant), (n, variants[0])):.2f})"
                for c, n in zip(cells, sizes, strict=True)
            ]
        large_small = f"{ratio((sizes[-1], variant), (sizes[0], variant)):.2f}" if len(sizes) > 1 else "-"
        print(f"| {variant} | " + " | ".join(cells) + f" | {large_small} |")
    print(f"\n(in brackets: against {variants[0]}, median of the per-round ratios)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench cachedreads",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--records", default="1000000,10000000", help="table sizes, comma-separated")
    parser.add_argument("--variants", default="default,lru,thp,filters-for-hits,hyper-clock")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batches", type=int, default=20, help="1,000-key batches per slice")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if args.child:
        _child(args.child, int(args.records), variants[0])
        return 0
    unknown = [v for v in variants if v not in VARIANTS and _restarts(v) is None]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    sizes = sorted(int(n) for n in args.records.split(","))
    if args.rounds * args.batches * BATCH > sizes[0]:
        parser.error(f"{args.rounds} rounds of {args.batches} batches ask more keys than {sizes[0]:,}")
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})
    with tempfile.TemporaryDirectory(prefix="cachedreads-") as tmp:
        children = _start_children(Path(tmp), sizes, variants)
        try:
            rates = _measure(children, args)
        finally:
            for child in children.values():
                if child.poll() is None:
                    child.kill()
    _print(rates, sizes, variants)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
