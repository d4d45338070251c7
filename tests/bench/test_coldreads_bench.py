"""The cold-reads bench at a CI size: every variant kind builds, reads every key it asks, and is
printed. No figure is checked against a number; the point is that the harness keeps working."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

VARIANTS = ("before", "now", "unsettled-now", "hash-index", "4k-blocks", "cache-1g", "multiget", "hotkeys")


@pytest.mark.timeout(300)
def test_every_variant_kind_builds_reads_and_prints() -> None:
    command = [
        sys.executable, "-m", "bench", "coldreads", "--records", "20000", "--variants", ",".join(VARIANTS),
        "--seconds", "0.1", "--rounds", "1", "--warm", "2", "--cold-keys-repeat",
    ]  # fmt: skip
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=280, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    rows = {
        cells[0]: cells
        for line in result.stdout.splitlines()
        if len(cells := [cell.strip() for cell in line.strip().strip("|").split("|")]) > 3
    }
    assert set(VARIANTS) <= rows.keys(), result.stdout
    for variant in VARIANTS:
        keys_per_second = int(rows[variant][1].replace(",", ""))
        assert keys_per_second > 0, rows[variant]


def test_an_unknown_variant_is_refused_by_name() -> None:
    command = [sys.executable, "-m", "bench", "coldreads", "--variants", "now,3x-blocks"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2
    assert "3x-blocks" in result.stderr
