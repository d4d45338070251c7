"""The executor side of Spark lookups: dedupe, cache, decoding, null keys (Arrow only, no Spark)."""

from __future__ import annotations

import threading

import httpx
import pyarrow as pa

from clients import StatestoreClient
from clients.lookup import KnownValues, Lookup, LookupSpec, key_bytes_array
from clients.options import ClientOptions
from clients.value_decoding import decode, decode_json, may_hold_newline
from store import InMemoryStore
from tests.clients.conftest import ServeStores

PRODUCT = pa.struct([("name", pa.string()), ("price", pa.float64()), ("tags", pa.list_(pa.string()))])


class CountingTransport(httpx.HTTPTransport):
    """A real HTTP transport that counts batch-get requests and the keys they carry (a lookup
    sends several at once, from several threads)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = 0
        self.keys = 0
        self._counting = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(":batchGet"):
            rows = pa.ipc.open_stream(request.read()).read_all().num_rows
            with self._counting:
                self.requests += 1
                self.keys += rows
        return super().handle_request(request)


def test_json_documents_decode_to_structs_and_misfits_become_null() -> None:
    stored = pa.array(
        [
            b'{"name": "pen", "price": 2, "tags": ["a"], "extra": {"x": 1}}',
            None,
            b'{"name": 7}',
            b'{\n  "name": "ink"\n}',
            b"not json",
            b"[1, 2]",
            b'{"tags": "abc"}',
            b'{"price": 1.5}',
        ],
        pa.binary(),
    )
    values, misfits = decode_json(stored, PRODUCT)
    assert values.to_pylist() == [
        {"name": "pen", "price": 2.0, "tags": ["a"]},
        None,
        None,
        {"name": "ink", "price": None, "tags": None},
        None,
        None,
        None,
        {"name": None, "price": 1.5, "tags": None},
    ]
    assert misfits.to_pylist() == [False, False, True, False, True, True, True, False]


def test_newlines_are_found_in_slices_and_string_arrays_alike() -> None:
    documents = [b'{"name":\n"pen"}', b'{"name": "ink"}', b'{"price":\n1}']
    nulls = {"name": None, "price": None, "tags": None}
    for stored in (pa.array(documents, pa.binary()), pa.array([d.decode() for d in documents], pa.string())):
        # A newline outside the slice (only in the data buffer it shares) changes nothing.
        values, misfits = decode_json(stored.slice(1, 1), PRODUCT)
        assert (values.to_pylist(), misfits.to_pylist()) == ([{**nulls, "name": "ink"}], [False])
        values, misfits = decode_json(stored.slice(1), PRODUCT)
        assert values.to_pylist() == [{**nulls, "name": "ink"}, {**nulls, "price": 1.0}]
        assert misfits.to_pylist() == [False, False]
    values, _ = decode_json(pa.array([b"", b'{"name": "pen"}'], pa.binary()).slice(0, 1), PRODUCT)
    assert values.to_pylist() == [None]
    # The data buffer is searched a MiB at a time: a newline past the first MiB is found.
    padded = pa.array([b'{"name": "%s"}' % (b"x" * 700_000)] * 2 + [b'{"price":\n3}'], pa.binary())
    assert may_hold_newline(padded)
    assert not may_hold_newline(pa.array([value.decode() for value in padded.to_pylist()[:2]], pa.string()))
    values, misfits = decode_json(padded, PRODUCT)
    assert values.to_pylist()[2] == {**nulls, "price": 3.0}
    assert misfits.to_pylist() == [False, False, False]


def test_a_json_null_first_decodes_to_a_struct_of_nulls() -> None:
    # pyarrow's JSON reader crashed the process on a block starting with the document null.
    nulls = {"name": None, "price": None, "tags": None}
    values, misfits = decode_json(pa.array([b"null", b'{"name": "pen"}'], pa.binary()), PRODUCT)
    assert values.to_pylist() == [nulls, {**nulls, "name": "pen"}]
    assert misfits.to_pylist() == [False, False]
    # A misfit splits the documents: the half after it starts with null.
    values, misfits = decode_json(pa.array([b'{"name": 3}', b"null", b'{"price": 1}'], pa.binary()), PRODUCT)
    assert values.to_pylist() == [None, nulls, {**nulls, "price": 1.0}]
    assert misfits.to_pylist() == [True, False, False]
    assert decode_json(pa.array([b"null"], pa.binary()), PRODUCT)[0].to_pylist() == [nulls]


def test_text_values_with_invalid_utf8_become_null_and_count() -> None:
    values, misfits = decode(pa.array([b"ok", b"\xff", None], pa.binary()), "string", None)
    assert values.to_pylist() == ["ok", None, None]
    assert misfits.to_pylist() == [False, True, False]
    raw, none_bad = decode(pa.array([b"\xff"], pa.binary()), "bytes", None)
    assert raw.to_pylist() == [b"\xff"]
    assert none_bad.to_pylist() == [False]


def test_keys_become_bytes_by_type() -> None:
    assert key_bytes_array(pa.array(["é", None])).to_pylist() == ["é".encode(), None]
    assert key_bytes_array(pa.array([12, None], pa.int64())).to_pylist() == [b"12", None]
    assert key_bytes_array(pa.array([b"\x00"], pa.large_binary())).type == pa.binary()


def test_known_values_start_over_when_full() -> None:
    known = KnownValues(pa.binary(), max_bytes=100)
    keys = pa.array([b"a", b"b"], pa.binary())
    known.add(keys, pa.array([b"1", None], pa.binary()), pa.array([True, False]), pa.array([False, False]))
    assert known.index(pa.array([b"b", b"c", None], pa.binary())).to_pylist() == [1, None, None]
    assert not known.full
    known.add(pa.array([b"k" * 100]), pa.array([b"v"]), pa.array([True]), pa.array([False]))
    assert known.full
    known.reset()
    assert len(known) == 0


def test_lookup_dedupes_caches_and_never_matches_null_keys(serve_stores: ServeStores) -> None:
    store = InMemoryStore("products")
    store.apply([(0, i, f"p{i}".encode(), b'{"name": "n%d", "price": %d}' % (i, i)) for i in range(10)])
    url = serve_stores({"products": (store, "json")})
    transport = CountingTransport()
    spec = LookupSpec(ClientOptions(url, batch_size=3), "products", "0:10", "json", PRODUCT)
    with StatestoreClient(spec.options, transport=transport) as client, Lookup(spec, client) as lookup:
        keys = pa.array(["p1", "p2", None, "p1", "zz", "p3", "p2", "p4"])
        result = lookup.lookup(keys)
        assert [v["name"] if v else None for v in result.values.to_pylist()] == [
            "n1", "n2", None, "n1", None, "n3", "n2", "n4",
        ]  # fmt: skip
        assert result.found.to_pylist() == [True, True, False, True, False, True, True, True]
        assert result.mismatched == 0
        assert (transport.requests, transport.keys) == (2, 5)  # 5 distinct non-null keys, batches of 3
        again = lookup.lookup(pa.array(["p4", "zz", "p5"]))
        assert [v["name"] if v else None for v in again.values.to_pylist()] == ["n4", None, "n5"]
        assert (transport.requests, transport.keys) == (3, 6)  # only p5 was not known
        assert lookup.keys_fetched == 6
        empty = lookup.lookup(pa.array([None, None], pa.string()))
        assert empty.values.to_pylist() == [None, None]
        assert transport.requests == 3


class PairedTransport(httpx.HTTPTransport):
    """A real HTTP transport whose batch gets go through in pairs: each waits for another one to be
    in flight at the same time (a lookup sending one request at a time breaks the barrier)."""

    def __init__(self) -> None:
        super().__init__()
        self.pairs = threading.Barrier(2, timeout=30)
        self.requests = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(":batchGet"):
            self.requests += 1
            self.pairs.wait()
        return super().handle_request(request)


def test_lookup_keeps_several_batch_gets_in_flight(serve_stores: ServeStores) -> None:
    store = InMemoryStore("products")
    store.apply([(0, i, f"p{i}".encode(), b'{"name": "n%d", "price": %d}' % (i, i)) for i in range(8)])
    url = serve_stores({"products": (store, "json")})
    transport = PairedTransport()
    spec = LookupSpec(ClientOptions(url, batch_size=2), "products", "0:8", "json", PRODUCT)
    with StatestoreClient(spec.options, transport=transport) as client, Lookup(spec, client) as lookup:
        result = lookup.lookup(pa.array([f"p{i}" for i in reversed(range(8))]))
    assert [v["name"] for v in result.values.to_pylist()] == [f"n{i}" for i in reversed(range(8))]
    assert transport.requests == 4
    assert not transport.pairs.broken
