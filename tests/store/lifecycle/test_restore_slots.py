"""How many bulk restores run at once: the slot limit itself, and stores sharing one on the real
broker (a store finding every slot taken waits for one, then restores in bulk)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from store import RestoreMode, RestoreSlots, Store, StoreState
from store.table.replica import Replica
from tests.support.kafka import latest_per_key
from tests.support.stores import (
    assert_equals_model,
    bulk_tuning,
    mixed_records,
    produce_tracked,
    wait_until,
)


def test_slots_are_taken_up_to_the_limit_and_given_back() -> None:
    slots = RestoreSlots(2)
    assert slots.try_acquire()
    assert slots.try_acquire()
    assert not slots.try_acquire()
    assert slots.running == 2
    slots.release()
    assert slots.try_acquire()
    slots.release()
    slots.release()
    assert slots.running == 0
    assert slots.most_at_once == 2


def test_releasing_a_slot_not_held_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="not held"):
        RestoreSlots(1).release()


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RestoreSlots(0)


def test_threads_racing_for_slots_never_hold_more_than_the_limit() -> None:
    slots = RestoreSlots(3)
    start = threading.Barrier(8)
    granted = []

    def race() -> None:
        start.wait()
        for _ in range(2_000):
            if slots.try_acquire():
                granted.append(1)
                slots.release()

    threads = [threading.Thread(target=race) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert granted
    assert slots.most_at_once <= 3
    assert slots.running == 0


def test_acquire_waits_for_a_slot_to_be_given_back() -> None:
    slots = RestoreSlots(1)
    assert slots.try_acquire()
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(slots.acquire(threading.Event())))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()  # still waiting: the only slot is held
    slots.release()
    waiter.join(10)
    assert got == [True]
    assert slots.running == 1
    assert slots.most_at_once == 1


def test_acquire_gives_up_when_stopped() -> None:
    slots = RestoreSlots(1)
    assert slots.try_acquire()
    stop = threading.Event()
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(slots.acquire(stop, check_seconds=0.01)))
    waiter.start()
    stop.set()
    waiter.join(10)
    assert got == [False]
    assert slots.running == 1


class MeetingSlots(RestoreSlots):
    """Restore slots whose first ``limit`` takers wait for each other before restoring: with as many
    stores as slots, their bulk restores overlap by construction, not by the machine's timing."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self._meeting = threading.Barrier(limit)
        self._taken = 0
        self._counting = threading.Lock()
        self._inside = threading.local()

    def try_acquire(self) -> bool:
        got = super().try_acquire()
        if got and not getattr(self._inside, "acquire", False):
            self._meet()
        return got

    def acquire(self, stop: threading.Event, check_seconds: float = 0.1) -> bool:
        self._inside.acquire = True  # its own try_acquire runs under the slots' lock: meet after
        try:
            got = super().acquire(stop, check_seconds)
        finally:
            self._inside.acquire = False
        if got:
            self._meet()
        return got

    def _meet(self) -> None:
        with self._counting:
            self._taken += 1
            meets = self._taken <= self._meeting.parties
        if meets:
            self._meeting.wait(120)


