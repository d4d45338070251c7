"""Reads as of a position on the real broker and real RocksDB: every get, prefix scan and index scan
answers exactly the value of each key's last record below the position on its partition, for every
position from the history floor on; retention moves the floor and bounds what is stored; two
replicas fed at different speeds answer alike; a ``kill -9`` loses nothing at or above the floor."""

from __future__ import annotations

import functools
import itertools
import json
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import rocksdict
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.local.broker import LocalBroker
from store import (
    HistoryExpiredError,
    HistoryNotKeptError,
    HistorySpec,
    IndexNotReadyError,
    IndexSpec,
    Position,
    PositionNotReachedError,
    Store,
)
from tests.support.kafka import Record, make_producer
from tests.support.stores import (
    FAST,
    Delivered,
    StoreProcess,
    bulk_tuning,
    end_of,
    model_as_of,
    produce_logged,
    read_index,
    read_table,
    tuning_settings,
    wait_until,
)

BY_GROUP = IndexSpec("by_group", "g")
KEEP_ALL = HistorySpec(retention_offsets=1_000_000)
KEYS = [b"a", b"ab", b"b", b"b\x00", b"b\xff", b"c"]  # "a" prefixes "ab"; binary keys
GROUPS = [b"x", b"y", b"z"]
PARTITIONS = 3
TUNING = FAST.replace(history_prune_interval_seconds=0.05)


def partition_of(key: bytes) -> int:
    """Each key always goes to one partition: the model is per partition."""
    return KEYS.index(key) % PARTITIONS if key in KEYS else hash(key) % PARTITIONS


def group_of(value: bytes) -> bytes | None:
    try:
        document = json.loads(value)
    except ValueError:
        return None
    group = document.get("g") if isinstance(document, dict) else None
    return group.encode() if isinstance(group, str) else None


def assert_as_of_exact(
    store: Store, as_of: Position, delivered: Sequence[Delivered], keys: Sequence[bytes] = KEYS
) -> None:
    """get_many, prefix scans (whole table and per prefix, small pages) and index scans of the
    view as of ``as_of`` equal the model replayed from the records below it."""
    model = model_as_of(delivered, as_of)
    with store.view(as_of=as_of) as view:
        assert view.position().reaches(as_of)
        assert as_of.reaches(view.position())
        asked = [*keys, b"never-written"]
        assert view.get_many(asked) == [model.get(key) for key in asked], as_of
        assert view.get(keys[0]) == model.get(keys[0])
        assert read_table(view) == model, as_of
        for prefix in (b"a", b"b", b"b\x00", b"zz"):
            expected = {key: value for key, value in model.items() if key.startswith(prefix)}
            scanned = read_table(view, prefix, page_size=2)
            assert scanned == expected, (as_of, prefix)
            assert list(scanned) == sorted(expected), (as_of, prefix)
        for group in GROUPS:
            expected = {key: value for key, value in model.items() if group_of(value) == group}
            assert read_index(view, BY_GROUP.name, group, page=2) == expected, (as_of, group)


def between(floor: Mapping[int, int], end: Mapping[int, int], fractions: Sequence[float]) -> Position:
    """A position between ``floor`` and ``end``, each partition at its own fraction of the way."""
    return Position(
        {
            p: floor.get(p, 0) + round(fractions[p] * (end.get(p, 0) - floor.get(p, 0)))
            for p in range(PARTITIONS)
        }
    )


def full(position: Mapping[int, int]) -> Position:
    """The position naming every partition (0 for those without records)."""
    return Position({p: position.get(p, 0) for p in range(PARTITIONS)})


