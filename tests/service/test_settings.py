"""Configuration: YAML file, STATESTORE_ environment overrides, validation, secrets."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

import service.engine_settings as engine_settings_module
from service.app import create_app
from service.exceptions import ConfigError
from service.memory_limit import memory_limit
from service.settings import load_settings, store_configs
from store import HistorySpec, IndexSpec, Store, StoreTuning
from store.tuning import RocksDBOptions

YAML = """
kafka:
  bootstrap_servers: "10.0.0.1:9092"
  security.protocol: SASL_SSL
  sasl.mechanism: PLAIN
  sasl.username: reader
  sasl.password: hunter2-file
  enable.ssl.certificate.verification: false
state_dir: /var/lib/statestore
http:
  host: 0.0.0.0
  port: 8080
  tls: {certfile: /tls/cert.pem, keyfile: /tls/key.pem}
stores:
  - name: products
    topic: products-v1
    value_format: json
    indexes:
      - {name: by_category, field: category}
    history: {retention_ms: 86400000}
    engine: {verify_interval_seconds: 0, block_cache_bytes: 1GiB, checkpoint_interval_seconds: 10,
             bulk_load_workers: 6}
  - name: customers
    topic: customers
engine:
  block_cache_bytes: 128MiB
  write_buffer_bytes: 16777216
  read_cache_entries: 0
  verify_bytes_per_second: 4MiB
  max_concurrent_bulk_restores: 2
limits:
  max_batch_keys: 500
auth:
  mode: tokens
  tokens:
    - name: analytics
      sha256: "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
      stores: [products]