class FirstIngests:
    """Holds each store's first bulk chunk before it is ingested (its bulk restore under way, its
    slot taken) until the test has looked at the stores; :meth:`next` names the store held."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._held: queue.Queue[tuple[str, threading.Event]] = queue.Queue()
        self._seen: set[str] = set()
        ingest = Replica.ingest

        def held_ingest(
            replica: Replica,
            sst_path: Path | None,
            next_offsets: dict[int, int],
            newest_times: dict[int, int] | None = None,
        ) -> None:
            if replica.name not in self._seen:
                self._seen.add(replica.name)
                go_on = threading.Event()
                self._held.put((replica.name, go_on))
                go_on.wait(120)
            ingest(replica, sst_path, next_offsets, newest_times)

        monkeypatch.setattr(Replica, "ingest", held_ingest)

    def next(self, timeout: float = 120) -> tuple[str, threading.Event]:
        return self._held.get(timeout=timeout)


def _mode(store: Store) -> RestoreMode | None:
    restore = store.status().restore
    return restore.mode if restore is not None else None


def _modes_at_first_ingests(
    stores: dict[str, Store], limit: int, held: FirstIngests
) -> dict[str, set[RestoreMode]]:
    """The restore modes each store shows at each store's first bulk chunk: the held store's own,
    and while all ``limit`` slots are taken, every store not restored yet waiting for one."""
    seen: dict[str, set[RestoreMode]] = {name: set() for name in stores}
    unrestored = set(stores)
    for _ in stores:
        name, go_on = held.next()
        unrestored.discard(name)
        mode = _mode(stores[name])
        assert mode is not None, stores[name].status()
        seen[name].add(mode)
        if len(unrestored) + 1 > limit:  # more stores want a slot than there are: the rest wait
            for other in sorted(unrestored):
                wait_until(
                    lambda other=other: _mode(stores[other]) is RestoreMode.WAITING,
                    120,
                    f"store {other} to wait for a slot",
                )
                seen[other].add(RestoreMode.WAITING)
        go_on.set()
    return seen


@pytest.mark.parametrize(("stores", "limit"), [(3, 1), (2, 2)], ids=["one-slot", "two-slots"])
def test_stores_sharing_slots_bulk_restore_at_most_the_limit_at_once(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    stores: int,
    limit: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With two slots the restores are made to overlap (the first two takers meet): two at once
    # shows the limit lets them; with one slot, the limit alone keeps them to one at a time.
    records = mixed_records(30_000, keys=8_000, seed=41)
    topics = [make_topic(partitions=3) for _ in range(stores)]
    ends = [produce_tracked(producer, topic, records) for topic in topics]
    slots = MeetingSlots(limit)
    tuning = bulk_tuning(min_records=500, chunk_records=4_000)
    held = FirstIngests(monkeypatch)
    restoring = [
        make_store(topic, name=f"s{i}", tuning=tuning, restore_slots=slots) for i, topic in enumerate(topics)
    ]
    modes = _modes_at_first_ingests({store.name: store for store in restoring}, limit, held)
    for store, end in zip(restoring, ends, strict=True):
        assert store.wait_until_ready(120), store.status()
        assert_equals_model(store, latest_per_key(records), end)
    assert slots.most_at_once == limit
    assert slots.running == 0
    assert all(RestoreMode.BULK in seen for seen in modes.values()), modes
    waited = sum(RestoreMode.WAITING in seen for seen in modes.values())
    assert waited >= stores - limit


def test_a_store_waits_for_the_slot_another_holds_then_restores_in_bulk(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held = FirstIngests(monkeypatch)
    topic = make_topic(partitions=3)
    records = mixed_records(30_000, keys=10_000, seed=43)
    end = produce_tracked(producer, topic, records)
    slots = RestoreSlots(1)
    assert slots.try_acquire()  # as if another store were restoring in bulk
    with caplog.at_level(logging.INFO, logger="store.lifecycle.materializer"):
        store = make_store(
            topic, tuning=bulk_tuning(min_records=500, chunk_records=4_000), restore_slots=slots
        )
        wait_until(
            lambda: (r := store.status().restore) is not None and r.mode is RestoreMode.WAITING,
            30,
            "the store waits for the slot",
        )
        waiting = store.status()
        assert waiting.state is StoreState.RESTORING
        assert waiting.restore is not None
        assert waiting.restore.records_remaining > 500  # the sampled end offsets may be a little low
        assert waiting.records_applied_total == 0  # it waits rather than read record by record
        slots.release()
        modes = _modes_at_first_ingests({store.name: store}, 1, held)[store.name]
        assert store.wait_until_ready(120), store.status()
    assert_equals_model(store, latest_per_key(records), end)
    assert RestoreMode.BULK in modes
    messages = [record.getMessage() for record in caplog.records]
    told = [
        next(i for i, m in enumerate(messages) if text in m)
        for text in ("waiting for another store's bulk restore", "slot free after", "bulk restore of")
    ]
    assert told == sorted(told)
    assert "engine.max_concurrent_bulk_restores: 1 at once" in messages[told[0]]
    assert slots.running == 0


def test_a_store_waiting_for_a_slot_stops_at_once(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    topic = make_topic(partitions=3)
    produce_tracked(producer, topic, mixed_records(2_000, keys=500, seed=44))
    slots = RestoreSlots(1)
    assert slots.try_acquire()
    store = make_store(topic, tuning=bulk_tuning(min_records=500), restore_slots=slots)
    wait_until(
        lambda: (r := store.status().restore) is not None and r.mode is RestoreMode.WAITING,
        30,
        "the store waits for the slot",
    )
    store.stop()
    assert store.state is StoreState.STOPPED
    assert slots.running == 1  # only the slot this test holds
