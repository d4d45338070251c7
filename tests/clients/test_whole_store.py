"""A lookup that needs most of a store reads it whole by Arrow scan pages: the same answers as batch
gets, bounded in bytes, kept for the next task of the same lookup (Arrow only, real service, no Spark)."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator

import httpx
import pyarrow as pa
import pytest

from clients import StatestoreClient
from clients import whole_store as whole
from clients.lookup import Lookup, LookupResult, LookupSpec, whole_stores
from clients.options import ClientOptions
from store import InMemoryStore
from tests.clients.conftest import ServeStores

VALUE = pa.struct([("name", pa.string()), ("price", pa.float64())])
PINNED = "0:400"
PAGE = 64  # keys per scan page in these tests: a store of a few hundred keys takes several


class Requests(httpx.HTTPTransport):
    """A real HTTP transport counting batch gets (and their keys) and Arrow scan pages, with the
    position parameters every one carried."""

    def __init__(self) -> None:
        super().__init__()
        self.batch_gets = 0
        self.keys = 0
        self.pages = 0
        self.positions: set[tuple[str | None, str | None]] = set()
        self._counting = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        params = request.url.params
        with self._counting:
            if request.url.path.endswith(":batchGet"):
                self.batch_gets += 1
                self.keys += pa.ipc.open_stream(request.read()).read_all().num_rows
            elif request.url.path.endswith("/scan"):
                assert request.headers["accept"] == "application/vnd.apache.arrow.stream"
                self.pages += 1
            self.positions.add((params.get("as_of"), params.get("min_position")))
        return super().handle_request(request)

    @property
    def counts(self) -> tuple[int, int]:
        return self.batch_gets, self.pages


def pages(keys: int) -> int:
    return -(-keys // PAGE)


def records() -> tuple[list[tuple[int, int, bytes, bytes | None]], dict[bytes, bytes]]:
    """Writes up to offset 400 (the pinned position) and after it, and the table as of 400."""
    written: list[tuple[int, int, bytes, bytes | None]] = []
    for i in range(300):
        value: bytes | None = json.dumps({"name": f"n{i}", "price": i / 4}).encode()
        if i % 50 == 7:
            value = b'{"name": 12}'  # does not fit the struct: a misfit, either way
        elif i % 50 == 9:
            value = b"null"  # a stored JSON null: found, with a null value
        written.append((0, i, b"k%03d" % i, value))
    written += [(0, 300 + i, b"k%03d" % (i * 3), None) for i in range(100)]  # tombstones at 300-399
    table: dict[bytes, bytes] = {}
    for _, _, key, value in written:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    # After the pinned position: changed values, new keys, more tombstones; an exact read ignores them.
    later = [(0, 400 + i, b"k%03d" % (i * 2 + 1), b'{"name": "later", "price": 0}') for i in range(80)]
    later += [(0, 480 + i, b"z%03d" % i, b'{"name": "new", "price": 1}') for i in range(20)]
    later += [(0, 500 + i, b"k%03d" % (i * 5 + 1), None) for i in range(20)]
    return written + later, table


def history_store() -> tuple[InMemoryStore, dict[bytes, bytes]]:
    store = InMemoryStore("products", keeps_history=True)
    written, table = records()
    store.apply(written)
    return store, table


@pytest.fixture
def served(
    serve_stores: ServeStores, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, dict[bytes, bytes]]]:
    """A JSON store keeping history, written past the pinned position; the table as of it."""
    monkeypatch.setattr(whole, "SCAN_PAGE", PAGE)
    store, table = history_store()
    whole_stores.clear()
    yield serve_stores({"products": (store, "json")}), table
    whole_stores.clear()


def spec_of(url: str, *, store_keys: int | None, **changes: object) -> LookupSpec:
    spec = LookupSpec(ClientOptions(url, batch_size=40), "products", PINNED, "json", VALUE, exact=True)
    return dataclasses.replace(spec, store_keys=store_keys, **changes)  # type: ignore[arg-type]


def model(keys: list[str | None], table: dict[bytes, bytes]) -> list[tuple[object, bool, bool]]:
    """Each key's (value, found, misfit) as of the table, in plain Python."""
    rows: list[tuple[object, bool, bool]] = []
    for key in keys:
        stored = None if key is None else table.get(key.encode())
        if stored is None:
            rows.append((None, False, False))
            continue
        document = json.loads(stored) or {}  # a JSON null is a struct of nulls
        fits = isinstance(document.get("name", ""), str)
        value = {"name": document.get("name"), "price": document.get("price")} if fits else None
        rows.append((value, True, not fits))
    return rows


def as_rows(result: LookupResult) -> list[tuple[object, bool, bool]]:
    return list(
        zip(result.values.to_pylist(), result.found.to_pylist(), result.misfit.to_pylist(), strict=True)
    )


def looked_up(spec: LookupSpec, batches: list[list[str | None]]) -> tuple[list[LookupResult], Requests]:
    requests = Requests()
    with StatestoreClient(spec.options, transport=requests) as client, Lookup(spec, client) as lookup:
        results = [lookup.lookup(pa.array(keys, pa.string())) for keys in batches]
    return results, requests


# Most keys of the store (present, tombstoned, written only after the pin, never written), nulls.
MOST = [None if i % 37 == 0 else f"k{(i * 7) % 330:03d}" for i in range(900)] + ["z001", "nope"]


