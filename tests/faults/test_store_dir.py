"""A store directory that is corrupt, missing files, or from an incompatible version: the service
starts, rebuilds the store from the topic, logs why, and never exits (no crash loop)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
import rocksdict

from service.local.broker import LocalBroker
from store import Position
from tests.faults.conftest import ServiceFactory
from tests.support.kafka import create_topic, latest_per_key, make_producer
from tests.support.stores import mixed_records, produce_tracked

pytestmark = pytest.mark.slow


def corrupt(db: Path) -> None:
    for path in db.iterdir():
        if path.name == "CURRENT" or path.name.startswith("MANIFEST") or path.suffix == ".sst":
            path.write_bytes(os.urandom(max(path.stat().st_size, 64)))


def missing_files(db: Path) -> None:
    tables = [path for path in db.iterdir() if path.suffix == ".sst"]
    assert tables, sorted(p.name for p in db.iterdir())
    for path in tables:
        path.unlink()


def incompatible_version(db: Path) -> None:
    families = rocksdict.Rdict.list_cf(str(db))
    options = rocksdict.Options(raw_mode=True)
    opened = rocksdict.Rdict(str(db), options, column_families=dict.fromkeys(families, options))
    try:
        opened.get_column_family("meta")[b"format_version"] = b"0"
        opened.flush()
    finally:
        opened.close()


DAMAGES = {
    "corrupt": (corrupt, "cannot open the RocksDB database"),
    "missing-files": (missing_files, "cannot open the RocksDB database"),
    "incompatible-version": (incompatible_version, "has format version b'0'"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_store_directory_is_rebuilt_from_the_topic_and_the_reason_logged(
    own_broker: LocalBroker, start_service: ServiceFactory, tmp_path: Path, damage: str
) -> None:
    servers = own_broker.bootstrap_servers
    create_topic(servers, "items", partitions=3)
    records = mixed_records(3_000, keys=600, seed=21)
    end = produce_tracked(make_producer(servers), "items", records)
    model = latest_per_key(records)
    stores = [{"name": "items", "topic": "items", "value_format": "bytes"}]
    first = start_service(servers, stores)
    first.wait_ready()
    assert first.terminate() in (0, -15)

    damage_db, reason = DAMAGES[damage]
    damage_db(tmp_path / "state" / "items" / "db")

    second = start_service(servers, stores)
    second.wait_ready()  # fails if the process exits meanwhile
    info = second.info("items")
    assert Position.parse(info["position"]) == end
    assert info["records_applied_total"] == len(records), "the store was not rebuilt from the start"
    keys = sorted({key for key, _ in records if key is not None})
    answer = second.client.post(
        "/v1/stores/items/keys:batchGet", json={"keys": [key.decode() for key in keys]}
    )
    values = answer.json()["values"]
    assert {key: value for key, value in zip(keys, values, strict=True) if value is not None} == {
        key: base64.b64encode(value).decode() for key, value in model.items()
    }
    assert reason in second.log
    assert "will be rebuilt from the topic" in second.log
    assert second.process.poll() is None
