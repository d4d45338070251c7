"""The memory limit ``engine.block_cache_bytes: auto`` is sized from: the cgroup's, else the machine's."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.memory_limit import MemoryLimit, auto_block_cache_bytes, memory_limit

MEMINFO = "MemTotal:       24683892 kB\nMemFree:        23119000 kB\n"


def machine(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize(
    ("files", "expected", "source"),
    [
        ({"sys/fs/cgroup/memory.max": "2147483648\n", "proc/meminfo": MEMINFO}, 2**31, "cgroup"),
        ({"sys/fs/cgroup/memory.max": "max\n", "proc/meminfo": MEMINFO}, 24683892 * 1024, "machine"),
        (
            {"sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824\n", "proc/meminfo": MEMINFO},
            2**30,
            "cgroup",
        ),
        (
            {"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n", "proc/meminfo": MEMINFO},
            24683892 * 1024,
            "machine",
        ),
        ({"proc/meminfo": MEMINFO}, 24683892 * 1024, "machine"),
    ],
)
def test_the_limit_is_the_cgroups_when_it_has_one(
    tmp_path: Path, files: dict[str, str], expected: int, source: str
) -> None:
    limit = memory_limit(machine(tmp_path, files))
    assert limit.bytes == expected
    assert source in limit.source


def test_no_limit_to_read_is_an_error_naming_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="cannot read a memory limit"):
        memory_limit(tmp_path)


def test_auto_is_half_the_limit_and_never_tiny() -> None:
    assert auto_block_cache_bytes(MemoryLimit(4 * 2**30, "cgroup")) == 2 * 2**30
    assert auto_block_cache_bytes(MemoryLimit(32 * 2**20, "cgroup")) == 64 * 2**20
