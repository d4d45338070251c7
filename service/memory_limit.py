"""The memory this process may use, for settings sized from it (``engine.block_cache_bytes: auto``).

A container's limit is its cgroup's: ``memory.max`` (cgroup v2) or ``memory.limit_in_bytes``
(cgroup v1), either of which may say "no limit"; outside a limit, the machine's memory.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

# cgroup v1 reports "no limit" as a huge number (the largest page-aligned 64-bit value).
_NO_LIMIT_ABOVE = 1 << 60
# ``engine.block_cache_bytes: auto`` takes this share of the memory limit; the rest is left for the
# page cache of the table's files, the write buffers, the hot-key cache and Python.
AUTO_BLOCK_CACHE_SHARE = 0.5
_MIN_AUTO_BLOCK_CACHE = 64 * 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class MemoryLimit:
    """A memory limit in bytes, and where it was read."""

    bytes: int
    source: str


def memory_limit(root: Path = Path("/")) -> MemoryLimit:
    """The memory limit of this process: its cgroup's, else the machine's memory."""
    for relative in ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"):
        path = root / relative
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < _NO_LIMIT_ABOVE:
            return MemoryLimit(int(text), f"cgroup ({path})")
    meminfo = root / "proc/meminfo"
    try:
        for line in meminfo.read_text().splitlines():
            name, _, value = line.partition(":")
            if name == "MemTotal":
                return MemoryLimit(int(value.split()[0]) * 1024, f"the machine's memory ({meminfo})")
    except (OSError, ValueError, IndexError):
        pass
    raise OSError(f"cannot read a memory limit from {root / 'sys/fs/cgroup'} or {meminfo}")


def auto_block_cache_bytes(limit: MemoryLimit) -> int:
    """The shared block cache ``engine.block_cache_bytes: auto`` means under ``limit``."""
    return max(_MIN_AUTO_BLOCK_CACHE, int(limit.bytes * AUTO_BLOCK_CACHE_SHARE))
