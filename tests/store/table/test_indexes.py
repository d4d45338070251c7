"""Secondary indexes on the real broker and real RocksDB: after every batch, after restarts (per-batch
and bulk bootstrap paths) and after ``kill -9``, every index holds exactly one entry per row whose
field has an indexable value, and nothing else; indexes added to or dropped from an existing store."""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
import rocksdict
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.local.broker import LocalBroker
from store import (
    IndexNotReadyError,
    IndexSpec,
    Position,
    Store,
    UnknownIndexError,
)
from tests.support.kafka import Record, latest_per_key, make_producer
from tests.support.stores import (
    FAST,
    StoreProcess,
    bulk_tuning,
    produce_tracked,
    read_index,
    read_table,
    tuning_settings,
)

BY_TICKER = IndexSpec("by_ticker", "ticker")
BY_REF = IndexSpec("by_ref", "ref.ticker")
SPECS = (BY_TICKER, BY_REF)

PATHS = {
    "batch": FAST,
    # Every bootstrap (the first one and each restart over records that arrived meanwhile) loads
    # SST chunks of a few records; the indexes are then rebuilt by a scan.
    "bulk": bulk_tuning(min_records=1, chunk_records=3, poll_max_records=2),
}


# -- the model: what an index must hold, computed from the rows alone ----------------------------


def indexed_value(value: bytes | None, field: str) -> bytes | None:
    """The documented rule: a JSON string indexes as its UTF-8, a number or boolean as its JSON
    text; null, objects, arrays, a missing field and a value that is not JSON have no entry."""
    if value is None:
        return None
    try:
        document: Any = json.loads(value)
    except ValueError:
        return None
    for part in field.split("."):
        if not isinstance(document, dict) or part not in document:
            return None
        document = document[part]
    if isinstance(document, str):
        return document.encode()
    if isinstance(document, bool):
        return b"true" if document else b"false"
    if isinstance(document, int | float):
        return json.dumps(document).encode()
    return None


def index_model(table: Mapping[bytes, bytes], spec: IndexSpec) -> dict[bytes, set[bytes]]:
    """Indexed value -> the row keys that have it."""
    model: dict[bytes, set[bytes]] = {}
    for key, value in table.items():
        indexed = indexed_value(value, spec.field)
        if indexed is not None:
            model.setdefault(indexed, set()).add(key)
    return model


def entry_key(spec: IndexSpec, indexed: bytes, row_key: bytes) -> bytes:
    """The combined key documented in ``store.table.indexes``: name, length-prefixed value, row key."""
    name = spec.name.encode()
    return bytes([len(name)]) + name + len(indexed).to_bytes(4, "big") + indexed + row_key


def stored_index_entries(store: Store) -> set[bytes]:
    """Every key of the stopped store's ``index`` column family, read straight from RocksDB."""
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
        return set(db.get_column_family("index").keys())
    finally:
        db.close()


def assert_index_exact(
    store: Store, table: Mapping[bytes, bytes], specs: Iterable[IndexSpec], probes: Iterable[bytes] = ()
) -> None:
    """Through ``index_scan`` (two rows a page): for every value the model knows and every probe,
    exactly the model's rows."""
    probes = set(probes)
    with store.view() as view:
        for spec in specs:
            model = index_model(table, spec)
            for value in probes | model.keys():
                expected = {key: table[key] for key in model.get(value, set())}
                assert read_index(view, spec.name, value, page=2) == expected, (spec.name, value)


def assert_entries_exact(store: Store, table: Mapping[bytes, bytes], specs: Iterable[IndexSpec]) -> None:
    """The stopped store's index column family holds exactly the model's entries: no stale entry
    of a deleted or moved row survives unseen behind the row lookups of ``index_scan``."""
    expected = {
        entry_key(spec, value, key)
        for spec in specs
        for value, keys in index_model(table, spec).items()
        for key in keys
    }
    assert stored_index_entries(store) == expected


