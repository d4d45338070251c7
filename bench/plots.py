"""The plots of docs/benchmarks.md, drawn from the recorded results in bench/recorded/*.json.

``python -m bench plots [--results DIR] [--out DIR]`` writes one PNG per figure. The results are
the figures the benchmark commands printed (each file names its command and source); rerun a
benchmark, update its file, and redraw.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "recorded"
OUT = ROOT / "docs" / "plots"
OURS, PEER, OTHER, LIGHT = "#1f6f8b", "#c8553d", "#8a8a8a", "#99c1d0"


def _load(results: Path, name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((results / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


def _figure(title: str, note: str) -> tuple[Any, Any]:
    import matplotlib.pyplot as plt  # noqa: PLC0415  # an optional dependency (the bench extra)

    figure, axes = plt.subplots(figsize=(8, 4.2), dpi=110)
    axes.set_title(title, fontsize=12, loc="left")
    figure.text(0.01, 0.01, note, fontsize=7.5, color="#555555")
    axes.spines[["top", "right"]].set_visible(False)
    return figure, axes


def _save(figure: Any, out: Path, name: str) -> Path:
    figure.tight_layout(rect=(0, 0.05, 1, 1))
    path = out / f"{name}.png"
    figure.savefig(path)
    import matplotlib.pyplot as plt  # noqa: PLC0415

    plt.close(figure)
    return path


def _label_bars(axes: Any, bars: Any, texts: list[str]) -> None:
    for bar, text in zip(bars, texts, strict=True):
        axes.annotate(
            text,
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8.5,
            xytext=(0, 2),
            textcoords="offset points",
        )


def _horizontal_bars(
    axes: Any, names: list[str], values: list[float], colors: list[str], texts: list[str]
) -> None:
    """One bar a name, the first at the top, each with its text at its end."""
    bars = axes.barh(names[::-1], values[::-1], color=colors[::-1])
    for bar, text in zip(bars, texts[::-1], strict=True):
        axes.annotate(text, (bar.get_width(), bar.get_y() + bar.get_height() / 2), va="center", fontsize=8.5)


def bootstrap(results: Path, out: Path) -> Path:
    data = _load(results, "bootstrap")
    names = list(data["readers"])
    rates = [data["readers"][name] / 1e6 for name in names]
    colors = [PEER, LIGHT, OURS, OTHER]
    figure, axes = _figure("Bootstrap, 1M records: empty to READY", data["setup"])
    bare = data["readers"][names[0]]
    texts = [f" {data['readers'][n] / 1e3:,.0f}k ({data['readers'][n] / bare:.0%} of bare)" for n in names]
    _horizontal_bars(axes, names, rates, colors, texts)
    axes.set_xlabel("million records per second (higher is better)")
    axes.set_xlim(0, max(rates) * 1.45)
    return _save(figure, out, "bootstrap")


def reads(results: Path, out: Path) -> Path:
    import matplotlib.pyplot as plt  # noqa: PLC0415

    data = _load(results, "reads")
    sizes = [f"{n // 1_000_000}M records" for n in data["records"]]
    figure, (cold, hot) = plt.subplots(1, 2, figsize=(9, 4.2), dpi=110)
    figure.text(
        0.01, 0.01, "1,000-key batches, 4 connections, quiet 2-core machine", fontsize=7.5, color="#555"
    )
    width = 0.2
    colors = {"HTTP JSON": OURS, "HTTP Arrow": LIGHT, "in-process view().get_many": OTHER, "Redis MGET": PEER}
    for i, (name, color) in enumerate(colors.items()):
        values = [v / 1e3 for v in data["cold"][name]]
        xs = [x + (i - 1.5) * width for x in range(len(sizes))]
        bars = cold.bar(xs, values, width, label=name, color=color)
        _label_bars(cold, bars, [f"{v:.0f}" for v in values])
    cold.set_title("Cold keys (not cached anywhere)", fontsize=11, loc="left")
    cold.set_ylabel("thousand keys per second")
    cold.set_xticks(range(len(sizes)), sizes)
    cold.legend(fontsize=8, frameon=False, loc="upper right")
    width = 0.3
    for i, (name, color) in enumerate([("HTTP JSON", OURS), ("HTTP Arrow", LIGHT)]):
        shares = [100 * v for v in data["hot_share_of_mget"][name]]
        xs = [x + (i - 0.5) * width for x in range(len(sizes))]
        bars = hot.bar(xs, shares, width, label=name, color=color)
        _label_bars(hot, bars, [f"{v:.0f}%" for v in shares])
    hot.axhline(100, color=PEER, linestyle="--", linewidth=1.2, label="Redis MGET")
    hot.set_title("Hot keys, as a share of Redis MGET", fontsize=11, loc="left")
    hot.set_ylabel("% of Redis MGET keys/s")
    hot.set_xticks(range(len(sizes)), sizes)
    hot.legend(fontsize=8, frameon=False, loc="upper left")
    for axes in (cold, hot):
        axes.spines[["top", "right"]].set_visible(False)
    return _save(figure, out, "reads")


def spark(results: Path, out: Path) -> Path:
    data = _load(results, "spark")
    names = list(data["contenders"])
    seconds = [data["contenders"][name]["seconds"] for name in names]
    colors = [PEER, OURS, OURS, OTHER]
    figure, axes = _figure("Spark: 1M facts joined to 100k products", data["setup"])
    contenders = data["contenders"]
    texts = [
        f" {contenders[n]['seconds']:.2f} s ({contenders[n]['rows_per_second'] / 1e6:.2f}M rows/s)"
        for n in names
    ]
    _horizontal_bars(axes, names, seconds, colors, texts)
    axes.set_xlabel("seconds for the whole join (lower is better)")
    axes.set_xlim(0, max(seconds) * 1.4)
    return _save(figure, out, "spark")


def freshness(results: Path, out: Path) -> Path:
    data = _load(results, "freshness")
    runs = data["runs"]
    labels = [run["label"] for run in runs]
    figure, axes = _figure("Write to visible at 50k updates/s (p99, lower is better)", data["setup"])
    width = 0.35
    xs = list(range(len(runs)))
    ours = axes.bar(
        [x - width / 2 for x in xs], [r["store_p99"] for r in runs], width, label="statestore", color=OURS
    )
    bare = [r["bare_p99"] for r in runs]
    peer = axes.bar([x + width / 2 for x in xs], bare, width, label="bare consumer (same broker)", color=PEER)
    _label_bars(axes, ours, [f"{r['store_p99']} ms" for r in runs])
    _label_bars(axes, peer, [f"{v} ms" for v in bare])
    axes.axhline(data["target_p99_ms"], color="#333", linestyle=":", linewidth=1, label="target (100 ms)")
    axes.set_xticks(xs, labels)
    axes.set_ylabel("milliseconds, 99th percentile")
    axes.legend(fontsize=8, frameon=False)
    return _save(figure, out, "freshness")


PLOTS = (bootstrap, reads, spark, freshness)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench plots", description=__doc__)
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the result files are")
    parser.add_argument("--out", type=Path, default=OUT, help="where the PNG files go")
    args = parser.parse_args(argv)
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    args.out.mkdir(parents=True, exist_ok=True)
    for plot in PLOTS:
        print(plot(args.results, args.out))
    return 0
