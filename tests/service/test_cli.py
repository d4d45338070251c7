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
from service.local.broker import free_port

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


def serve_once(config: Path) -> subprocess.CompletedProcess[str]:
    """``statestore serve --config config`` run to its end (what a configuration mistake gives)."""
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )


def test_serve_with_invalid_config_exits_2_naming_the_problem(tmp_path: Path) -> None:
    config = tmp_path / "statestore.yaml"
    config.write_text("stores:\n  - {name: a, topic: t}\n  - {name: a, topic: u}\n")
    done = serve_once(config)
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
    cert, key = _self_signed(tmp_path, "service")
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


def _self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def _config_mistake(tmp_path: Path, mistake: str) -> str:
    """A configuration (YAML) with one mistake; everything else would serve a store."""
    state_dir: Path = tmp_path / "state"
    kafka = "{bootstrap_servers: '127.0.0.1:1'}"
    tls = ""
    if mistake == "missing certificate":
        _, key = _self_signed(tmp_path, "a")
        tls = f", tls: {{certfile: {tmp_path / 'nowhere.pem'}, keyfile: {key}}}"
    elif mistake == "mismatched key":
        cert, _ = _self_signed(tmp_path, "a")
        _, other = _self_signed(tmp_path, "b")
        tls = f", tls: {{certfile: {cert}, keyfile: {other}}}"
    elif mistake == "unknown kafka property":
        kafka = "{bootstrap_servers: '127.0.0.1:1', fetch.wait.max.millis: 10}"
    elif mistake == "unwritable state_dir":
        (tmp_path / "a-file").write_text("not a directory\n")
        state_dir = tmp_path / "a-file" / "state"
    return (
        f"kafka: {kafka}\nstate_dir: {state_dir}\n"
        f"http: {{host: 127.0.0.1, port: {free_port()}{tls}}}\n"
        "stores: [{name: products, topic: products, value_format: json}]\n"
    )


@pytest.mark.parametrize(
    ("mistake", "named"),
    [
        ("missing certificate", "http.tls.certfile: "),
        ("mismatched key", "http.tls"),
        ("unknown kafka property", 'No such configuration property: "fetch.wait.max.millis"'),
        ("unwritable state_dir", "state_dir"),
    ],
)
def test_a_configuration_mistake_is_one_line_naming_the_setting_and_exit_2(
    tmp_path: Path, mistake: str, named: str
) -> None:
    config = tmp_path / "statestore.yaml"
    config.write_text(_config_mistake(tmp_path, mistake))
    done = serve_once(config)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1, lines
    assert " ERROR " in lines[0]
    assert named in lines[0]
    if mistake == "missing certificate":
        assert f"{tmp_path / 'nowhere.pem'} does not exist" in lines[0]
