"""How the materializer reacts to the topic's metadata changing under it (pure decision logic).

The local broker cannot add partitions to a topic (no CreatePartitions), so live growth is shown
here against a recorded consumer; deletion and recreation are also shown end to end with the real
broker in ``test_recovery.py`` and ``tests/faults/test_broker_outage.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

import store.materializer as materializer_module
from store import StoreConfig
from store.kafka import RebuildRequired, TopicInfo, TransientSourceError
from store.materializer import Materializer
from store.restore_slots import RestoreSlots


class RecordingConsumer:
    def __init__(self) -> None:
        self.added: list[TopicPartition] = []

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.added += partitions


def check(
    monkeypatch: pytest.MonkeyPatch, now: TopicInfo | None, partitions: int = 2
) -> tuple[int, Any, dict[int, int]]:
    monkeypatch.setattr(materializer_module, "describe_topic", lambda admin, name, timeout: now)
    materializer = Materializer(
        StoreConfig("s", "t", {"bootstrap.servers": "unused:9092"}, Path("unused")),
        None,  # type: ignore[arg-type]
        RestoreSlots(1),
    )
    consumer = RecordingConsumer()
    targets = dict.fromkeys(range(partitions), 100)
    before = TopicInfo("t", "id-1", partitions)
    grown = materializer._check_metadata(consumer, None, before, partitions, targets)  # type: ignore[arg-type]
    return grown, consumer, targets


def test_new_partitions_are_assigned_from_their_start_and_join_the_targets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    grown, consumer, targets = check(monkeypatch, TopicInfo("t", "id-1", 4))
    assert grown == 4
    assert [(tp.topic, tp.partition, tp.offset) for tp in consumer.added] == [
        ("t", 2, OFFSET_BEGINNING),
        ("t", 3, OFFSET_BEGINNING),
    ]
    assert targets == {0: 100, 1: 100, 2: 0, 3: 0}


def test_unchanged_metadata_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    grown, consumer, targets = check(monkeypatch, TopicInfo("t", "id-1", 2))
    assert (grown, consumer.added, targets) == (2, [], {0: 100, 1: 100})


def test_fewer_partitions_or_a_new_topic_id_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RebuildRequired, match="shrank from 2 to 1"):
        check(monkeypatch, TopicInfo("t", "id-1", 1))
    with pytest.raises(RebuildRequired, match="deleted and recreated"):
        check(monkeypatch, TopicInfo("t", "id-2", 2))


def test_a_deleted_topic_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TransientSourceError, match="was deleted"):
        check(monkeypatch, None)