"""


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("STATESTORE_"):
            monkeypatch.delenv(name)
    path = tmp_path / "statestore.yaml"
    path.write_text(YAML)
    return path


def test_yaml_file_is_read(config_file: Path) -> None:
    settings = load_settings(config_file)
    assert settings.state_dir == Path("/var/lib/statestore")
    assert settings.http.host == "0.0.0.0"
    assert settings.http.tls is not None
    assert settings.http.tls.certfile == Path("/tls/cert.pem")
    assert [s.name for s in settings.stores] == ["products", "customers"]
    products = settings.stores[0]
    assert (products.topic, products.value_format) == ("products-v1", "json")
    assert products.indexes[0].field == "category"
    assert products.history is not None
    assert products.history.retention_ms == 86_400_000
    assert settings.stores[1].value_format == "bytes"
    assert settings.limits.max_batch_keys == 500
    assert settings.limits.max_scan_limit == 10_000
    assert settings.auth.tokens[0].stores == ["products"]


def test_kafka_settings_pass_through_to_librdkafka(config_file: Path) -> None:
    kafka = load_settings(config_file).librdkafka_config()
    assert kafka == {
        "bootstrap.servers": "10.0.0.1:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "reader",
        "sasl.password": "hunter2-file",
        "enable.ssl.certificate.verification": "false",
    }


def test_secrets_are_never_shown(config_file: Path) -> None:
    settings = load_settings(config_file)
    assert "hunter2" not in repr(settings)
    assert "hunter2" not in str(settings)
    assert "hunter2" not in settings.model_dump_json()


def test_environment_wins_over_the_file(config_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATESTORE_HTTP__PORT", "9999")
    monkeypatch.setenv("STATESTORE_STATE_DIR", "/tmp/elsewhere")
    monkeypatch.setenv("STATESTORE_KAFKA__BOOTSTRAP_SERVERS", "broker:29092")
    monkeypatch.setenv("STATESTORE_KAFKA__SASL_PASSWORD", "from-env")
    monkeypatch.setenv("STATESTORE_LIMITS__MAX_BATCH_KEYS", "42")
    settings = load_settings(config_file)
    assert settings.http.port == 9999
    assert settings.http.host == "0.0.0.0"  # untouched keys stay from the file
    assert settings.state_dir == Path("/tmp/elsewhere")
    assert settings.limits.max_batch_keys == 42
    kafka = settings.librdkafka_config()
    assert kafka["bootstrap.servers"] == "broker:29092"
    assert kafka["sasl.password"] == "from-env"
    assert kafka["security.protocol"] == "SASL_SSL"


def test_environment_alone_with_json_stores(monkeypatch: pytest.MonkeyPatch, config_file: Path) -> None:
    monkeypatch.setenv("STATESTORE_STORES", '[{"name": "t1", "topic": "topic-1", "value_format": "string"}]')
    settings = load_settings()
    assert [(s.name, s.topic, s.value_format) for s in settings.stores] == [("t1", "topic-1", "string")]
    assert settings.librdkafka_config() == {"bootstrap.servers": "127.0.0.1:9092"}


def test_store_configs_for_the_engine(config_file: Path) -> None:
    configs = store_configs(load_settings(config_file))
    assert [(c.name, c.topic) for c in configs] == [("products", "products-v1"), ("customers", "customers")]
    assert configs[0].path == Path("/var/lib/statestore/products")
    assert configs[0].kafka["bootstrap.servers"] == "10.0.0.1:9092"
    assert configs[0].indexes == (IndexSpec(name="by_category", field="category"),)
    assert configs[0].history == HistorySpec(retention_ms=86_400_000)
    assert (configs[1].indexes, configs[1].history) == ((), None)


def test_engine_settings_apply_to_every_store_and_a_store_overrides_them(config_file: Path) -> None:
    products, customers = (c.tuning for c in store_configs(load_settings(config_file)))
    default = StoreTuning()
    assert customers == default.replace(
        block_cache_bytes=128 * 2**20,
        write_buffer_bytes=16 * 2**20,
        read_cache_entries=0,
        verify_bytes_per_second=4 * 2**20,
    )
    assert products == customers.replace(
        block_cache_bytes=2**30,
        checkpoint_interval_seconds=10,
        bulk_load_workers=6,
        verify_interval_seconds=0,
    )
    assert products.rocksdb.block_cache_bytes == 2**30
    assert products.maintenance.checkpoint_interval_seconds == 10
    assert products.restore.bulk_load_workers == 6
    assert products.maintenance.verify_interval_seconds == 0
    assert type(products.rocksdb.block_cache_bytes) is int


def test_without_an_engine_section_the_engine_defaults_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATESTORE_STORES", '[{"name": "t1", "topic": "topic-1"}]')
    settings = load_settings()
    shared_cache = {"block_cache_bytes": memory_limit().bytes // 2, "share_block_cache": True}
    assert [c.tuning for c in store_configs(settings)] == [StoreTuning().replace(**shared_cache)]
    assert settings.engine.max_concurrent_bulk_restores == 1


def test_the_stores_of_a_service_share_one_bulk_restore_limit(config_file: Path) -> None:
    app = create_app(load_settings(config_file))  # builds the stores; starting them waits for lifespan
    stores = [served.store for served in app.state.registry.all()]
    assert len(stores) == 2
    assert all(isinstance(store, Store) for store in stores)
    slots = {id(store.restore_slots) for store in stores if isinstance(store, Store)}
    assert len(slots) == 1
    assert stores[0].restore_slots.limit == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("replace", "by", "message"),
    [
        ("name: customers", "name: products", "unique"),
        ("name: customers", "name: ../etc", "directory name"),
        ("value_format: json", "value_format: xml", "value_format"),
        ("max_batch_keys: 500", "max_batch_keys: 0", "max_batch_keys"),
        ("port: 8080", "port: 99999", "port"),
        ("stores: [products]", "stores: [nope]", "unknown stores"),
        ("stores: [products]", "stores: []", "names no stores"),
        ("stores: [products]", "stores: ['*', products]", '"*" with other stores'),
        ('sha256: "2bb8', 'sha256: "zz', "sha256"),
        ("mode: tokens", "mode: maybe", "mode"),
        ("mode: tokens", "mode: open\n  metrics: token", "auth.metrics is 'token'"),
        ("field: category", "field: a..b", "dotted path"),
        ("retention_ms: 86400000", "retention_ms: 0", "retention_ms"),
        (
            "  - name: customers\n    topic: customers",
            "  - name: customers\n    topic: customers\n    indexes: [{name: i, field: f}]",
            "value_format: json",
        ),
        ("http:", "htttp:", "htttp"),
        ("block_cache_bytes: 128MiB", "block_cache_bytes: lots", "block_cache_bytes"),
        ("block_cache_bytes: 128MiB", "block_cache_bytes: 1KiB", "block_cache_bytes"),
        ("read_cache_entries: 0", "read_cache_entries: -1", "read_cache_entries"),
        ("limits:", "sharding: {shards: 3, shard: 3}\nlimits:", "numbered 0 to 2"),
        ("limits:", "sharding: {shards: 0}\nlimits:", "sharding.shards"),
        ("    topic: customers", "    topic: customers\n    partitioner: djb2", "partitioner"),
        (
            "max_concurrent_bulk_restores: 2",
            "max_concurrent_bulk_restores: 0",
            "max_concurrent_bulk_restores",
        ),
        (
            "bulk_load_workers: 6}",
            "bulk_load_workers: 6, max_concurrent_bulk_restores: 2}",
            "max_concurrent_bulk_restores",
        ),
        ("read_cache_entries: 0", "read_cache_bytes: 0", "read_cache_bytes"),
    ],
)
def test_invalid_settings_are_named(config_file: Path, replace: str, by: str, message: str) -> None:
    config_file.write_text(YAML.replace(replace, by))
    with pytest.raises(ConfigError, match=message):
        load_settings(config_file)


def test_sharding_comes_from_the_environment_and_partitioners_per_store(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file.write_text(
        YAML.replace("    topic: customers", "    topic: customers\n    partitioner: crc32")
    )
    assert load_settings(config_file).sharding.shards == 1
    monkeypatch.setenv("STATESTORE_SHARDING__SHARDS", "3")
    monkeypatch.setenv("STATESTORE_SHARDING__SHARD", "2")
    settings = load_settings(config_file)
    assert (settings.sharding.shards, settings.sharding.shard) == (3, 2)
    assert [s.partitioner for s in settings.stores] == ["murmur2", "crc32"]


def test_missing_and_unparsable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("kafka: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(bad)
    bad.write_text("- a list")
    with pytest.raises(ConfigError, match="mapping"):
        load_settings(bad)


def test_an_auto_block_cache_is_shared_and_half_the_memory_limit(config_file: Path) -> None:
    config_file.write_text(YAML.replace("block_cache_bytes: 128MiB", "block_cache_bytes: auto"))
    products, customers = (c.tuning.rocksdb for c in store_configs(load_settings(config_file)))
    assert customers.share_block_cache
    assert customers.block_cache_bytes == memory_limit().bytes // 2
    # A store given a size keeps a cache of its own.
    assert not products.share_block_cache
    assert products.block_cache_bytes == 2**30


def test_an_auto_block_cache_without_a_memory_limit_to_read_says_what_to_do(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreadable() -> None:
        raise OSError("cannot read a memory limit from /sys/fs/cgroup or /proc/meminfo")

    monkeypatch.setattr(engine_settings_module, "memory_limit", unreadable)
    config_file.write_text(YAML.replace("block_cache_bytes: 128MiB", "block_cache_bytes: auto"))
    with pytest.raises(ConfigError, match=r"block_cache_bytes is auto, but cannot read .*give it a size"):
        store_configs(load_settings(config_file))


def test_by_default_the_stores_share_a_block_cache_of_half_the_memory_limit(config_file: Path) -> None:
    config_file.write_text(YAML.replace("  block_cache_bytes: 128MiB\n", ""))
    products, customers = (c.tuning.rocksdb for c in store_configs(load_settings(config_file)))
    assert customers.share_block_cache
    assert customers.block_cache_bytes == memory_limit().bytes // 2
    assert not products.share_block_cache  # its own engine section gives a size
    assert products.block_cache_bytes == 2**30


def test_by_default_without_a_memory_limit_each_store_keeps_its_own_cache_and_it_is_logged(
    config_file: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def unreadable() -> None:
        raise OSError("cannot read a memory limit from /sys/fs/cgroup or /proc/meminfo")

    monkeypatch.setattr(engine_settings_module, "memory_limit", unreadable)
    engine_settings_module._warn_no_memory_limit.cache_clear()  # logged once per reason: let it log again
    config_file.write_text(YAML.replace("  block_cache_bytes: 128MiB\n", ""))
    with caplog.at_level(logging.WARNING, logger="service.engine_settings"):
        customers = store_configs(load_settings(config_file))[1].tuning.rocksdb
    assert not customers.share_block_cache
    assert customers.block_cache_bytes == RocksDBOptions().block_cache_bytes
    assert "each store gets a cache of 256 MiB instead" in caplog.text
    assert "cannot read a memory limit" in caplog.text


_SECOND_TOKEN = """
    - name: {name}
      sha256: "{digest}"
      stores: ["*"]
"""


@pytest.mark.parametrize(
    ("name", "digest", "named"),
    [
        # The same digest in another case is the same token.
        ("admin", "2BB80D537B1DA3E38BD30361AA855686BDE0EACD7162FEF6A25FE97BF527A25B", "the same sha256"),
        ("analytics", "0" * 64, "the same name"),
    ],
)
def test_one_credential_meaning_two_things_is_refused(
    config_file: Path, name: str, digest: str, named: str
) -> None:
    config_file.write_text(YAML + _SECOND_TOKEN.format(name=name, digest=digest))
    with pytest.raises(ConfigError) as refused:
        load_settings(config_file)
    message = str(refused.value)
    assert "\n" not in message
    assert f"auth.tokens[0] ('analytics') and auth.tokens[1] ('{name}') have {named}" in message
    assert "of its own" in message


def test_distinct_tokens_load(config_file: Path) -> None:
    config_file.write_text(YAML + _SECOND_TOKEN.format(name="admin", digest="0" * 64))
    assert [t.name for t in load_settings(config_file).auth.tokens] == ["analytics", "admin"]