def test_a_lookup_needing_most_keys_reads_the_store_whole_with_the_answers_of_batch_gets(
    served: tuple[str, dict[bytes, bytes]],
) -> None:
    url, table = served
    (scanned,), by_scan = looked_up(spec_of(url, store_keys=320), [MOST])
    (fetched,), by_gets = looked_up(spec_of(url, store_keys=None), [MOST])
    expected = model(MOST, table)
    assert as_rows(scanned) == as_rows(fetched) == expected
    assert scanned.mismatched == fetched.mismatched == sum(misfit for _, _, misfit in expected) > 0
    # Whole: a page per 64 keys live at the pin, no batch get; else batch gets of 40 distinct keys.
    assert by_scan.counts == (0, pages(len(table)))
    distinct = len(set(MOST) - {None})
    assert by_gets.counts == (-(-distinct // 40), 0)
    assert by_gets.keys == distinct
    assert by_scan.positions == by_gets.positions == {(PINNED, None)}


def test_keys_after_a_store_read_whole_are_found_or_absent_without_a_request(
    served: tuple[str, dict[bytes, bytes]],
) -> None:
    url, table = served
    later = ["k001", "k299", "z005", "k003", "other", None]
    results, requests = looked_up(spec_of(url, store_keys=320), [MOST, later])
    assert as_rows(results[1]) == model(later, table)
    assert requests.counts == (0, pages(len(table)))


def test_at_least_the_pinned_position_every_page_demands_it(served: tuple[str, dict[bytes, bytes]]) -> None:
    url, _ = served
    now: dict[bytes, bytes | None] = {}
    for _, _, key, value in records()[0]:
        now[key] = value
    now = {key: value for key, value in now.items() if value is not None}
    spec = spec_of(url, store_keys=320, exact=False)
    (scanned,), requests = looked_up(spec, [MOST])
    (fetched,), _ = looked_up(spec_of(url, store_keys=None, exact=False), [MOST])
    assert as_rows(scanned) == as_rows(fetched)  # both read the store as it is now
    assert requests.counts == (0, pages(len(now)))
    assert {as_of for as_of, _ in requests.positions} == {None}
    assert {floor for _, floor in requests.positions} >= {PINNED}


def test_few_keys_go_by_batch_gets(served: tuple[str, dict[bytes, bytes]]) -> None:
    url, table = served
    few = [f"k{i:03d}" for i in range(0, 450, 3)]  # 150 keys: under half of the store
    (result,), requests = looked_up(spec_of(url, store_keys=320), [few])
    assert as_rows(result) == model(few, table)
    assert requests.counts == (4, 0)


def test_a_store_above_scan_bytes_is_fetched_by_batch_gets(served: tuple[str, dict[bytes, bytes]]) -> None:
    url, table = served
    # Two pages hold about 64 * (4 + 30) bytes each: the second passes the bound.
    spec = spec_of(url, store_keys=320, scan_bytes=3000)
    results, requests = looked_up(spec, [MOST, MOST[:300]])
    assert as_rows(results[0]) == model(MOST, table)
    assert requests.pages == 2  # tried once, stopped at the bound, never again by this lookup
    assert requests.batch_gets == -(-len(set(MOST) - {None}) // 40)
    assert whole_stores.get(spec) is None


def test_the_next_task_of_the_same_lookup_reuses_the_store_read_whole(
    served: tuple[str, dict[bytes, bytes]],
) -> None:
    url, table = served
    spec = spec_of(url, store_keys=320, lookup_id="a")
    _, first = looked_up(spec, [MOST])
    (again,), second = looked_up(dataclasses.replace(spec), [MOST])
    assert first.counts == (0, pages(len(table)))
    assert second.counts == (0, 0)
    assert as_rows(again) == model(MOST, table)
    # Another lookup (planned again) or another position reads for itself.
    for other in (dataclasses.replace(spec, lookup_id="b"), dataclasses.replace(spec, position="0:300")):
        _, requests = looked_up(other, [MOST])
        assert requests.counts[0] == 0
        assert requests.counts[1] > 0


@pytest.mark.parametrize(
    "limits",
    [{"max_scan_limit": PAGE // 2}, {"max_answer_bytes": 1500}],
    ids=["pages-above-max_scan_limit", "pages-above-max_answer_bytes"],
)
def test_a_service_refusing_pages_this_large_gets_batch_gets(
    serve_stores: ServeStores, monkeypatch: pytest.MonkeyPatch, limits: dict[str, int]
) -> None:
    monkeypatch.setattr(whole, "SCAN_PAGE", PAGE)
    store, table = history_store()
    url = serve_stores({"products": (store, "json")}, limits=limits)
    (result,), requests = looked_up(spec_of(url, store_keys=320), [MOST])
    assert as_rows(result) == model(MOST, table)
    assert requests.pages == 1  # refused (413), not tried again
    assert requests.batch_gets == -(-len(set(MOST) - {None}) // 40)


@pytest.mark.parametrize(
    ("info", "keys"),
    [
        ({"counted_keys": 100_000, "approximate_num_keys": 332_926}, 100_000),
        ({"counted_keys": None, "approximate_num_keys": 332_926}, 332_926),  # not counted yet
        ({"approximate_num_keys": 4}, 4),  # a service that does not count
        ({"counted_keys": 0, "approximate_num_keys": 12}, 0),  # every key deleted
        ({"counted_keys": True}, None),
        ({}, None),
    ],
)
def test_a_store_is_sized_by_its_counted_keys_else_the_estimate(
    info: dict[str, object], keys: int | None
) -> None:
    assert whole.store_keys(info) == keys
