"""The statestore command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from service.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv", [["--help"], ["serve", "--help"], ["demo", "--help"], ["version", "--help"]])
def test_help_completes(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 0
    assert "usage: statestore" in capsys.readouterr().out


def test_demo_arguments() -> None:
    args = build_parser().parse_args(
        [
            "demo",
            "--bootstrap-servers",
            "h:1",
            "--service-url",
            "http://s",
            "--step",
            "seed",
            "--purchases",
            "7",
            "--state-dir",
            "/tmp/d",
        ]
    )
    assert (args.bootstrap_servers, args.service_url, args.step, args.purchases) == (
        "h:1",
        "http://s",
        "seed",
        7,
    )
    assert args.state_dir == Path("/tmp/d")
    defaults = build_parser().parse_args(["demo"])
    assert (defaults.step, defaults.bootstrap_servers, defaults.service_url) == ("all", None, None)


def test_bad_step_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--step", "everything"])
    assert exited.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out.startswith("statestore ")


def test_serve_with_invalid_config_exits_2_naming_the_problem(tmp_path: Path) -> None:
    config = tmp_path / "statestore.yaml"
    config.write_text("stores:\n  - {name: a, topic: t}\n  - {name: a, topic: u}\n")
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 2
    assert "unique" in done.stderr


def test_console_script_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0
    assert "serve" in done.stdout
    assert "demo" in done.stdout
