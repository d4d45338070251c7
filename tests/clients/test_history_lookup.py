"""A point-in-time lookup needing most of a store's keys reads its history whole and answers every
row locally: the same answers as the per-row reads and the brute-force model (out-of-order
timestamps, tombstones, re-inserts, several partitions, times exactly on a version, before the
first version, pinned older positions), the same errors (below the floor, a time the versions do
not settle), counted in requests: history pages instead of batch gets (real broker, real RocksDB,
real uvicorn); a Spark join reading it whole equals pandas ``merge_asof`` (real Spark local[2])."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pyarrow as pa
import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from clients import StatestoreClient
from clients.exceptions import HistoryExpiredError
from clients.history import whole_histories
from clients.lookup import Lookup, LookupSpec
from clients.options import ClientOptions
from clients.spark import lookup_join
from service.local.broker import LocalBroker
from tests.clients.conftest import real_service
from tests.clients.spark.test_lookups import BATCH_GETS, requests_of
from tests.clients.test_as_of_time import expected_join
from tests.support.kafka import create_topic, make_producer, unique_topic
from tests.support.stores import wait_until
from tests.support.timed import Stamped, compacted, produce_stamped, value_at
from tests.support.together import together
from wire.position import Position

PARTITIONS = 3
KEYS = [f"k{i:02d}" for i in range(40)]
LATE = "k05"  # a record stamped below the pre-history bound: some of its times are unsettled
VALUE = pa.struct([("price", pa.float64())])


class Requests(httpx.HTTPTransport):
    """A real HTTP transport counting batch gets and history pages."""

    def __init__(self) -> None:
        super().__init__()
        self.batch_gets = 0
        self.pages = 0
        self.as_of: set[str | None] = set()
        self._counting = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self._counting:
            if request.url.path.endswith(":batchGet"):
                self.batch_gets += 1
            elif request.url.path.endswith("/history"):
                self.pages += 1
            self.as_of.add(request.url.params.get("as_of"))
        return super().handle_request(request)


def versions(rng: random.Random, count: int, low: int, high: int, keys: list[str]) -> list[Any]:
    out = []
    for _ in range(count):
        key = rng.choice(keys)
        value = None if rng.random() < 0.2 else json.dumps({"price": rng.randrange(1, 500)}).encode()
        out.append((key.encode(), value, rng.randint(low, high), KEYS.index(key) % PARTITIONS))
    return out


@pytest.fixture(scope="module")
def pit(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A price dimension: versions before history began, then out of order after it; one late one."""
    rng = random.Random(42)
    topic = unique_topic("pit")
    create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    producer = make_producer(broker.bootstrap_servers)
    before = produce_stamped(producer, topic, versions(rng, 60, 1_000, 2_000, KEYS[:30]))
    with real_service(
        broker.bootstrap_servers,
        tmp_path_factory.mktemp("pit"),
        {"prices": (topic, "json")},
        {"prices": {"history": {"retention_offsets": 1_000_000}}},
    ) as url:
        log: list[Stamped] = compacted(before)
        middle = None
        for low in (6_000, 3_000, 9_000, 2_000):
            log += produce_stamped(producer, topic, versions(rng, 80, low, low + 3_000, KEYS))
            middle = middle or position_of(log)
        late = (LATE.encode(), b'{"price": 7}', 1_500, KEYS.index(LATE) % PARTITIONS)
        later = (LATE.encode(), b'{"price": 8}', 20_000, KEYS.index(LATE) % PARTITIONS)
        log += produce_stamped(producer, topic, [late, later])
        end = position_of(log)
        with StatestoreClient(url, deadline=30) as client:
            client.get_many("prices", KEYS, min_position=end)
        yield {
            "url": url,
            "log": log,
            "floor": max(r.timestamp for r in before),
            "end": end,
            "middle": middle,
        }


def position_of(log: list[Stamped]) -> str:
    return ",".join(f"{p}:{max(r.offset for r in log if r.partition == p) + 1}" for p in range(PARTITIONS))


def probes(pit: dict[str, Any]) -> list[int]:
    times = {pit["floor"], 30_000}
    for record in pit["log"]:
        times.update({record.timestamp - 1, record.timestamp, record.timestamp + 1})
    return sorted(t for t in times if t >= pit["floor"])


def spec_of(pit: dict[str, Any], position: str, **changes: Any) -> LookupSpec:
    options = ClientOptions(pit["url"], batch_size=50)
    spec = LookupSpec(options, "prices", position, "json", VALUE, exact=True, lookup_id=str(random.random()))
    return dataclasses.replace(spec, **changes)


