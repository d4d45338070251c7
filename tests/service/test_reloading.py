"""service.reloading: files are checked at most once an interval, a change is built once, a bad one
keeps the value in use (unit tests with a clock of their own; real files)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from service.exceptions import ConfigError
from service.reloading import Reloading


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_changes_are_taken_once_an_interval_and_bad_ones_keep_the_value(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = tmp_path / "value.txt"
    source.write_text("1")
    builds: list[str] = []

    def build() -> int:
        text = source.read_text()
        builds.append(text)
        if not text.isdigit():
            raise ConfigError(f"value.txt: {text!r} is not a number")
        return int(text)

    clock = Clock()
    value = Reloading("number", [source], build, interval_seconds=10, clock=clock)
    assert (value.current(), builds) == (1, ["1"])
    source.write_text("2")
    clock.now = 9.9
    assert value.current() == 1  # not checked before the interval
    clock.now = 10
    assert value.current() == 2
    assert value.current() == 2
    clock.now = 30
    assert value.current() == 2
    assert builds == ["1", "2"]  # unchanged files are not built again
    # Only what this bad change logs (a CLI test run earlier may leave the root logger at INFO,
    # which lets the reload above into the records).
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="service.reloading"):
        source.write_text("two")
        for now in (40, 50, 60):  # one line for one bad change, however often it is checked
            clock.now = now
            assert value.current() == 2
    assert [r.getMessage() for r in caplog.records] == [
        "kept the number in use: its files changed but cannot be used: value.txt: 'two' is not a number;"
        " fix or replace the files (they are checked again every 10 s, no restart needed)"
    ]
    assert (value.reloads, value.failures) == (1, 1)
    # A file gone in the middle of a rotation is a change that cannot be built, whatever the error.
    source.unlink()
    clock.now = 70
    with caplog.at_level(logging.ERROR, logger="service.reloading"):
        assert value.current() == 2
    assert "FileNotFoundError" in caplog.records[-1].getMessage()
    source.write_text("3")
    clock.now = 80
    assert value.current() == 3


def test_a_file_that_cannot_be_built_at_start_raises(tmp_path: Path) -> None:
    def build() -> int:
        raise ConfigError("bad at start")

    with pytest.raises(ConfigError, match="bad at start"):
        Reloading("number", [tmp_path / "missing"], build, interval_seconds=1)