values = st.one_of(
    st.sampled_from(GROUPS).map(lambda group: json.dumps({"g": group.decode()}).encode()),
    st.integers(0, 99).map(lambda n: json.dumps({"g": "x", "n": n}).encode()),
    st.just(b'{"n": 1}'),
    st.just(b"not json"),
    st.none(),
)
batches = st.lists(
    st.lists(st.tuples(st.sampled_from(KEYS), values), min_size=1, max_size=10), min_size=2, max_size=6
)
fractions = st.lists(st.tuples(*[st.floats(0, 1)] * PARTITIONS), max_size=4)
_names = itertools.count()


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batches=batches, probes=fractions)
def test_as_of_every_recorded_position_equals_the_model(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    batches: list[list[Record]],
    probes: list[tuple[float, ...]],
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    # The first batch is there before the store starts: history begins after it, when READY.
    delivered = produce_logged(producer, topic, batches[0], partitions=partition_of)
    end = full(end_of(delivered))
    store = make_store(topic, name=f"h{next(_names)}", tuning=TUNING, indexes=(BY_GROUP,), history=KEEP_ALL)
    # Hypothesis runs every example within one test: each example stops its own store, or they
    # would all keep running (and logging) until the test ends.
    try:
        assert store.wait_until_ready(60), store.status()
        floor = store.history_floor()
        assert floor is not None
        assert full(floor) == end
        recorded = [end]
        for batch in batches[1:]:
            delivered += produce_logged(producer, topic, batch, partitions=partition_of)
            end = full(end_of(delivered))
            assert store.wait_for_position(end, 60), store.status()
            recorded.append(end)
            assert_as_of_exact(store, end, delivered)
        # Positions no batch ended at: each partition somewhere between the floor and the end.
        recorded += [between(floor, end, probe) for probe in probes]
        assert full(store.history_floor() or {}) == full(floor)  # nothing expires under this retention
        for as_of in recorded:
            assert_as_of_exact(store, as_of, delivered)
    finally:
        store.stop()


def random_batch(rng: random.Random, size: int) -> list[Record]:
    """Puts moving keys between groups, rows without the field or not JSON, and tombstones."""
    choices: list[bytes | None] = [json.dumps({"g": g.decode()}).encode() for g in GROUPS]
    choices += [b'{"n": 2}', b"not json", None]
    batch: list[Record] = []
    for i in range(size):
        value = rng.choice(choices)
        batch.append((rng.choice(KEYS), value if value is None or i % 4 else value + b" "))
    return batch


def test_retention_expires_old_positions_keeps_newer_ones_exact_and_bounds_what_is_stored(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    retention = 4
    history = HistorySpec(retention_offsets=retention)
    topic = make_topic(partitions=PARTITIONS)
    rng = random.Random(61)
    delivered = produce_logged(producer, topic, random_batch(rng, 12), partitions=partition_of)
    store = make_store(topic, name="kept", tuning=TUNING, indexes=(BY_GROUP,), history=history)
    assert store.wait_until_ready(60), store.status()
    start = full(store.history_floor() or {})
    assert start == full(end_of(delivered))
    recorded = [start]
    for _ in range(12):
        delivered += produce_logged(producer, topic, random_batch(rng, 9), partitions=partition_of)
        end = full(end_of(delivered))
        assert store.wait_for_position(end, 60), store.status()
        recorded.append(end)
    floor = Position({p: max(start[p], end[p] - retention) for p in range(PARTITIONS)})
    wait_until(lambda: full(store.history_floor() or {}) == floor, 30, f"the history floor to reach {floor}")

    newer = [as_of for as_of in recorded if as_of.reaches(floor)]
    newer += [floor, between(floor, end, (0.5, 0.25, 1.0)), between(floor, end, (0.75, 1.0, 0.0))]
    older = [as_of for as_of in recorded if not as_of.reaches(floor)]
    assert len(older) >= 10, "the retention must have expired most recorded positions"
    for as_of in newer:
        assert_as_of_exact(store, as_of, delivered)
    for as_of in older:
        with pytest.raises(HistoryExpiredError) as expired, store.view(as_of=as_of):
            pass
        assert full(expired.value.floor) == floor  # type: ignore[arg-type]  # a Position here

    # Stopping waits for the pruning that followed the floor's move. What remains: the records at
    # or above the floor, and at most one older version per key (its value at the floor).
    store.stop()
    window = sum(end[p] - floor[p] for p in range(PARTITIONS))
    versions, changes = stored_history(store)
    assert changes == window
    assert versions <= window + len(KEYS)
    assert len(delivered) > 5 * (window + len(KEYS))

    # A restart keeps the same floor and answers.
    reopened = make_store(topic, name="kept", tuning=TUNING, indexes=(BY_GROUP,), history=history)
    assert reopened.wait_until_ready(60), reopened.status()
    assert full(reopened.history_floor() or {}) == floor
    for as_of in newer:
        assert_as_of_exact(reopened, as_of, delivered)
    with pytest.raises(HistoryExpiredError), reopened.view(as_of=older[-1]):
        pass


def stored_history(store: Store) -> tuple[int, int]:
    """How many versions and change entries the stopped store's RocksDB holds."""
    path = str(store.config.path / "db")
    options = rocksdict.Options(raw_mode=True)
    families = rocksdict.Rdict.list_cf(path, options)
    db = rocksdict.Rdict(
        path,
        options,
        column_families=dict.fromkeys(families, options),
        access_type=rocksdict.AccessType.read_only(),
    )
    try:
        return _count(db.get_column_family("history")), _count(db.get_column_family("changes"))
    finally:
        db.close()


def _count(family: Any) -> int:
    iterator = family.iter()
    iterator.seek_to_first()
    count = 0
    while iterator.valid():
        count += 1
        iterator.next()
    return count


def test_a_bulk_loaded_gap_restarts_history_at_the_next_ready_position(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    rng = random.Random(62)
    delivered = produce_logged(producer, topic, random_batch(rng, 10), partitions=partition_of)
    store = make_store(topic, name="gap", tuning=TUNING, indexes=(BY_GROUP,), history=KEEP_ALL)
    assert store.wait_until_ready(60), store.status()
    delivered += produce_logged(producer, topic, random_batch(rng, 10), partitions=partition_of)
    before = full(end_of(delivered))
    assert store.wait_for_position(before, 60), store.status()
    assert_as_of_exact(store, before, delivered)
    store.stop()

    # Records bulk-loaded while down carry no versions: nothing before them is exact any more.
    delivered += produce_logged(producer, topic, random_batch(rng, 30), partitions=partition_of)
    after = full(end_of(delivered))
    bulk = bulk_tuning(min_records=1, chunk_records=7).replace(history_prune_interval_seconds=0.05)
    restarted = make_store(topic, name="gap", tuning=bulk, indexes=(BY_GROUP,), history=KEEP_ALL)
    assert restarted.wait_until_ready(60), restarted.status()
    assert (restarted.config.path / "bulk").is_dir()  # the gap took the bulk path
    assert full(restarted.history_floor() or {}) == after
    with pytest.raises(HistoryExpiredError), restarted.view(as_of=before):
        pass
    assert_as_of_exact(restarted, after, delivered)
    delivered += produce_logged(producer, topic, random_batch(rng, 10), partitions=partition_of)
    end = full(end_of(delivered))
    assert restarted.wait_for_position(end, 60), restarted.status()
    for as_of in (after, between(after, end, (0.5, 1.0, 0.0)), end):
        assert_as_of_exact(restarted, as_of, delivered)


def test_replicas_fed_at_different_speeds_answer_as_of_alike(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer, tmp_path: Path
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    rng = random.Random(63)
    delivered = produce_logged(producer, topic, random_batch(rng, 15), partitions=partition_of)

    def replica(directory: str, poll_max_records: int) -> Store:
        tuning = TUNING.replace(poll_max_records=poll_max_records)
        return make_store(
            topic,
            name="replica",
            directory=tmp_path / directory,
            tuning=tuning,
            indexes=(BY_GROUP,),
            history=KEEP_ALL,
        )

    def answers(store: Store, as_of: Position) -> tuple[Any, ...]:
        assert store.wait_for_position(as_of, 60), store.status()
        with store.view(as_of=as_of) as view:
            return (
                view.get_many(KEYS),
                read_table(view, page_size=3),
                [read_index(view, BY_GROUP.name, group, page=1) for group in GROUPS],
            )

    fast, slow = replica("fast", 10_000), replica("slow", 1)  # the slow one applies a record at a time
    for store in (fast, slow):
        assert store.wait_until_ready(60), store.status()
    recorded = [full(end_of(delivered))]
    late: Store | None = None
    for number in range(6):
        if number == 3:
            late = replica("late", 10_000)  # its history starts where it becomes READY
            assert late.wait_until_ready(60), late.status()
        delivered += produce_logged(producer, topic, random_batch(rng, 15), partitions=partition_of)
        recorded.append(full(end_of(delivered)))
    assert late is not None
    late_floor = full(late.history_floor() or {})
    assert late_floor == recorded[3]

    seen_by_fast = {as_of: answers(fast, as_of) for as_of in recorded}
    for as_of in recorded:
        model = model_as_of(delivered, as_of)
        assert seen_by_fast[as_of][1] == model
        assert answers(slow, as_of) == seen_by_fast[as_of]
        if as_of.reaches(late_floor):
            assert answers(late, as_of) == seen_by_fast[as_of]
        else:
            with pytest.raises(HistoryExpiredError), late.view(as_of=as_of):
                pass


def has_reached(end: Position, status: dict[str, Any]) -> bool:
    """A store process's status line shows it at or past ``end``."""
    return Position.parse(status["position"]).reaches(end)


def test_as_of_answers_at_or_above_the_floor_survive_kill_9(
    broker: LocalBroker, make_topic: Callable[..., str], make_store: Callable[..., Store], tmp_path: Path
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    producer = make_producer(broker.bootstrap_servers, **{"enable.idempotence": "true"})
    rng = random.Random(64)
    delivered = produce_logged(producer, topic, random_batch(rng, 40), partitions=partition_of)
    tuning = TUNING.replace(checkpoint_interval_seconds=0.1)
    child = StoreProcess(
        {
            "bootstrap_servers": broker.bootstrap_servers,
            "topic": topic,
            "state_dir": str(tmp_path),
            "name": "crashing",
            "tuning": tuning_settings(tuning),
            "indexes": [[BY_GROUP.name, BY_GROUP.field]],
            "history": {"retention_offsets": 1_000_000},
        }
    )
    try:
        ready = Position.parse(child.wait_for(lambda s: s["state"] == "READY", 60)["position"])
        recorded = [full(ready)]
        for _ in range(8):
            delivered += produce_logged(producer, topic, random_batch(rng, 20), partitions=partition_of)
            end = full(end_of(delivered))
            child.wait_for(functools.partial(has_reached, end), 60)
            recorded.append(end)
        # Killed while more records arrive: some applied, none of them flushed.
        delivered += produce_logged(producer, topic, random_batch(rng, 20), partitions=partition_of)
    finally:
        child.kill()
    end = full(end_of(delivered))
    recorded.append(end)

    restarted = make_store(
        topic, name="crashing", tuning=tuning, directory=tmp_path, indexes=(BY_GROUP,), history=KEEP_ALL
    )
    assert restarted.wait_until_ready(60), restarted.status()
    assert restarted.wait_for_position(end, 60), restarted.status()
    # History was checkpointed since it began, so the floor is still where it began.
    assert full(restarted.history_floor() or {}) == full(ready)
    for as_of in recorded:
        assert_as_of_exact(restarted, as_of, delivered)


def test_as_of_is_refused_clearly_when_it_cannot_be_exact(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    rng = random.Random(65)
    delivered = produce_logged(producer, topic, random_batch(rng, 30), partitions=partition_of)
    end = full(end_of(delivered))

    plain = make_store(topic, name="plain", indexes=(BY_GROUP,))
    assert plain.wait_until_ready(60), plain.status()
    assert plain.history_floor() is None
    with pytest.raises(HistoryNotKeptError, match='"plain"'), plain.view(as_of=end):
        pass

    kept = make_store(topic, name="kept", tuning=TUNING, indexes=(BY_GROUP,), history=KEEP_ALL)
    assert kept.wait_until_ready(60), kept.status()
    ahead = Position({**end, 1: end[1] + 5})
    with pytest.raises(PositionNotReachedError, match='"kept"'), kept.view(as_of=ahead):
        pass
    with pytest.raises(HistoryExpiredError, match="retention"), kept.view(as_of=Position({0: 0})):
        pass
    assert_as_of_exact(kept, end, delivered)
    # Once the records arrive, the same position is answered exactly.
    delivered += produce_logged(producer, topic, [(KEYS[1], b'{"g": "z"}')] * 5, partitions=partition_of)
    assert kept.wait_for_position(ahead, 60), kept.status()
    assert_as_of_exact(kept, ahead, delivered)
    kept.stop()

    # An index added later answers as of positions from before it existed, once built.
    by_n = IndexSpec("by_n", "n")
    grown = make_store(topic, name="kept", tuning=TUNING, indexes=(BY_GROUP, by_n), history=KEEP_ALL)
    with grown.view(as_of=end) as view:
        with pytest.raises(IndexNotReadyError):
            view.index_scan("by_n", b"2")
        assert view.get_many(KEYS) == [model_as_of(delivered, end).get(key) for key in KEYS]
    assert grown.wait_until_ready(60), grown.status()
    # An existing store builds an added index once READY (reads went on meanwhile).
    assert grown.wait_for_indexes(60), grown.status()
    for as_of in (end, ahead):
        model = model_as_of(delivered, as_of)
        with grown.view(as_of=as_of) as view:
            assert read_index(view, "by_n", b"2", page=1) == {
                key: value for key, value in model.items() if value.startswith(b'{"n": 2}')
            }
