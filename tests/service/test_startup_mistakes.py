"""Start-up mistakes end ``statestore serve`` with exit 2 and one line, before any store opens."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from service.local.broker import free_port

REPO = Path(__file__).resolve().parents[2]
STATESTORE = Path(sys.executable).parent / "statestore"


def _config(state_dir: Path, host: str, port: int) -> str:
    return (
        f"kafka: {{bootstrap_servers: '127.0.0.1:1'}}\nstate_dir: {state_dir}\n"
        f"http: {{host: '{host}', port: {port}}}\n"
        "stores: [{name: products, topic: products, value_format: json}]\n"
    )


def _serve(
    config: Path, env: dict[str, str] | None = None, *options: str
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("STATESTORE_")}
    return subprocess.run(
        [str(STATESTORE), "serve", "--config", str(config), *options],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
        env={**environment, **(env or {})},
    )


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(lines) == 1, lines
    assert " ERROR " in lines[0]
    assert "Traceback" not in done.stderr
    return lines[0]


def test_a_port_in_use_is_one_line_and_no_store_is_opened(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        config = tmp_path / "statestore.yaml"
        config.write_text(_config(state_dir, "127.0.0.1", port))
        line = _one_error_line(_serve(config))
    assert f"http.port: 127.0.0.1:{port} is already in use" in line
    assert "choose another port" in line
    # Refused before any store was opened: no store directory, no lock, no restore.
    assert not (state_dir / "products").exists()


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_a_port_out_of_range_on_the_command_line_is_one_line(tmp_path: Path, port: str) -> None:
    config = tmp_path / "statestore.yaml"
    config.write_text(_config(tmp_path / "state", "127.0.0.1", free_port()))
    line = _one_error_line(_serve(config, None, f"--port={port}"))
    assert f"http.port: {port} is not a port" in line


def test_an_unresolvable_host_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "statestore.yaml"
    config.write_text(_config(tmp_path / "state", "no-such-host.invalid", free_port()))
    line = _one_error_line(_serve(config))
    assert "http.host: cannot resolve 'no-such-host.invalid'" in line
    assert not (tmp_path / "state" / "products").exists()


def test_a_host_that_is_not_this_machines_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "statestore.yaml"
    config.write_text(_config(tmp_path / "state", "192.0.2.1", free_port()))  # TEST-NET-1
    line = _one_error_line(_serve(config))
    assert "http.host: '192.0.2.1'" in line
    assert "not an address of this machine" in line


@pytest.mark.parametrize("variable", ["STATESTORE_STORES", "statestore_stores"])
def test_a_variable_that_is_not_json_is_one_line(tmp_path: Path, variable: str) -> None:
    config = tmp_path / "statestore.yaml"
    config.write_text(_config(tmp_path / "state", "127.0.0.1", free_port()))
    line = _one_error_line(_serve(config, {variable: "notjson"}))
    assert f"{variable} is not valid JSON" in line
    assert "give lists and mappings as JSON" in line


def test_a_configuration_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "statestore.yaml"
    config.write_bytes(_config(tmp_path / "state", "127.0.0.1", free_port()).encode() + b"# caf\xe9\n")
    line = _one_error_line(_serve(config))
    assert f"configuration file {config} is not UTF-8 text" in line
    assert "0xe9" in line


def test_tokens_meaning_two_things_are_one_line(tmp_path: Path) -> None:
    digest = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
    config = tmp_path / "statestore.yaml"
    config.write_text(
        _config(tmp_path / "state", "127.0.0.1", free_port())
        + "auth:\n  mode: tokens\n  tokens:\n"
        + f"    - {{name: etl, sha256: '{digest}', stores: [products]}}\n"
        + f"    - {{name: admin, sha256: '{digest}', stores: ['*']}}\n"
    )
    line = _one_error_line(_serve(config))
    assert "auth.tokens[0] ('etl') and auth.tokens[1] ('admin') have the same sha256" in line
    assert not (tmp_path / "state" / "products").exists()
