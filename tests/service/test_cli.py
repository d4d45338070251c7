"""The statestore command line."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from service.cli import build_parser, main
from service.local_broker import free_port

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


def test_serve_over_tls_with_overrides(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    config = tmp_path / "statestore.yaml"
    config.write_text(
        f"state_dir: {tmp_path / 'state'}\n"
        f"http: {{host: 0.0.0.0, port: 1, tls: {{certfile: {cert}, keyfile: {key}}}}}\n"
    )
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "service.cli",
            "serve",
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        answer = None
        with httpx.Client(verify=False, timeout=5) as client:
            while answer is None and time.monotonic() < deadline and process.poll() is None:
                try:
                    answer = client.get(f"https://127.0.0.1:{port}/readyz")
                except httpx.TransportError:
                    time.sleep(0.1)
        assert answer is not None, "the service never answered over TLS"
        assert answer.status_code == 200
        assert answer.json() == {"status": "ready", "stores": {}}
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert f"listening on 127.0.0.1:{port} (TLS)" in output
