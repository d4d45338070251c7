"""Formats in the configuration: ``schema_registry``, ``key_format`` and ``value_format``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service.exceptions import ConfigError
from service.settings import load_settings
from tests.service.test_cli import serve_once


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("STATESTORE_"):
            monkeypatch.delenv(name)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "statestore.yaml"
    path.write_text(text)
    return path


def test_the_registry_section_is_read_and_its_secret_never_shown(tmp_path: Path) -> None:
    settings = load_settings(
        _write(
            tmp_path,
            """
schema_registry:
  url: https://registry.example:8081
  basic_auth_user_info: "reader:hunter2-registry"
  ca_file: /tls/ca.pem
  certfile: /tls/client.pem
  keyfile: /tls/client.key
stores:
  - {name: customers, topic: customers}
""",
        )
    )
    registry = settings.schema_registry
    assert registry is not None
    assert "hunter2" not in repr(settings)
    assert registry.client_config() == {
        "url": "https://registry.example:8081",
        "basic.auth.user.info": "reader:hunter2-registry",
        "ssl.ca.location": "/tls/ca.pem",
        "ssl.certificate.location": "/tls/client.pem",
        "ssl.key.location": "/tls/client.key",
    }
    assert (settings.stores[0].key_format, settings.stores[0].value_format) == ("bytes", "bytes")


def test_the_registry_url_comes_from_the_environment_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATESTORE_SCHEMA_REGISTRY__URL", "http://sr:8081")
    monkeypatch.setenv("STATESTORE_SCHEMA_REGISTRY__BASIC_AUTH_USER_INFO", "u:p")
    settings = load_settings(_write(tmp_path, "stores: []\n"))
    assert settings.schema_registry is not None
    assert settings.schema_registry.client_config() == {
        "url": "http://sr:8081",
        "basic.auth.user.info": "u:p",
    }


@pytest.mark.parametrize(
    ("store", "named"),
    [
        ("{name: c, topic: c, value_format: avro}", "value_format: avro, which needs a Schema Registry"),
        ("{name: c, topic: c, key_format: protobuf}", "key_format: protobuf, which needs a Schema Registry"),
        ("{name: c, topic: c, value_format: json_schema}", "schema_registry.url"),
        ("{name: c, topic: c, value_format: xml}", "stores.0.value_format"),
        ("{name: c, topic: c, key_format: uuid}", "stores.0.key_format"),
    ],
)
def test_format_mistakes_are_config_errors(tmp_path: Path, store: str, named: str) -> None:
    with pytest.raises(ConfigError, match="invalid configuration") as raised:
        load_settings(_write(tmp_path, f"stores:\n  - {store}\n"))
    assert named in str(raised.value)


def test_half_a_client_certificate_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"certfile and schema_registry\.keyfile go together"):
        load_settings(_write(tmp_path, "schema_registry: {url: 'http://sr', certfile: /c.pem}\n"))


def test_a_registry_format_without_registry_exits_2_with_one_line(tmp_path: Path) -> None:
    config = _write(
        tmp_path,
        f"state_dir: {tmp_path / 'state'}\nstores:\n  - {{name: c, topic: c, value_format: avro}}\n",
    )
    done = serve_once(config)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1, lines
    assert "needs a Schema Registry" in lines[0]