# -- random rows ------------------------------------------------------------------------------

TICKERS = ["AAPL", "AAPLX", "VOD", "", "é", "1"]  # "AAPL" prefixes "AAPLX"; "1" indexes like 1
KEYS = [b"p1", b"p10", b"p2", b"p\x00", b"p\xff", b"q"]
# Every indexed value the generator can make, and one that only prefixes another.
PROBES = {t.encode() for t in TICKERS} | {b"1", b"2.5", b"-3", b"true", b"false", b"AAP", b"null"}

field_values = st.one_of(
    st.sampled_from(TICKERS),
    st.sampled_from([1, 2.5, -3, True, False]),
    st.sampled_from([None, {"ticker": "AAPL"}, ["AAPL"]]),
)
documents = st.fixed_dictionaries(
    {"qty": st.integers(0, 9)},
    optional={
        "ticker": field_values,
        "ref": st.one_of(
            st.fixed_dictionaries({}, optional={"ticker": field_values}), st.sampled_from(TICKERS)
        ),
    },
)
values = st.one_of(
    documents.map(lambda document: json.dumps(document).encode()),
    st.sampled_from([b"not json", b"\xff\xfe", b"[1, 2]", b'"AAPL"', b"{"]),
    st.none(),  # a tombstone
)
records = st.tuples(st.sampled_from(KEYS), values)
batches = st.lists(st.lists(records, min_size=1, max_size=12), min_size=2, max_size=5)

_names = itertools.count()


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batches=batches, restart_before=st.integers(1, 5))
@pytest.mark.parametrize("path", sorted(PATHS))
def test_indexes_equal_the_model_after_every_batch_and_restart(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    path: str,
    batches: list[list[Record]],
    restart_before: int,
) -> None:
    tuning = PATHS[path]
    topic = make_topic(partitions=3)
    name = f"idx{next(_names)}"
    produced = list(batches[0])
    end = produce_tracked(producer, topic, batches[0])
    store = make_store(topic, name=name, tuning=tuning, indexes=SPECS)  # bootstraps over the first batch
    for number, batch in enumerate(batches[1:], start=1):
        if number == restart_before:
            # Records arriving while the store is down are a gap its restart reads (in bulk, when
            # enough of them wait) over the indexes it already has.
            store.stop()
            end = end.merged(produce_tracked(producer, topic, batch))
            store = make_store(topic, name=name, tuning=tuning, indexes=SPECS)
        else:
            assert store.wait_until_ready(60), store.status()
            end = end.merged(produce_tracked(producer, topic, batch))
        produced += batch
        assert store.wait_until_ready(60), store.status()
        assert store.wait_for_position(end, 60), store.status()
        if number in (1, restart_before):
            # Which path the last bootstrap took (its leftover SST directory tells).
            assert (store.config.path / "bulk").is_dir() is (path == "bulk")
        with store.view() as view:
            table = read_table(view)
            assert view.position() == end
        assert table == latest_per_key(produced)
        assert_index_exact(store, table, SPECS, PROBES)
    assert {name: status.state for name, status in store.status().indexes.items()} == {
        "by_ticker": "ready",
        "by_ref": "ready",
    }
    store.stop()
    assert_entries_exact(store, latest_per_key(produced), SPECS)


# -- kill -9 ------------------------------------------------------------------------------------


def json_rows(count: int, keys: int, seed: int) -> list[Record]:
    """Keyed JSON rows moving between tickers, some without the field, some not JSON, tombstones."""
    rng = random.Random(seed)
    rows: list[Record] = []
    for i in range(count):
        key = b"pos-%05d" % rng.randrange(keys)
        kind = rng.randrange(12)
        value: bytes | None
        if kind == 0:
            value = None
        elif kind == 1:
            value = json.dumps({"qty": i}).encode()
        elif kind == 2:
            value = b"not json %d" % i
        elif kind == 3:
            value = json.dumps({"ticker": rng.randrange(5), "ref": {"ticker": None}}).encode()
        else:
            ticker = f"T{rng.randrange(40)}"
            value = json.dumps({"ticker": ticker, "ref": {"ticker": ticker.lower()}, "qty": i}).encode()
        rows.append((key, value))
    return rows


