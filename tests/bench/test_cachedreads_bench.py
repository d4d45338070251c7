"""The cached-reads bench at a CI size: every variant kind starts its child, reads every key it
asks, and is printed. No figure is checked against a number; the point is that the harness keeps
working."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

VARIANTS = ("default", "lru", "thp", "filters-for-hits", "hyper-clock", "restarts-4")


@pytest.mark.timeout(300)
def test_every_variant_kind_reads_and_is_printed() -> None:
    command = [
        sys.executable, "-m", "bench", "cachedreads", "--records", "2000,20000",
        "--variants", ",".join(VARIANTS), "--rounds", "2", "--batches", "1",
    ]  # fmt: skip
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=280, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    rows = {
        cells[0]: cells
        for line in result.stdout.splitlines()
        if len(cells := [cell.strip() for cell in line.strip().strip("|").split("|")]) == 4
    }
    assert set(VARIANTS) <= rows.keys(), result.stdout
    for variant in VARIANTS:
        for cell in rows[variant][1:3]:
            assert int(cell.split()[0].replace(",", "")) > 0, rows[variant]
    assert "AnonHugePages" in result.stdout


def test_an_unknown_variant_is_refused_by_name() -> None:
    command = [sys.executable, "-m", "bench", "cachedreads", "--variants", "default,huge-blocks"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2
    assert "huge-blocks" in result.stderr