def facts(pit: dict[str, Any], count: int, seed: int) -> tuple[list[str | None], list[int | None]]:
    """Most keys (never the late one), some never written, some null; times on and around versions."""
    rng = random.Random(seed)
    times = probes(pit)
    keys: list[str | None] = [rng.choice([*(k for k in KEYS if k != LATE), "never"]) for _ in range(count)]
    at: list[int | None] = [rng.choice(times) for _ in range(count)]
    keys[::17] = [None] * len(keys[::17])
    at[::13] = [None] * len(at[::13])
    return keys, at


def model(pit: dict[str, Any], keys: list[str | None], times: list[int | None], position: str) -> list[Any]:
    as_of = {int(p): int(o) for p, o in (part.split(":") for part in position.split(","))}
    out = []
    for key, at in zip(keys, times, strict=True):
        value = None if key is None or at is None else value_at(pit["log"], key.encode(), at, as_of)
        out.append(None if value is None else {"price": float(json.loads(value)["price"])})
    return out


def looked_up(
    spec: LookupSpec, batches: list[tuple[list[str | None], list[int | None]]]
) -> tuple[list[Any], Requests, Lookup]:
    requests = Requests()
    with StatestoreClient(spec.options, transport=requests) as client, Lookup(spec, client) as lookup:
        answers = [
            lookup.lookup_at(pa.array(keys, pa.string()), pa.array(times, pa.int64())).values.to_pylist()
            for keys, times in batches
        ]
    return answers, requests, lookup


@pytest.mark.parametrize("pinned", ["end", "middle"])
def test_a_lookup_needing_most_keys_reads_the_history_whole_with_the_per_row_answers(
    pit: dict[str, Any], pinned: str
) -> None:
    whole_histories.clear()
    position = pit[pinned]
    batches = [facts(pit, 600, 1), facts(pit, 300, 2)]
    whole, by_pages, lookup = looked_up(spec_of(pit, position, store_keys=len(KEYS)), batches)
    per_row, by_gets, _ = looked_up(spec_of(pit, position, store_keys=None), batches)
    for (keys, times), scanned, fetched in zip(batches, whole, per_row, strict=True):
        assert scanned == fetched == model(pit, keys, times, position)
    assert by_pages.batch_gets == 0
    assert by_pages.pages >= 1
    assert by_pages.as_of == by_gets.as_of == {position}
    assert lookup.history.versions_scanned > len(KEYS)
    assert by_gets.batch_gets >= 2
    assert by_gets.pages == 0
    # Before any version and on a version exactly: the model says so, the answers agree.
    assert any(v is None for v in whole[0])
    assert any(v is not None for v in whole[0])


def test_the_next_lookup_of_the_same_spec_in_the_process_reads_nothing(pit: dict[str, Any]) -> None:
    whole_histories.clear()
    spec = spec_of(pit, pit["end"], store_keys=len(KEYS))
    batch = facts(pit, 400, 3)
    first, reads, _ = looked_up(spec, [batch])
    again, nothing, _ = looked_up(spec, [batch])
    assert first == again == [model(pit, *batch, pit["end"])]
    assert reads.pages >= 1
    assert (nothing.pages, nothing.batch_gets) == (0, 0)
    whole_histories.clear()


def test_a_time_below_the_floor_or_unsettled_is_the_same_error_either_way(pit: dict[str, Any]) -> None:
    floor = pit["floor"]
    keys, times = facts(pit, 400, 4)
    below = (keys, [times[0], floor - 1, *times[2:]])  # row 0 has no key
    unsettled = ([*keys, LATE], [*times, floor + 1])
    for store_keys in (len(KEYS), None):
        whole_histories.clear()
        with pytest.raises(HistoryExpiredError) as expired:
            looked_up(spec_of(pit, pit["end"], store_keys=store_keys), [below])
        assert expired.value.time_floor == floor
        with pytest.raises(HistoryExpiredError, match=LATE):
            looked_up(spec_of(pit, pit["end"], store_keys=store_keys), [(keys, times), unsettled])
        # Once its later version is there, the late key is settled.
        settled = ([*keys, LATE], [*times, 20_000])
        (answer,), _, _ = looked_up(spec_of(pit, pit["end"], store_keys=store_keys), [settled])
        assert answer[-1] == {"price": 8.0}
        assert answer == model(pit, *settled, pit["end"])