class RowWriter:
    """Produces ``json_rows`` in small flushed chunks on a thread until stopped; remembers them."""

    def __init__(self, producer: Producer, topic: str, keys: int, seed: int) -> None:
        self.records: list[Record] = []
        self.end = Position()
        self._producer = producer
        self._topic = topic
        self._keys = keys
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="row-writer", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            chunk = json_rows(50, self._keys, self._rng.randrange(1 << 30))
            self.end = self.end.merged(produce_tracked(self._producer, self._topic, chunk))
            self.records += chunk
            self._stop.wait(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "the writer did not stop"


CRASH_PATHS = {
    "batch": FAST.replace(poll_max_records=500, checkpoint_interval_seconds=0.3),
    "bulk": bulk_tuning(min_records=1_000, chunk_records=3_000, checkpoint_interval_seconds=0.3),
}


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(CRASH_PATHS))
def test_indexes_equal_the_model_after_kill_9_during_bootstrap_and_while_records_arrive(
    broker: LocalBroker,
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    tmp_path: Path,
    path: str,
) -> None:
    tuning = CRASH_PATHS[path]
    topic = make_topic(partitions=3)
    base = json_rows(40_000, keys=4_000, seed=31)
    base_end = produce_tracked(make_producer(broker.bootstrap_servers, **{"linger.ms": 50}), topic, base)
    settings: dict[str, Any] = {
        "bootstrap_servers": broker.bootstrap_servers,
        "topic": topic,
        "state_dir": str(tmp_path),
        "name": path,
        "tuning": tuning_settings(tuning),
        "indexes": [[spec.name, spec.field] for spec in SPECS],
    }
    writer = RowWriter(
        make_producer(broker.bootstrap_servers, **{"enable.idempotence": "true"}), topic, 4_000, seed=32
    )
    try:
        bootstrapping = StoreProcess(settings)
        try:
            line = bootstrapping.wait_for(
                lambda s: s["state"] == "READY" or (s["restore_applied"] or 0) >= 6_000, 120
            )
        finally:
            bootstrapping.kill()
        assert line["state"] != "READY", "the bootstrap ended before its kill; make the topic larger"
        steady = StoreProcess(settings)
        try:
            ready = steady.wait_for(lambda s: s["state"] == "READY", 120)
            # Killed while the writer's rows arrive.
            steady.wait_for(lambda s: s["applied"] >= ready["applied"] + 300, 60)
        finally:
            steady.kill()
    finally:
        writer.stop()
    table = latest_per_key(base + writer.records)
    end = base_end.merged(writer.end)

    restarted = make_store(topic, name=path, tuning=tuning, directory=tmp_path, indexes=SPECS)
    assert restarted.wait_until_ready(120), restarted.status()
    assert restarted.wait_for_position(end, 60), restarted.status()
    with restarted.view() as view:
        assert read_table(view) == table
    probes = {b"T%d" % i for i in range(40)} | {b"t%d" % i for i in range(40)} | {b"%d" % i for i in range(5)}
    assert_index_exact(restarted, table, SPECS, probes)
    restarted.stop()
    assert_entries_exact(restarted, table, SPECS)


# -- indexes added and dropped --------------------------------------------------------------------


