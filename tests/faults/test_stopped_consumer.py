"""A Kafka client process stopped with SIGSTOP (a frozen container, a debugger): the store says so
in its status and log, its staleness growing, instead of lag 0 and no error; once continued it
answers again, the error clears, and the records written meanwhile are applied exactly."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable

import pytest

from service.local.broker import LocalBroker
from tests.faults.conftest import StoreFactory
from tests.support.kafka import latest_per_key, make_producer
from tests.support.processes import wait_for_consumer_process
from tests.support.stores import FAST, produce_tracked, read_table

pytestmark = pytest.mark.slow


def _wait(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_stopped_consumer_process_is_reported_and_caught_up_once_continued(
    broker: LocalBroker,
    make_topic: Callable[..., str],
    start_store: StoreFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="store")
    topic = make_topic(partitions=2)
    producer = make_producer(broker.bootstrap_servers)
    records = [(b"k-%03d" % i, b"v%d" % i) for i in range(100)]
    end = produce_tracked(producer, topic, records)
    # Reported after 1 s of silence; killed only after 10 minutes, so the test continues it first.
    store = start_store(
        topic, tuning=FAST.replace(child_silence_seconds=1.0, child_answer_margin_seconds=600.0)
    )
    assert store.wait_until_ready(60), store.status()
    assert store.wait_for_position(end, 60), store.status()
    assert store.status().last_error is None
    child = wait_for_consumer_process(os.getpid())
    os.kill(child, signal.SIGSTOP)
    try:
        more = [(b"k-%03d" % i, b"w%d" % i) for i in range(50, 150)]
        end = end.merged(produce_tracked(producer, topic, more))

        def reported() -> bool:
            return "has not answered" in (store.status().last_error or "")

        _wait(reported, "the store to report its silent Kafka client process")
        status = store.status()
        assert f"pid {child}" in (status.last_error or "")
        assert "it is stopped" in (status.last_error or "")
        first = status.seconds_since_last_contact
        assert first is not None
        _wait(
            lambda: (store.status().seconds_since_last_contact or 0) > first + 2,
            "the staleness to grow while the process is stopped",
        )
        assert reported()  # still said
        assert store.status().state.name == "READY"  # reads go on from the copy as it is
        logged = [r.getMessage() for r in caplog.records if "has not answered" in r.getMessage()]
        assert len(logged) == 1, logged  # once a minute, not at every check
    finally:
        os.kill(child, signal.SIGCONT)
    assert store.wait_for_position(end, 60), store.status()
    _wait(lambda: store.status().last_error is None, "the error to clear")
    with store.view() as view:
        assert read_table(view) == latest_per_key(records + more)
    # The same process answered again: it was never replaced.
    assert wait_for_consumer_process(os.getpid()) == child
    assert "answers again" in caplog.text
