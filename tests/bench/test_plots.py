"""``python -m bench plots``: the plots of docs/benchmarks.md, drawn from the recorded results."""

from __future__ import annotations

import json
from pathlib import Path

from bench import __main__ as bench_main
from bench import plots

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def test_the_command_draws_every_plot_from_the_results(tmp_path: Path) -> None:
    assert bench_main.main(["plots", "--out", str(tmp_path)]) == 0
    drawn = sorted(path.name for path in tmp_path.iterdir())
    assert drawn == ["bootstrap.png", "freshness.png", "reads.png", "spark.png"]
    for name in drawn:
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG)
        assert len(data) > 10_000


def test_every_plot_is_in_the_docs_and_shown_on_the_page() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    for plot in plots.PLOTS:
        committed = ROOT / "docs" / "plots" / f"{plot.__name__}.png"
        assert committed.read_bytes().startswith(PNG)
        assert f"(plots/{plot.__name__}.png)" in page


def test_every_result_names_its_command_and_source() -> None:
    for path in sorted(plots.RESULTS.glob("*.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        assert result["command"].startswith("python -m bench "), path.name
        assert "benchmarks" in result["source"], path.name
    summary = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").split("## History", 1)[0]
    # The summary's headline figures are the recorded ones.
    reads = json.loads((plots.RESULTS / "reads.json").read_text(encoding="utf-8"))
    assert f"{reads['single_get']['statestore GET req/s']:,}" in summary
    bootstrap = json.loads((plots.RESULTS / "bootstrap.json").read_text(encoding="utf-8"))
    assert f"{round(bootstrap['readers']['statestore Store, empty to READY'] / 1000)}k" in summary
