"""What the demo prints: numbered stage lines, indented details, tables and a live progress line."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any, TextIO


class Console:
    """Writes the demo's human-readable output to ``stream`` (stdout by default).

    A progress line is rewritten in place on a terminal; elsewhere (a log file, a pipe) only the
    lines passed with ``final=True`` are written, so captured output stays short.
    """

    def __init__(self, total_stages: int, stream: TextIO | None = None) -> None:
        self.total_stages = total_stages
        self.stream = stream or sys.stdout
        self.interactive = self.stream.isatty()
        self._stage = 0
        self._progress_open = False
        self._closed = False

    def _write(self, text: str) -> None:
        if self._closed:
            return
        try:
            if self._progress_open:
                self.stream.write("\n")
                self._progress_open = False
            self.stream.write(text + "\n")
            self.stream.flush()
        except BrokenPipeError:
            # The reader went away (e.g. `| head`): the demo still runs and shuts down cleanly.
            self._closed = True

    def stage(self, text: str) -> None:
        """``[n/total] text``: the start of the next stage."""
        self._stage += 1
        self._write(f"[{self._stage}/{self.total_stages}] {text}")

    def detail(self, text: str = "") -> None:
        """An indented line under the current stage."""
        self._write(f"      {text}" if text else "")

    def block(self, lines: Sequence[str]) -> None:
        for line in lines:
            self.detail(line)

    def progress(self, text: str, *, final: bool = False) -> None:
        """A status line that replaces the previous one on a terminal."""
        if self.interactive and not self._closed:
            self.stream.write(f"\r      {text}\033[K")
            self._progress_open = True
            if final:
                self.stream.write("\n")
                self._progress_open = False
            self.stream.flush()
        elif final:
            self._write(f"      {text}")

    def error(self, text: str) -> None:
        self._write(f"error: {text}")

    def notice(self, text: str) -> None:
        """A line outside the stages that is not an error, e.g. that a Ctrl-C stops the demo."""
        self._write(text)


def format_cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], max_width: int = 26) -> list[str]:
    """A plain-text table: a header, a rule, one line per row; numbers right-aligned, nulls as ``-``."""
    cells = [[format_cell(v) for v in row] for row in rows]
    cells = [[c if len(c) <= max_width else c[: max_width - 1] + "…" for c in row] for row in cells]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]
    numeric = [_numeric(row[i] for row in rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if right else v.ljust(w) for v, w, right in zip(values, widths, numeric, strict=True)
        ).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(row) for row in cells)]


def _numeric(column: Iterable[Any]) -> bool:
    """Whether a column holds numbers (and nulls) only, one at least: those are right-aligned."""
    values = [value for value in column if value is not None]
    return bool(values) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.2f} %" if whole else "n/a"


def seconds(value: float) -> str:
    return f"{value:.1f} s" if value >= 1 else f"{value * 1000:.0f} ms"
