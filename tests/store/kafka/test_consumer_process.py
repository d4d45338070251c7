"""The store's Kafka client in a child process: a crash of it (a kill, a segfault) ends that
process only; reads go on, another starts, and no record is lost or applied twice. The child
ends with the store's process."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from service.local.broker import LocalBroker
from store import Store, StoreState
from store.kafka.children import ChildProcess, reap_orphans
from tests.support.kafka import latest_per_key
from tests.support.processes import consumer_processes, ended, wait_for_consumer_process
from tests.support.stores import FAST, REPO, assert_equals_model, produce_tracked
from tests.support.writers import KeyedWriter


@pytest.mark.parametrize("signal_number", [signal.SIGKILL, signal.SIGSEGV], ids=["SIGKILL", "SIGSEGV"])
def test_a_killed_consumer_process_is_replaced_and_no_record_is_lost_or_applied_twice(
    broker: LocalBroker,
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    caplog: pytest.LogCaptureFixture,
    signal_number: signal.Signals,
) -> None:
    caplog.set_level(logging.INFO, logger="store")
    topic = make_topic(partitions=3)
    writer = KeyedWriter(broker.bootstrap_servers, topic, seed=signal_number, keys=400)
    try:
        writer.resume()
        store = make_store(topic, tuning=FAST)
        assert store.wait_until_ready(60)
        victims: list[int] = []
        for _ in range(3):
            victims.append(wait_for_consumer_process(other_than=victims))
            os.kill(victims[-1], signal_number)
            # Reads go on from the copy as it is, READY, while no consumer runs.
            assert store.state is StoreState.READY
            with store.view() as view:
                view.get_many([b"key-%05d" % i for i in range(400)])
        replacement = wait_for_consumer_process(other_than=victims)
        model, end = writer.pause()
    finally:
        writer.close()
    assert store.wait_for_position(end, 60), (store.status(), end)
    assert_equals_model(store, model, end)
    # Every record of the topic applied exactly once: none lost, none applied twice.
    assert store.status().records_applied_total == sum(end.values())
    assert consumer_processes() == [replacement]
    crashes = [r.getMessage() for r in caplog.records if "the Kafka client process" in r.getMessage()]
    assert len(crashes) == 3, crashes
    assert all(f"was killed by {signal_number.name}" in line for line in crashes), crashes
    assert "reads go on from the last good copy" in crashes[0]


def test_the_in_process_consumer_stays_selectable(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    topic = make_topic(partitions=2)
    records = [(b"key-%03d" % i, b"v%d" % i) for i in range(300)]
    end = produce_tracked(producer, topic, records)
    store = make_store(topic, tuning=FAST.replace(consumer_in_child_process=False))
    assert store.wait_until_ready(60)
    assert store.wait_for_position(end, 60)
    assert_equals_model(store, latest_per_key(records), end)
    assert consumer_processes() == []


def test_the_consumer_process_ends_with_the_store_process() -> None:
    """The store's process killed with SIGKILL (no chance to end its child): the child ends by
    itself, as its requests' pipe ends."""
    code = (
        "import threading, time\n"
        "from store.kafka.child_source import ChildConsumerSource\n"
        "from store.kafka.log import KafkaLog\n"
        "from store.tuning import ConsumerTuning\n"
        "import logging\n"
        "source = ChildConsumerSource('s', 't', {'bootstrap.servers': '127.0.0.1:1'}, lambda report: None,"
        " KafkaLog('s', logging.LoggerAdapter(logging.getLogger())), ConsumerTuning(), False)\n"
        "print(source.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    store = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert store.stdout is not None
        child = int(store.stdout.readline())
        assert consumer_processes(store.pid) == [child]
        store.kill()
        store.wait(30)
        deadline = time.monotonic() + 30
        while not ended(child):
            assert time.monotonic() < deadline, f"the consumer process {child} outlived the store's process"
            time.sleep(0.05)
    finally:
        store.kill()
        store.wait(30)


def test_orphans_are_reaped_and_the_stores_own_children_left_to_it() -> None:
    """What a container's init must do: wait for processes another child left behind."""
    ours = ChildProcess("store.kafka.consumer_process")
    orphan = os.fork()
    if orphan == 0:
        os._exit(0)
    deadline = time.monotonic() + 30
    reaped: list[int] = []
    while orphan not in reaped:
        assert time.monotonic() < deadline, "the orphan was not reaped"
        reaped += reap_orphans()
        time.sleep(0.02)
    ours.stdin.close()  # its requests end: it exits, and stays for end() to wait for
    while not ended(ours.pid):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert ours.pid not in reap_orphans()
    assert ours.end() == 0