def test_a_history_above_scan_bytes_is_read_row_by_row(pit: dict[str, Any]) -> None:
    whole_histories.clear()
    batches = [facts(pit, 500, 5), facts(pit, 500, 6)]
    spec = spec_of(pit, pit["end"], store_keys=len(KEYS), scan_bytes=2_000)
    answers, requests, lookup = looked_up(spec, batches)
    assert answers == [model(pit, *batch, pit["end"]) for batch in batches]
    assert requests.pages == 1  # tried once, stopped at the bound, never again by this lookup
    assert requests.batch_gets >= 2
    assert lookup.history.versions_scanned == 0
    assert whole_histories.get(spec) is None


def in_new_worker(
    spec: LookupSpec, batches: list[tuple[list[str | None], list[int | None]]]
) -> tuple[list[Any], Requests, Lookup]:
    """``batches`` looked up as by a task in another Python worker (nothing kept in this process)."""
    whole_histories.clear()
    return looked_up(spec, batches)


def test_the_workers_of_a_machine_read_a_history_whole_once(pit: dict[str, Any]) -> None:
    spec = spec_of(pit, pit["end"], store_keys=len(KEYS))
    batches = [facts(pit, 600, 7), facts(pit, 300, 8)]
    first, reads, reader = in_new_worker(spec, batches)
    second, loads, loader = in_new_worker(spec, batches)
    expected = [model(pit, *batch, pit["end"]) for batch in batches]
    assert first == second == expected
    assert reads.pages >= 1
    assert reads.batch_gets == 0
    assert (loads.pages, loads.batch_gets) == (0, 0)  # nothing asked of the service
    assert reader.history.versions_scanned == loader.history.versions_loaded > len(KEYS)
    assert (reader.history.versions_loaded, loader.history.versions_scanned) == (0, 0)
    # The errors are the per-row read's too.
    with pytest.raises(HistoryExpiredError):
        in_new_worker(spec, [(["k01"] * 400, [pit["floor"] - 1] * 400)])
    # Another planned lookup reads for itself.
    _, again, _ = in_new_worker(dataclasses.replace(spec, lookup_id="another"), batches)
    assert again.pages == reads.pages


def test_a_history_too_large_for_one_worker_is_not_tried_by_the_others(pit: dict[str, Any]) -> None:
    spec = spec_of(pit, pit["end"], store_keys=len(KEYS), scan_bytes=2_000)
    batch = facts(pit, 500, 10)
    first, tried, _ = in_new_worker(spec, [batch])
    second, by_gets, _ = in_new_worker(spec, [batch])
    assert first == second == [model(pit, *batch, pit["end"])]
    assert tried.pages == 1  # stopped at the bound
    assert by_gets.pages == 0
    assert by_gets.batch_gets == tried.batch_gets > 0


def test_tasks_starting_together_read_the_history_once(pit: dict[str, Any]) -> None:
    spec = spec_of(pit, pit["end"], store_keys=len(KEYS))
    batch = facts(pit, 500, 9)
    _, alone, _ = in_new_worker(dataclasses.replace(spec, lookup_id="alone"), [batch])
    whole_histories.clear()

    def task(start: threading.Barrier) -> tuple[list[Any], Requests]:
        requests = Requests()
        with StatestoreClient(spec.options, transport=requests) as client, Lookup(spec, client) as lookup:
            start.wait()
            keys, times = pa.array(batch[0], pa.string()), pa.array(batch[1], pa.int64())
            return lookup.lookup_at(keys, times).values.to_pylist(), requests

    answers, counted = zip(*together(3, task), strict=True)
    assert list(answers) == [model(pit, *batch, pit["end"])] * 3
    assert sum(requests.pages for requests in counted) == alone.pages
    assert sum(requests.batch_gets for requests in counted) == 0


HISTORY_PAGES = "/v1/stores/{store}/history"


@contextlib.contextmanager
def history_service(broker: LocalBroker, tmp_path: Path, store: str) -> Iterator[tuple[str, str, Producer]]:
    """A JSON store ``store`` keeping history, on a new topic, served by the real service: its URL,
    the topic and a producer to it."""
    topic = unique_topic(store)
    create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    history = {store: {"history": {"retention_offsets": 1_000_000}}}
    with real_service(broker.bootstrap_servers, tmp_path / "state", {store: (topic, "json")}, history) as url:
        yield url, topic, make_producer(broker.bootstrap_servers)


