"""The scale bench at a CI size: it runs every part end to end and prints every figure.

No figure is checked against a number (speed is measured by ``python -m bench scale`` itself); the
point is that the harness keeps working as the code under it changes.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.scale_bench import FIGURES

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

# About a minute on a quiet machine; several on a busy one.
TIMEOUT_SECONDS = 840


def _table(output: str) -> dict[tuple[str, str], str]:
    """The rows of the printed table: (part, figure) -> value."""
    rows = {}
    for line in output.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0] in FIGURES:
            rows[(cells[0], cells[1])] = cells[2]
    return rows


@pytest.mark.timeout(TIMEOUT_SECONDS + 90)
def test_every_part_runs_and_prints_every_figure(tmp_path: Path) -> None:
    saved = tmp_path / "figures.json"
    # As a run of another size would have saved it: figures are shown as a share of these.
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"records": 10_000, "numbers": {"cold: JSON cold keys/s": 1.0}}))
    command = [
        sys.executable, "-m", "bench", "scale", "--records", "20000", "--facts", "5000",
        "--seconds", "0.5", "--rounds", "1", "--write-rate", "5000", "--cold-keys-repeat",
        "--ratio-rounds", "2", "--ratio-batches", "4",
        "--save", str(saved), "--baseline", str(baseline),
    ]  # fmt: skip
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.terminate()  # the bench stops its broker, Redis and service on the way out
        stdout, stderr = process.communicate(timeout=60)
        pytest.fail(f"the bench took more than {TIMEOUT_SECONDS} s:\n{stdout[-3000:]}")
    assert process.returncode == 0, stderr[-4000:]

    rows = _table(stdout)
    expected = {(part, figure) for part, figures in FIGURES.items() for figure in figures}
    assert expected <= rows.keys(), sorted(expected - rows.keys())
    assert all(value not in ("", "-", "nan") for value in rows.values()), rows
    numbers = json.loads(saved.read_text())["numbers"]
    assert set(numbers) <= {f"{part}: {figure}" for part, figure in rows}
    assert len(numbers) > len(expected) / 2  # a few figures (shares, file counts) are text only
    assert not any(math.isnan(number) for number in numbers.values()), numbers
    assert "| vs 10,000 records |" in stdout