def test_an_index_added_to_an_existing_store_is_built_while_reads_go_on_and_a_dropped_one_disappears(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    topic = make_topic(partitions=3)
    rows = json_rows(30_000, keys=12_000, seed=41)
    end = produce_tracked(producer, topic, rows)
    table = latest_per_key(rows)
    sample = sorted(table)[:: len(table) // 50]
    first = make_store(topic, indexes=(BY_TICKER,))
    assert first.wait_until_ready(60), first.status()
    first.stop()

    grown = make_store(topic, indexes=(BY_TICKER, BY_REF))
    # The new index is unknown to the stored copy, so it starts out building.
    statuses = grown.status().indexes
    assert statuses["by_ticker"].state == "ready"
    assert statuses["by_ref"].state == "building"
    deadline = time.monotonic() + 120
    while True:
        assert time.monotonic() < deadline, f"by_ref was never built: {grown.status()}"
        building = grown.status().indexes["by_ref"].state == "building"
        with grown.view() as view:
            assert view.position() == end
            assert view.get_many(sample) == [table[key] for key in sample]
            assert read_index(view, "by_ticker", b"T7") == {
                key: table[key] for key in index_model(table, BY_TICKER)[b"T7"]
            }
            try:
                found = read_index(view, "by_ref", b"t7")
            except IndexNotReadyError:
                assert building
            else:
                assert found == {key: table[key] for key in index_model(table, BY_REF)[b"t7"]}
        if not building:
            break
    assert grown.wait_until_ready(60), grown.status()
    assert grown.status().indexes["by_ref"].state == "ready"
    assert_index_exact(grown, table, (BY_TICKER, BY_REF))
    grown.stop()

    # by_ref is dropped; by_ticker now covers another field, so it is rebuilt from scratch.
    moved = IndexSpec("by_ticker", "ref.ticker")
    shrunk = make_store(topic, indexes=(moved,))
    assert shrunk.wait_until_ready(60), shrunk.status()
    # An existing store builds a changed index once READY, so reads went on meanwhile.
    assert shrunk.wait_for_indexes(60), shrunk.status()
    assert set(shrunk.status().indexes) == {"by_ticker"}
    with shrunk.view() as view:
        with pytest.raises(UnknownIndexError):
            view.index_scan("by_ref", b"t7")
        assert read_index(view, "by_ticker", b"T7") == {}
    assert_index_exact(shrunk, table, (moved,))
    shrunk.stop()
    assert_entries_exact(shrunk, table, (moved,))


# -- the positions / tickers example ----------------------------------------------------------


def _position(client: str, ticker: str, amount: int) -> bytes:
    return json.dumps({"client": client, "ticker": ticker, "amount": amount}).encode()


def _ticker(exchange: str, name: str) -> bytes:
    return json.dumps({"exchange": exchange, "name": name}).encode()


def test_positions_and_tickers_are_joined_both_ways_while_both_change(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    """Positions keyed by id carry a ticker; tickers are keyed by symbol. A position's ticker is a
    get on the tickers store; a ticker's positions are an index scan on the positions store."""
    positions_topic, tickers_topic = make_topic(partitions=3), make_topic(partitions=2)
    by_ticker = IndexSpec("by_ticker", "ticker")
    ends = {positions_topic: Position(), tickers_topic: Position()}
    written: dict[str, list[Record]] = {positions_topic: [], tickers_topic: []}

    def write(topic: str, records: list[Record]) -> None:
        ends[topic] = ends[topic].merged(produce_tracked(producer, topic, records))
        written[topic] += records

    write(
        positions_topic,
        [
            (b"1", _position("client1", "AAPL", 100)),
            (b"2", _position("client1", "VOD", 5)),
            (b"3", _position("client1", "FB", 33)),
            (b"4", _position("client2", "AAPL", 25)),
            (b"5", _position("client3", "VOD", 33)),
        ],
    )
    write(
        tickers_topic,
        [
            (b"AAPL", _ticker("NASDAQ", "Apple Inc")),
            (b"VOD", _ticker("LON", "Vodafone Plc")),
            (b"FB", _ticker("NASDAQ", "Facebook Inc")),
        ],
    )
    positions = make_store(positions_topic, name="positions", indexes=(by_ticker,))
    tickers = make_store(tickers_topic, name="tickers")

    def answers() -> tuple[dict[bytes, bytes | None], dict[bytes, set[bytes]]]:
        """Both directions as a reader gets them: each position's ticker row, each ticker's positions."""
        for store, topic in ((positions, positions_topic), (tickers, tickers_topic)):
            assert store.wait_until_ready(60), store.status()
            assert store.wait_for_position(ends[topic], 60), store.status()
        ticker_of: dict[bytes, bytes | None] = {}
        positions_of: dict[bytes, set[bytes]] = {}
        with positions.view() as position_view, tickers.view() as ticker_view:
            rows = read_table(position_view)
            symbols = [json.loads(row)["ticker"].encode() for row in rows.values()]
            for key, row in zip(rows, ticker_view.get_many(symbols), strict=True):
                ticker_of[key] = row
            for symbol in read_table(ticker_view):
                positions_of[symbol] = set(read_index(position_view, "by_ticker", symbol))
        return ticker_of, positions_of

    def expected() -> tuple[dict[bytes, bytes | None], dict[bytes, set[bytes]]]:
        position_rows = latest_per_key(written[positions_topic])
        ticker_rows = latest_per_key(written[tickers_topic])
        ticker_of = {
            key: ticker_rows.get(json.loads(row)["ticker"].encode()) for key, row in position_rows.items()
        }
        positions_of = {
            symbol: {
                key for key, row in position_rows.items() if json.loads(row)["ticker"].encode() == symbol
            }
            for symbol in ticker_rows
        }
        return ticker_of, positions_of

    ticker_of, positions_of = answers()
    assert ticker_of[b"4"] == _ticker("NASDAQ", "Apple Inc")
    assert positions_of == {b"AAPL": {b"1", b"4"}, b"VOD": {b"2", b"5"}, b"FB": {b"3"}}
    assert (ticker_of, positions_of) == expected()

    # Position 4 moves to FB, 2 is closed, 6 opens on a ticker not listed yet; VOD is delisted
    # (position 5 keeps pointing at it) and FB changes its name.
    write(
        positions_topic,
        [(b"4", _position("client2", "FB", 25)), (b"2", None), (b"6", _position("client4", "MSFT", 7))],
    )
    write(tickers_topic, [(b"VOD", None), (b"FB", _ticker("NASDAQ", "Meta Platforms"))])
    ticker_of, positions_of = answers()
    assert ticker_of[b"4"] == _ticker("NASDAQ", "Meta Platforms")
    assert ticker_of[b"5"] is None
    assert ticker_of[b"6"] is None
    assert positions_of == {b"AAPL": {b"1"}, b"FB": {b"3", b"4"}}
    assert (ticker_of, positions_of) == expected()

    # MSFT is listed, VOD comes back, and a random walk of trades and listings follows.
    write(
        tickers_topic, [(b"MSFT", _ticker("NASDAQ", "Microsoft")), (b"VOD", _ticker("LON", "Vodafone Group"))]
    )
    ticker_of, positions_of = answers()
    assert positions_of[b"MSFT"] == {b"6"}
    assert positions_of[b"VOD"] == {b"5"}
    assert (ticker_of, positions_of) == expected()
    rng = random.Random(51)
    symbols = ["AAPL", "VOD", "FB", "MSFT", "NFLX", "TSLA"]
    for _round in range(4):
        trades: list[Record] = [
            (
                b"%d" % rng.randrange(1, 40),
                None if rng.random() < 0.2 else _position("c", rng.choice(symbols), rng.randrange(100)),
            )
            for _ in range(60)
        ]
        listings: list[Record] = [
            (
                rng.choice(symbols).encode(),
                None if rng.random() < 0.3 else _ticker("X", f"n{rng.randrange(9)}"),
            )
            for _ in range(4)
        ]
        write(positions_topic, trades)
        write(tickers_topic, listings)
        assert answers() == expected()