def test_a_point_in_time_join_needing_most_keys_reads_the_history_whole_with_the_rows_of_merge_asof(
    spark: SparkSession, broker: LocalBroker, tmp_path: Path
) -> None:
    # 400 keys written once, a tenth of them again (a third of those deleted): a task asking most
    # keys reads whole.
    rng = random.Random(7)
    keys = [f"w{i:03d}" for i in range(400)]
    with history_service(broker, tmp_path, "wide") as (url, topic, producer):
        first = [
            (k.encode(), b'{"price": %d}' % i, rng.randint(1_000, 5_000), i % PARTITIONS)
            for i, k in enumerate(keys)
        ]
        again = [
            (
                k.encode(),
                None if i % 3 == 0 else b'{"price": -%d}' % i,
                rng.randint(1_000, 5_000),
                keys.index(k) % PARTITIONS,
            )
            for i, k in enumerate(keys[::10])
        ]
        log = produce_stamped(producer, topic, first) + produce_stamped(producer, topic, again)
        with StatestoreClient(url, deadline=30) as client:
            client.get_many("wide", keys, min_position=position_of(log))
        facts = pd.DataFrame(
            {
                "fact": range(3_000),
                "sku": [rng.choice([*keys, "never"]) for _ in range(3_000)],
                "at": [rng.randint(500, 6_000) for _ in range(3_000)],
            }
        )
        expected = expected_join(facts, log)["expected"].tolist()
        df = spark.createDataFrame(facts).repartition(2)
        for scan_bytes in (1 << 20, 0):
            joined = lookup_join(
                df, store="wide", on="sku", url=url, value_schema="price double", as_of_time="at",
                scan_bytes=scan_bytes,
            )  # fmt: skip
            got, answered = requests_of(url, joined.toPandas)
            assert got.sort_values("fact")["price"].tolist() == pytest.approx(expected, nan_ok=True)
            assert answered[HISTORY_PAGES if scan_bytes else BATCH_GETS] >= 1
            assert answered[BATCH_GETS if scan_bytes else HISTORY_PAGES] == 0


def test_a_point_in_time_join_decides_by_the_keys_counted_of_a_store_written_many_times(
    spark: SparkSession, broker: LocalBroker, tmp_path: Path
) -> None:
    # 300 keys written ten times each after READY: RocksDB's estimate counts the overwrites not
    # compacted yet (about 3,300 here until a flush merges them, by which no task would read
    # whole), the service's count does not. A task asking most keys reads the history whole, one
    # asking a few reads them by key.
    rng = random.Random(11)
    keys = [f"o{i:03d}" for i in range(300)]
    with history_service(broker, tmp_path, "often") as (url, topic, producer):
        log: list[Stamped] = []
        for round_ in range(10):
            log += produce_stamped(
                producer,
                topic,
                [
                    (
                        k.encode(),
                        b'{"price": %d}' % (round_ * 1_000 + i),
                        1_000 * (round_ + 1) + i,
                        i % PARTITIONS,
                    )
                    for i, k in enumerate(keys)
                ],
            )
            if round_ == 0:
                every_key = Position.parse(position_of(log))

        def info() -> dict[str, Any]:
            answer: dict[str, Any] = httpx.get(f"{url}/v1/stores/often", timeout=10).json()
            return answer

        def counted_after_every_key() -> bool:
            at = info()["counted_keys_position"]
            return at is not None and Position.parse(at).reaches(every_key)

        wait_until(counted_after_every_key, 60, "keys counted once every key was written")
        status = info()
        assert status["counted_keys"] == len(keys), status
        for asked, source in ((keys, HISTORY_PAGES), (keys[:10], BATCH_GETS)):
            facts = pd.DataFrame(
                {
                    "fact": range(2_000),
                    "sku": [rng.choice(asked) for _ in range(2_000)],
                    "at": [rng.randint(500, 12_000) for _ in range(2_000)],
                }
            )
            expected = expected_join(facts, log)["expected"].tolist()
            joined = lookup_join(
                spark.createDataFrame(facts).repartition(2), store="often", on="sku", url=url,
                value_schema="price double", as_of_time="at",
            )  # fmt: skip
            got, answered = requests_of(url, joined.toPandas)
            assert got.sort_values("fact")["price"].tolist() == pytest.approx(expected, nan_ok=True)
            other = BATCH_GETS if source == HISTORY_PAGES else HISTORY_PAGES
            assert answered[source] >= 1, (answered, status)
            assert answered[other] == 0, (answered, status)
