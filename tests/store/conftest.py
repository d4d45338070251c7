"""Factories for the store tests: real stores on the session broker, and test-owned brokers."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from service.local.broker import LocalBroker
from store import (
    HistorySpec,
    IndexSpec,
    RestoreSlots,
    Store,
    StoreConfig,
    StoreError,
    StoreSharding,
    StoreTuning,
)
from store.formats import Codec, ValueCodec
from tests.support.kafka import TestProducer, close_producer, close_producers, make_producer
from tests.support.stores import FAST


@pytest.fixture
def make_store(broker: LocalBroker, state_dir: Path) -> Iterator[Callable[..., Store]]:
    """Factory: a started real ``Store`` over ``topic``; every store is stopped at teardown.

    Defaults: the session broker, the test's state dir, store name ``s``, ``FAST`` tuning, no
    indexes, no history, one bulk restore at a time among this test's stores.
    """
    stores: list[Store] = []
    slots = RestoreSlots(1)  # per test: a store another test left behind cannot hold the slot

    def make(
        topic: str,
        *,
        name: str = "s",
        tuning: StoreTuning = FAST,
        bootstrap_servers: str | None = None,
        directory: Path | None = None,
        kafka: dict[str, str] | None = None,
        start: bool = True,
        indexes: tuple[IndexSpec, ...] = (),
        history: HistorySpec | None = None,
        restore_slots: RestoreSlots | None = None,
        sharding: StoreSharding | None = None,
        json_values: bool = False,
        value_codec: ValueCodec | None = None,
        key_codec: Codec | None = None,
    ) -> Store:
        config = StoreConfig(
            name=name,
            topic=topic,
            kafka={"bootstrap.servers": bootstrap_servers or broker.bootstrap_servers, **(kafka or {})},
            state_dir=directory or state_dir,
            tuning=tuning,
            indexes=indexes,
            history=history,
            sharding=sharding or StoreSharding(),
            json_values=json_values,
            value_codec=value_codec,
            key_codec=key_codec,
        )
        store = Store(config, restore_slots or slots)
        stores.append(store)
        if start:
            store.start()
        return store

    yield make
    for store in reversed(stores):
        with contextlib.suppress(StoreError):
            store.stop()


@pytest.fixture
def producer(broker: LocalBroker) -> Iterator[TestProducer]:
    """An idempotent producer on the session broker (per-partition order survives retries)."""
    made = make_producer(broker.bootstrap_servers, **{"enable.idempotence": "true"})
    yield made
    close_producer(made)


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalBroker]:
    """A broker this test alone uses, so it may stop, restart or inspect it freely."""
    with LocalBroker(log_path=tmp_path / "tansu.log") as running:
        yield running
        close_producers(running.bootstrap_servers)
