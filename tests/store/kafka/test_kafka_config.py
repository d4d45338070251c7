"""Consumer and admin settings: the settings that keep the store from writing to Kafka cannot be
overridden by a user's configuration; other defaults can."""

from __future__ import annotations

from store.kafka.client import admin_config, consumer_config

HOSTILE = {
    "bootstrap.servers": "kafka:9092",
    "enable.auto.commit": True,
    "enable.auto.offset.store": True,
    "enable.partition.eof": False,
    "auto.offset.reset": "earliest",
    "allow.auto.create.topics": True,
    "group.id": "someone-elses-group",
}


def test_owned_settings_win_over_the_users() -> None:
    config = consumer_config("products", HOSTILE)
    assert config["enable.auto.commit"] is False
    assert config["enable.auto.offset.store"] is False
    assert config["enable.partition.eof"] is True
    assert config["auto.offset.reset"] == "error"
    assert config["allow.auto.create.topics"] is False
    assert config["group.id"] == "statestore-products-never-joined"
    assert config["bootstrap.servers"] == "kafka:9092"


def test_defaults_apply_and_users_may_override_them() -> None:
    plain = consumer_config("products", {"bootstrap.servers": "k:9092"})
    assert plain["fetch.queue.backoff.ms"] == 10
    assert plain["client.id"] == "statestore-products"
    tuned = consumer_config(
        "products", {"bootstrap.servers": "k:9092", "fetch.queue.backoff.ms": 50, "client.id": "mine"}
    )
    assert tuned["fetch.queue.backoff.ms"] == 50
    assert tuned["client.id"] == "mine"


def test_security_settings_pass_through_to_both_clients() -> None:
    kafka = {"bootstrap.servers": "k:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}
    assert consumer_config("s", kafka)["security.protocol"] == "SASL_SSL"
    admin = admin_config(kafka)
    assert admin["security.protocol"] == "SASL_SSL"
    assert admin["sasl.mechanism"] == "PLAIN"


def test_admin_settings_drop_consumer_only_keys() -> None:
    admin = admin_config({**HOSTILE, "fetch.queue.backoff.ms": 10, "queued.max.messages.kbytes": 1})
    assert admin["bootstrap.servers"] == "kafka:9092"
    for key in HOSTILE.keys() - {"bootstrap.servers"}:
        assert key not in admin
    assert "fetch.queue.backoff.ms" not in admin
    assert "queued.max.messages.kbytes" not in admin
