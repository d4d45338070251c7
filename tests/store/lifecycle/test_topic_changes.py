"""How the materializer reacts to the topic's metadata changing under it (pure decision logic).

The local broker cannot add partitions to a topic (no CreatePartitions), so live growth is shown
here against recorded sources; deletion and recreation are also shown end to end with the real
broker in ``test_recovery.py`` and ``tests/faults/test_broker_outage.py``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from store import Position, StoreConfig, StoreState
from store.kafka.catchup import CatchUp, PartitionCatchUp
from store.kafka.client import RebuildRequired, TopicInfo, TopicWatch, TransientSourceError
from store.kafka.log import KafkaLog
from store.kafka.source import ConsumerSource
from store.lifecycle.apply_loop import ApplyLoop
from store.lifecycle.progress import Progress
from store.lifecycle.reporter import Reporter
from store.lifecycle.sharding import PlacementCheck, StoreSharding

CONFIG = StoreConfig("s", "t", {"bootstrap.servers": "unused:9092"}, Path("unused"))


def watch(now: TopicInfo | None, partitions: int = 2) -> TopicWatch:
    return TopicWatch(lambda timeout: now, TopicInfo("t", "id-1", partitions))


class RecordingSource:
    def __init__(self) -> None:
        self.added: list[int] = []

    def add_partitions(self, partitions: Iterable[int]) -> None:
        self.added += partitions


def apply_loop(
    config: StoreConfig, grown: TopicWatch, source: RecordingSource, catch_up: CatchUp
) -> ApplyLoop:
    copies = SimpleNamespace(state=StoreState.READY, writer=SimpleNamespace(position=Position({0: 100})))
    log = logging.LoggerAdapter(logging.getLogger("test"))
    reporter = Reporter("s", "t", Progress(), log, PlacementCheck("s", config.sharding, log))
    return ApplyLoop(
        config,
        copies,  # type: ignore[arg-type]
        source,  # type: ignore[arg-type]
        catch_up,
        grown,
        reporter,
        threading.Event(),
        lambda: False,
        False,
    )


def test_new_partitions_are_read_and_caught_up_from_their_start() -> None:
    grown = watch(TopicInfo("t", "id-1", 4))
    source = RecordingSource()
    catch_up = CatchUp([PartitionCatchUp(0, target=100), PartitionCatchUp(1, target=100)])
    loop = apply_loop(CONFIG, grown, source, catch_up)
    loop._check_metadata(time.monotonic())
    assert source.added == [2, 3]
    assert catch_up.targets() == {0: 100, 1: 100, 2: 0, 3: 0}
    assert grown.partitions == 4
    # Until the new partitions are read to their ends, the store is not caught up.
    catch_up.ended([0, 1])
    assert not catch_up.done


def test_a_sharded_store_reads_its_partitions_again_when_the_topic_grows() -> None:
    grown = watch(TopicInfo("t", "id-1", 8), partitions=6)
    source = RecordingSource()
    sharded = dataclasses.replace(CONFIG, sharding=StoreSharding(shards=3, shard=1))
    loop = apply_loop(sharded, grown, source, CatchUp([PartitionCatchUp(1), PartitionCatchUp(4)]))
    with pytest.raises(RebuildRequired, match=r"grew from 6 to 8 partitions.*shard 1 of 3.*\[1, 4, 7\]"):
        loop._check_metadata(time.monotonic())
    assert source.added == []


def test_a_consumer_source_reads_added_partitions_from_their_first_offset() -> None:
    assigned: list[TopicPartition] = []
    source = ConsumerSource(
        "s",
        "t",
        CONFIG.kafka,
        lambda report: None,
        KafkaLog("s", logging.LoggerAdapter(logging.getLogger())),
        10,
        0.1,
    )
    source.close()
    source._consumer = SimpleNamespace(incremental_assign=assigned.extend)  # type: ignore[assignment]
    source.add_partitions([2, 3])
    assert [(tp.topic, tp.partition, tp.offset) for tp in assigned] == [
        ("t", 2, OFFSET_BEGINNING),
        ("t", 3, OFFSET_BEGINNING),
    ]


def test_unchanged_metadata_changes_nothing() -> None:
    same = watch(TopicInfo("t", "id-1", 2))
    assert same.check() == []
    assert same.partitions == 2


def test_fewer_partitions_or_a_new_topic_id_rebuild() -> None:
    with pytest.raises(RebuildRequired, match="shrank from 2 to 1"):
        watch(TopicInfo("t", "id-1", 1)).check()
    with pytest.raises(RebuildRequired, match="deleted and recreated"):
        watch(TopicInfo("t", "id-2", 2)).check()


def test_a_deleted_topic_is_waited_for() -> None:
    with pytest.raises(TransientSourceError, match="was deleted"):
        watch(None).check()
