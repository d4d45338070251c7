"""Index lookups over HTTP: GET one value (paged), POST many values (JSON and Arrow), their problems."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import quote

import orjson
import pyarrow as pa
import pytest

from store import (
    IndexNotReadyError,
    IndexSpec,
    IndexStatus,
    InMemoryStore,
    Position,
    ReadOnlyKeyValueStore,
    ScanPage,
    StoreStatus,
)
from tests.service.conftest import Service, assert_problem

ARROW = "application/vnd.apache.arrow.stream"
URL = "/v1/stores/positions/indexes/by_ticker"
BATCH = "/v1/stores/positions/indexes/by_ticker:batchGet"
TICKERS = ["AAPL", "MSFT", "BRK/B", "Ünï €"]

POSITIONS_CONFIG = {
    "name": "positions",
    "topic": "positions",
    "value_format": "json",
    "indexes": [{"name": "by_ticker", "field": "ticker"}, {"name": "by_qty", "field": "lot.qty"}],
}


def position_value(i: int) -> bytes:
    return orjson.dumps({"id": i, "ticker": TICKERS[i % 4] if i < 200 else "AAPL", "lot": {"qty": i % 3}})


def positions_store() -> InMemoryStore:
    """250 positions: ids 0-199 spread over four tickers, 200-249 all AAPL (100 AAPL rows in all)."""
    store = InMemoryStore(
        "positions",
        indexes=[IndexSpec("by_ticker", "ticker"), IndexSpec("by_qty", "lot.qty")],
        keeps_history=True,
    )
    store.apply([(i % 2, i // 2, f"pos-{i:04}".encode(), position_value(i)) for i in range(250)])
    store.apply([(0, 125, b"pos-\xff", orjson.dumps({"ticker": "RAW"}))])
    return store


def expected_keys(ticker: str) -> list[str]:
    return [f"pos-{i:04}" for i in range(250) if orjson.loads(position_value(i))["ticker"] == ticker]


@pytest.fixture
def positions(make_service: Callable[..., Service]) -> Service:
    return make_service({"positions": positions_store()}, configs=[POSITIONS_CONFIG])


def arrow_values(values: pa.Array) -> bytes:
    table = pa.table({"value": values})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def read_arrow(body: bytes) -> pa.Table:
    return pa.ipc.open_stream(body).read_all()


def page_through(service: Service, path: str, **params: Any) -> tuple[list[str], int]:
    keys: list[str] = []
    after: str | None = None
    pages = 0
    while True:
        query = {**params, **({"after": after} if after is not None else {})}
        response = service.client.get(path, params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["position"] == response.headers["Statestore-Position"] == "0:126,1:125"
        keys += [item["key"] for item in body["items"]]
        pages += 1
        after = body["next_after"]
        if after is None:
            return keys, pages


def test_lookup_pages_through_every_row_of_a_value_in_row_key_order(positions: Service) -> None:
    keys, pages = page_through(positions, f"{URL}/AAPL", limit=30)
    assert keys == expected_keys("AAPL")
    assert len(keys) == 100
    assert pages == 4


def test_lookup_answers_the_rows_themselves(positions: Service) -> None:
    body = positions.client.get(f"{URL}/MSFT", params={"limit": 2}).json()
    assert body["items"] == [
        {"key": "pos-0001", "value": {"id": 1, "ticker": "MSFT", "lot": {"qty": 1}}},
        {"key": "pos-0005", "value": {"id": 5, "ticker": "MSFT", "lot": {"qty": 2}}},
    ]
    assert body["next_after"] == "pos-0005"


def test_lookup_default_limit_is_100(positions: Service) -> None:
    body = positions.client.get(f"{URL}/AAPL").json()
    assert len(body["items"]) == 100
    assert body["next_after"] is None
    cut = positions.client.get(f"{URL}/AAPL", params={"limit": 99}).json()
    assert cut["next_after"] == "pos-0248"
    last = positions.client.get(f"{URL}/AAPL", params={"after": "pos-0248"}).json()
    assert [item["key"] for item in last["items"]] == ["pos-0249"]
    assert last["next_after"] is None


@pytest.mark.parametrize("ticker", ["BRK/B", "Ünï €"])
def test_lookup_of_percent_encoded_values(positions: Service, ticker: str) -> None:
    keys, _ = page_through(positions, f"{URL}/{quote(ticker, safe='')}", limit=1000)
    assert keys == expected_keys(ticker)
    assert len(keys) == 50


def test_lookup_of_a_number_by_its_json_text_in_a_nested_field(positions: Service) -> None:
    keys, _ = page_through(positions, "/v1/stores/positions/indexes/by_qty/2", limit=1000)
    assert keys == [f"pos-{i:04}" for i in range(250) if i % 3 == 2]


def test_lookup_without_match_is_an_empty_page(positions: Service) -> None:
    body = positions.client.get(f"{URL}/NOPE").json()
    assert body == {"items": [], "next_after": None, "position": "0:126,1:125"}


def test_lookup_with_base64_row_keys_and_cursor(positions: Service) -> None:
    body = positions.client.get(f"{URL}/RAW", params={"key_encoding": "base64"}).json()
    assert [base64.b64decode(item["key"]) for item in body["items"]] == [b"pos-\xff"]
    assert_problem(positions.client.get(f"{URL}/RAW"), 400, "bad-key-encoding")
    first = positions.client.get(f"{URL}/AAPL", params={"key_encoding": "base64", "limit": 1}).json()
    cursor = first["next_after"]
    assert base64.b64decode(cursor) == b"pos-0000"
    following = positions.client.get(f"{URL}/AAPL", params={"key_encoding": "base64", "after": cursor}).json()
    assert base64.b64decode(following["items"][0]["key"]) == b"pos-0004"


def test_lookup_problems(positions: Service) -> None:
    client = positions.client
    unknown = assert_problem(client.get("/v1/stores/positions/indexes/by_name/x"), 404, "unknown-index")
    assert (unknown["store"], unknown["index"]) == ("positions", "by_name")
    assert (
        assert_problem(client.get("/v1/stores/nope/indexes/by_ticker/x"), 404, "unknown-store")["store"]
        == "nope"
    )
    too_large = assert_problem(client.get(f"{URL}/AAPL", params={"limit": 10_001}), 413, "page-too-large")
    assert too_large["limit"] == 10_000
    for limit in ("0", "x"):
        invalid = assert_problem(client.get(f"{URL}/AAPL", params={"limit": limit}), 422, "invalid-parameter")
        assert invalid["errors"][0]["loc"] == ["query", "limit"]
    assert_problem(client.get(f"{URL}/%FF"), 400, "bad-key-encoding")
    assert_problem(
        client.get(f"{URL}/AAPL", params={"after": "***", "key_encoding": "base64"}), 400, "bad-key-encoding"
    )
    assert_problem(client.get(f"{URL}/AAPL", params={"key_encoding": "hex"}), 400, "bad-key-encoding")
    assert_problem(client.get(f"{URL}/{'x' * 4097}"), 413, "key-too-large")
    assert_problem(client.post(f"{URL}/AAPL"), 405, "method-not-allowed")
    assert_problem(client.get(BATCH), 405, "method-not-allowed")
    # Nothing changed.
    assert len(client.get(f"{URL}/AAPL").json()["items"]) == 100


def test_batch_json_answers_every_value_once_in_request_order(positions: Service) -> None:
    values = ["MSFT", "NOPE", "BRK/B", "MSFT"]
    response = positions.client.post(BATCH, json={"values": values, "limit_per_value": 20})
    assert response.status_code == 200, response.text
    assert response.headers["Statestore-Position"] == "0:126,1:125"
    body = response.json()
    assert body["position"] == "0:126,1:125"
    assert [result["value"] for result in body["results"]] == ["MSFT", "NOPE", "BRK/B"]
    msft, nope, brk = body["results"]
    assert [item["key"] for item in msft["items"]] == expected_keys("MSFT")[:20]
    assert msft["items"][0]["value"] == {"id": 1, "ticker": "MSFT", "lot": {"qty": 1}}
    assert msft["next_after"] == expected_keys("MSFT")[19]
    assert nope == {"value": "NOPE", "items": [], "next_after": None}
    assert brk["next_after"] == expected_keys("BRK/B")[19]


SHARED = 300  # rows sharing one indexed value


@pytest.fixture
def shared(make_service: Callable[..., Service]) -> Service:
    """A store whose rows all share the ticker ZZZ, and an answer bound of 1,000 rows."""
    store = InMemoryStore("positions", indexes=[IndexSpec("by_ticker", "ticker")])
    store.apply([(0, i, f"z{i:04}".encode(), b'{"ticker":"ZZZ"}') for i in range(SHARED)])
    config = {**POSITIONS_CONFIG, "indexes": [{"name": "by_ticker", "field": "ticker"}]}
    return make_service({"positions": store}, configs=[config], limits={"max_answer_rows": 1000})


def test_a_value_asked_many_times_is_answered_once(shared: Service) -> None:
    body = shared.client.post(BATCH, json={"values": ["ZZZ"] * 1000, "limit_per_value": SHARED}).json()
    assert [(r["value"], len(r["items"])) for r in body["results"]] == [("ZZZ", SHARED)]
    arrow = shared.client.post(
        BATCH,
        params={"limit_per_value": SHARED},
        content=arrow_values(pa.array(["ZZZ", "NOPE"] * 500)),
        headers={"content-type": ARROW},
    )
    table = read_arrow(arrow.content)
    assert table.column("value").to_pylist() == ["ZZZ"] * SHARED + ["NOPE"]


def test_an_answer_of_more_rows_than_max_answer_rows_is_413(shared: Service) -> None:
    many = [f"V{i}" for i in range(1001)]  # each takes one row (no match)
    for request in (
        {"json": {"values": many}},
        {"content": arrow_values(pa.array(many)), "headers": {"content-type": ARROW}},
    ):
        body = assert_problem(shared.client.post(BATCH, **request), 413, "answer-too-large")  # type: ignore[arg-type]
        assert body["limit"] == 1000
        assert "limits.max_answer_rows" in body["detail"]
    assert shared.client.post(BATCH, json={"values": many[:1000]}).status_code == 200
    # Rows of matches count: 300 rows for ZZZ and 701 for values without matches.
    assert_problem(
        shared.client.post(BATCH, json={"values": ["ZZZ", *many[:701]], "limit_per_value": SHARED}),
        413,
        "answer-too-large",
    )
    assert (
        shared.client.post(
            BATCH, json={"values": ["ZZZ", *many[:700]], "limit_per_value": SHARED}
        ).status_code
        == 200
    )


def test_batch_json_default_limit_and_cursor_pages_on_with_get(positions: Service) -> None:
    body = positions.client.post(BATCH, json={"values": ["AAPL"]}).json()
    assert len(body["results"][0]["items"]) == 100
    assert body["results"][0]["next_after"] is None
    cut = positions.client.post(BATCH, json={"values": ["AAPL"], "limit_per_value": 60}).json()["results"][0]
    rest = positions.client.get(f"{URL}/AAPL", params={"after": cut["next_after"]}).json()
    assert [item["key"] for item in cut["items"] + rest["items"]] == expected_keys("AAPL")


def test_batch_json_limit_per_value_from_the_query_and_base64_keys(positions: Service) -> None:
    response = positions.client.post(
        BATCH, params={"limit_per_value": 1}, json={"values": ["RAW", "AAPL"], "key_encoding": "base64"}
    )
    raw, aapl = response.json()["results"]
    assert [base64.b64decode(item["key"]) for item in raw["items"]] == [b"pos-\xff"]
    assert raw["next_after"] is None
    assert base64.b64decode(aapl["next_after"]) == b"pos-0000"


def test_batch_arrow_one_row_per_match_or_one_null_row(positions: Service) -> None:
    response = positions.client.post(
        BATCH,
        params={"limit_per_value": 3},
        content=arrow_values(pa.array(["MSFT", "NOPE", "RAW", "BRK/B"])),
        headers={"content-type": ARROW},
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == ARROW
    assert response.headers["Statestore-Position"] == "0:126,1:125"
    table = read_arrow(response.content)
    assert table.schema == pa.schema(
        [("value", pa.string()), ("key", pa.binary()), ("row", pa.binary()), ("next_after", pa.binary())]
    )
    msft, brk = expected_keys("MSFT")[:3], expected_keys("BRK/B")[:3]
    assert table.column("value").to_pylist() == ["MSFT"] * 3 + ["NOPE", "RAW"] + ["BRK/B"] * 3
    assert table.column("key").to_pylist() == [k.encode() for k in msft] + [None, b"pos-\xff"] + [
        k.encode() for k in brk
    ]
    assert orjson.loads(table.column("row")[0].as_py()) == {"id": 1, "ticker": "MSFT", "lot": {"qty": 1}}
    assert table.column("row")[3].as_py() is None
    cursors = [None, None, msft[-1].encode(), None, None, None, None, brk[-1].encode()]
    assert table.column("next_after").to_pylist() == cursors


def test_batch_arrow_large_string_values_and_no_values(positions: Service) -> None:
    body = arrow_values(pa.array(["RAW"], type=pa.large_string()))
    table = read_arrow(positions.client.post(BATCH, content=body, headers={"content-type": ARROW}).content)
    assert table.column("key").to_pylist() == [b"pos-\xff"]
    empty = arrow_values(pa.array([], type=pa.string()))
    answer = read_arrow(positions.client.post(BATCH, content=empty, headers={"content-type": ARROW}).content)
    assert answer.num_rows == 0


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        b"[]",
        b'{"values": "AAPL"}',
        b'{"values": [1]}',
        b'{"keys": ["AAPL"]}',
        b'{"values": [], "limit_per_value": 0}',
    ],
)
def test_batch_malformed_json(positions: Service, body: bytes) -> None:
    response = positions.client.post(BATCH, content=body, headers={"content-type": "application/json"})
    assert isinstance(assert_problem(response, 400, "malformed-request")["errors"], list)


@pytest.mark.parametrize(
    "body",
    [
        b"not arrow",
        arrow_values(pa.array([b"AAPL"])),  # binary, not string
        arrow_values(pa.array(["AAPL", None])),
        b"",
    ],
)
def test_batch_malformed_arrow(positions: Service, body: bytes) -> None:
    assert_problem(
        positions.client.post(BATCH, content=body, headers={"content-type": ARROW}), 400, "malformed-request"
    )


def test_batch_arrow_columns_besides_value_and_bodies_over_the_limit_once_decompressed_are_refused(
    make_service: Callable[..., Service],
) -> None:
    service = make_service(
        {"positions": positions_store()}, configs=[POSITIONS_CONFIG], limits={"max_body_bytes": 4096}
    )
    two_columns = pa.table({"value": pa.array(["AAPL"]), "pad": pa.array([b"x"])})
    squeezed = pa.table({"value": pa.array(["A" * 1000] * 8)})
    bodies = []
    for table in (two_columns, squeezed):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(
            sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")
        ) as writer:
            writer.write_table(table)
        bodies.append(sink.getvalue().to_pybytes())
    headers = {"content-type": ARROW}
    assert (
        "'pad'"
        in assert_problem(
            service.client.post(BATCH, content=bodies[0], headers=headers), 400, "malformed-request"
        )["detail"]
    )
    assert len(bodies[1]) < 4096
    assert_problem(service.client.post(BATCH, content=bodies[1], headers=headers), 413, "body-too-large")


def test_batch_arrow_without_value_column(positions: Service) -> None:
    table = pa.table({"key": pa.array(["AAPL"])})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    response = positions.client.post(
        BATCH, content=sink.getvalue().to_pybytes(), headers={"content-type": ARROW}
    )
    assert_problem(response, 400, "malformed-request")


def test_batch_limits(make_service: Callable[..., Service]) -> None:
    service = make_service(
        {"positions": positions_store()}, configs=[POSITIONS_CONFIG], limits={"max_batch_keys": 3}
    )
    client = service.client
    body = assert_problem(client.post(BATCH, json={"values": ["a", "b", "c", "d"]}), 413, "batch-too-large")
    assert body["limit"] == 3
    arrow = arrow_values(pa.array(["a", "b", "c", "d"]))
    assert_problem(client.post(BATCH, content=arrow, headers={"content-type": ARROW}), 413, "batch-too-large")
    page = assert_problem(
        client.post(BATCH, json={"values": ["a"], "limit_per_value": 10_001}), 413, "page-too-large"
    )
    assert page["limit"] == 10_000
    assert_problem(
        client.post(BATCH, params={"limit_per_value": "0"}, json={"values": ["a"]}), 422, "invalid-parameter"
    )
    assert_problem(client.post(BATCH, json={"values": ["x" * 4097]}), 413, "key-too-large")
    assert_problem(
        client.post(BATCH, content=b"AAPL", headers={"content-type": "text/plain"}),
        415,
        "unsupported-media-type",
    )
    unknown = client.post("/v1/stores/positions/indexes/by_name:batchGet", json={"values": ["a"]})
    assert assert_problem(unknown, 404, "unknown-index")["index"] == "by_name"
    assert client.post(BATCH, json={"values": ["a", "b", "c"]}).status_code == 200


class BuildingIndexStore(InMemoryStore):
    """An in-memory store whose index ``by_ticker`` is still being built (as after adding it)."""

    @contextlib.contextmanager
    def view(self, as_of: Any = None) -> Iterator[ReadOnlyKeyValueStore]:
        with super().view(as_of) as view:
            yield _Building(view)

    def status(self) -> StoreStatus:
        status = super().status()
        status.indexes["by_ticker"] = IndexStatus(field="ticker", state="building", rows_indexed=12)
        return status


class _Building:
    def __init__(self, view: ReadOnlyKeyValueStore) -> None:
        self._view = view

    def get(self, key: bytes) -> bytes | None:
        return self._view.get(key)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return self._view.get_many(keys)

    def prefix_scan(self, prefix: bytes, *, after: bytes | None = None, limit: int = 1000) -> ScanPage:
        return self._view.prefix_scan(prefix, after=after, limit=limit)

    def position(self) -> Position:
        return self._view.position()

    def index_scan(
        self, index: str, value: bytes, *, after: bytes | None = None, limit: int = 1000
    ) -> ScanPage:
        if index == "by_ticker":
            raise IndexNotReadyError(index)
        return self._view.index_scan(index, value, after=after, limit=limit)


def test_index_being_built_is_503_with_retry_after(make_service: Callable[..., Service]) -> None:
    store = BuildingIndexStore("positions", indexes=[IndexSpec("by_qty", "lot.qty")])
    store.apply([(0, 0, b"pos-1", position_value(1))])
    service = make_service({"positions": store}, configs=[POSITIONS_CONFIG])
    for response in (
        service.client.get(f"{URL}/AAPL"),
        service.client.post(BATCH, json={"values": ["AAPL"]}),
    ):
        body = assert_problem(response, 503, "index-not-ready")
        assert (body["store"], body["index"]) == ("positions", "by_ticker")
        assert response.headers["Retry-After"] == "1"
    info = service.client.get("/v1/stores/positions").json()
    assert info["indexes"]["by_ticker"] == {"field": "ticker", "state": "building", "rows_indexed": 12}
    # The other index answers meanwhile.
    assert service.client.get("/v1/stores/positions/indexes/by_qty/1").json()["items"][0]["key"] == "pos-1"


def test_numbers_are_looked_up_by_their_text_as_written(make_service: Callable[..., Service]) -> None:
    written = [b"12345678901234567890123", b"12345678901234567890124", b"1e2", b"100", b"1.50", b"-0"]
    store = InMemoryStore("positions", indexes=[IndexSpec("by_ticker", "ticker")])
    store.apply([(0, i, b"n%d" % i, b'{"ticker": %s}' % text) for i, text in enumerate(written)])
    config = {**POSITIONS_CONFIG, "indexes": [{"name": "by_ticker", "field": "ticker"}]}
    service = make_service({"positions": store}, configs=[config])
    for i, text in enumerate(written):
        response = service.client.get(f"{URL}/{text.decode()}")
        assert response.status_code == 200, response.text
        assert [item["key"] for item in response.json()["items"]] == [f"n{i}"], text
    for rendering in ["1.2345678901234568e+22", "100.0", "1.5", "0"]:
        assert service.client.get(f"{URL}/{rendering}").json()["items"] == [], rendering
    response = service.client.post(BATCH, json={"values": ["1e2", "12345678901234567890124"]})
    assert [[item["key"] for item in result["items"]] for result in response.json()["results"]] == [
        ["n2"],
        ["n1"],
    ]
